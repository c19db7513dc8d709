"""finance.features: stockstats-compatible indicators, causality, turbulence, scaler, splits."""

import numpy as np
import pandas as pd
import pytest

from finance.data import load_prices
from finance.features import (DEFAULT_INDICATORS, FeatureScaler, add_features, split_by_date, turbulence,
                              warmup_days)


@pytest.fixture(scope="module")
def ohlcv() -> pd.DataFrame:
    return load_prices(None, "2005-01-01", "2006-12-31", source="sample_ohlcv")


@pytest.fixture(scope="module")
def closes() -> pd.DataFrame:
    return load_prices(["AAPL", "JPM", "KO", "XOM", "RRC"], "1998-01-01", "2000-12-31", source="sample")


# Values from stockstats 0.6.10 (StockDataFrame.retype(...)[name]) on the same AAPL rows: rows
# 1, 29, 59 and 124 of the first half of 2005. Row 1 shows the warm-up convention, 124 a full window.
STOCKSTATS_AAPL_2005H1 = {
    "macd": [0.000937820512820764, 0.1692713607644558, 0.04413100546061699, -0.02476643412073276],
    "boll_ub": [4.146814126907196, 5.443005164639791, 5.722483009114989, 5.028666880285973],
    "boll_lb": [4.028585873092804, 4.302524835360208, 5.044196990885012, 4.566963119714027],
    "rsi_30": [100.0, 76.97465797154337, 58.352007605250975, 47.38333469889333],
    "cci_30": [0.0, 154.64963356636378, -11.818858663096494, -77.26733708068426],
    "dx_30": [100.0, 60.94762450662896, 7.864017097741454, 12.460052113453326],
    "close_30_sma": [4.0877, 4.671823333333333, 5.480876666666666, 4.89381],
    "close_60_sma": [4.0877, 4.671823333333333, 5.076350000000001, 4.836131666666668],
}


def test_indicators_match_stockstats_reference():
    prices = load_prices(["AAPL"], "2005-01-01", "2005-06-30", source="sample_ohlcv")
    features = add_features(prices)
    rows = [1, 29, 59, 124]
    assert len(features) == 125
    for name, expected in STOCKSTATS_AAPL_2005H1.items():
        np.testing.assert_allclose(features[name]["AAPL"].to_numpy()[rows], expected, rtol=1e-9, err_msg=name)


def test_features_shape_index_and_no_nan(ohlcv, closes):
    for prices in (ohlcv, closes):
        features = add_features(prices)
        tickers = list(prices["close"].columns)
        assert features.index.equals(prices.index)
        assert features.columns.names == ["feature", "ticker"]
        assert list(features.columns) == [(f, t) for f in DEFAULT_INDICATORS for t in tickers]
        assert np.isfinite(features.to_numpy()).all()
    # Warm-up convention: RSI starts neutral, bands start collapsed on the close.
    features = add_features(closes)
    assert (features["rsi_30"].iloc[0] == 50.0).all()
    pd.testing.assert_frame_equal(features["boll_ub"].iloc[:1], closes["close"].iloc[:1], check_names=False)


def test_close_only_dx_is_a_function_of_rsi(closes):
    """Documented: with high = low = close, dx_n == |2 rsi_n - 100| (rows after the first)."""
    features = add_features(closes)
    np.testing.assert_allclose(features["dx_30"].iloc[1:], (2 * features["rsi_30"].iloc[1:] - 100).abs(), atol=1e-9)


def test_plain_close_frame_and_custom_indicators(closes):
    features = add_features(closes["close"], indicators=["rsi_14", "close_5_ema", "boll", "cci"])
    assert list(features.columns.get_level_values("feature").unique()) == ["rsi_14", "close_5_ema", "boll", "cci"]
    expected = closes["close"].ewm(span=5, adjust=True).mean()
    pd.testing.assert_frame_equal(features["close_5_ema"], expected, check_names=False)
    assert warmup_days() == 60 and warmup_days(["macd", "rsi_14"]) == 26


def test_feature_input_errors(closes):
    with pytest.raises(ValueError, match="unknown indicator 'rsi30'"):
        add_features(closes, ["rsi30"])
    with pytest.raises(ValueError, match="distinct"):
        add_features(closes, ["macd", "macd"])
    gappy = closes["close"].copy()
    gappy.iloc[5, 1] = np.nan
    with pytest.raises(ValueError, match="NaN in close prices of JPM"):
        add_features(gappy)
    with pytest.raises(ValueError, match="'close' field"):
        add_features(closes.rename(columns={"close": "price"}, level=0))


def _perturb_after(prices: pd.DataFrame, t: int, seed: int = 0) -> pd.DataFrame:
    """Every value after row t multiplied by a random factor in [0.5, 1.5]."""
    rng = np.random.default_rng(seed)
    out = prices.copy()
    out.iloc[t + 1:] = out.iloc[t + 1:].to_numpy() * rng.uniform(0.5, 1.5, size=out.iloc[t + 1:].shape)
    return out


@pytest.mark.parametrize("t", [0, 40, 300])
def test_features_and_turbulence_are_causal(ohlcv, closes, t):
    for prices in (ohlcv, closes):
        changed = _perturb_after(prices, t)
        before, after = add_features(prices), add_features(changed)
        pd.testing.assert_frame_equal(before.iloc[:t + 1], after.iloc[:t + 1], check_exact=True)
        assert not np.allclose(before.iloc[t + 1:], after.iloc[t + 1:])  # the perturbation is seen later
        for window in (20, 252):
            turb_before, turb_after = turbulence(prices["close"], window), turbulence(changed["close"], window)
            pd.testing.assert_series_equal(turb_before.iloc[:t + 1], turb_after.iloc[:t + 1], check_exact=True)
            assert not np.allclose(turb_before.iloc[max(t, window) + 1:], turb_after.iloc[max(t, window) + 1:])


def test_turbulence_matches_a_direct_computation(closes):
    close, window = closes["close"], 60
    turb = turbulence(close, window)
    assert turb.name == "turbulence" and turb.index.equals(close.index)
    assert (turb.iloc[:window + 1] == 0).all() and (turb >= 0).all() and (turb.iloc[window + 1:] > 0).all()
    returns = close.pct_change()
    for t in (window + 1, 200, len(close) - 1):  # FinRL's loop, one day at a time
        hist = returns.iloc[t - window:t]
        dev = returns.iloc[t] - hist.mean()
        expected = dev.to_numpy() @ np.linalg.pinv(hist.cov().to_numpy()) @ dev.to_numpy()
        assert turb.iloc[t] == pytest.approx(expected, rel=1e-8)


def test_turbulence_errors(closes):
    with pytest.raises(ValueError, match="window must be >= 2"):
        turbulence(closes["close"], 1)
    with pytest.raises(ValueError, match="pass prices\\['close'\\]"):
        turbulence(closes)
    gappy = closes["close"].copy()
    gappy.iloc[3, 0] = np.nan
    with pytest.raises(ValueError, match=r"1 NaN/inf prices \(first at 1998-01-07, AAPL: nan\).*ffill"):
        turbulence(gappy)


# ---------------------------------------------------------------------------- scaler
def test_scaler_uses_training_dates_only(closes):
    features = add_features(closes)
    splits = split_by_date(features, train=("1998-01-01", "1999-06-30"), test=("1999-07-01", "2000-12-31"))
    scaler = FeatureScaler(clip=10.0).fit(splits["train"])
    pd.testing.assert_series_equal(scaler.mean_, splits["train"].mean())

    # Test data, however extreme, does not move the statistics or the training transform.
    train_z = scaler.transform(splits["train"])
    assert np.allclose(train_z.mean(), 0, atol=1e-9) and np.allclose(train_z.std(ddof=0), 1, atol=1e-9)
    test_z = scaler.transform(splits["test"] * 3.0)
    pd.testing.assert_series_equal(scaler.mean_, splits["train"].mean())
    pd.testing.assert_frame_equal(scaler.transform(splits["train"]), train_z)
    expected = ((splits["test"] * 3.0 - splits["train"].mean()) / splits["train"].std(ddof=0)).clip(-10, 10)
    pd.testing.assert_frame_equal(test_z, expected)
    assert test_z.abs().max().max() == 10.0  # tripled prices land outside the range: clipped


def test_scaler_edge_cases(closes):
    features = add_features(closes)
    with pytest.raises(ValueError, match="not fitted"):
        FeatureScaler().transform(features)
    scaler = FeatureScaler().fit(features)
    with pytest.raises(ValueError, match="columns differ"):
        scaler.transform(features.drop(columns="macd", level="feature"))
    with pytest.raises(ValueError, match="empty"):
        FeatureScaler().fit(features.iloc[:0])
    with pytest.raises(ValueError, match="clip must be > 0"):
        FeatureScaler(clip=0)
    constant = pd.DataFrame({"a": [2.0, 2.0, 2.0], "b": [1.0, 2.0, 3.0]}, index=features.index[:3])
    out = FeatureScaler().fit_transform(constant)
    assert (out["a"] == 0).all() and np.isfinite(out.to_numpy()).all()


# ---------------------------------------------------------------------------- splits
def test_split_frames_series_and_dicts(closes):
    turb = turbulence(closes["close"], 60)
    ranges = dict(train=("1998-01-01", "1999-12-31"), valid=("2000-01-01", "2000-06-30"), test=("2000-07-01", None))
    frames = split_by_date(closes, **ranges)
    assert list(frames) == ["train", "valid", "test"]
    assert frames["train"].index[-1] == pd.Timestamp("1999-12-31")  # end is inclusive
    assert frames["valid"].index[0] == pd.Timestamp("2000-01-03")
    assert frames["test"].index[-1] == closes.index[-1]
    assert sum(len(f) for f in frames.values()) == len(closes)
    series = split_by_date(turb, test=ranges["test"])
    assert list(series) == ["test"] and isinstance(series["test"], pd.Series)
    bundle = split_by_date({"prices": closes, "turbulence": turb}, **ranges)
    assert bundle["valid"]["prices"].index.equals(bundle["valid"]["turbulence"].index)
    pd.testing.assert_frame_equal(bundle["train"]["prices"], frames["train"])


def test_split_errors(closes):
    with pytest.raises(ValueError, match="train .* and test .* overlap"):
        split_by_date(closes, train=("1998-01-01", "1999-12-31"), test=("1999-12-31", "2000-12-31"))
    with pytest.raises(ValueError, match="train .* and valid .* overlap"):
        split_by_date(closes, train=(None, "1999-12-31"), valid=("1999-01-01", None))
    with pytest.raises(ValueError, match="test split .* is empty; the data covers 1998-01-02 .. 2000-12-29"):
        split_by_date(closes, train=("1998-01-01", "1999-12-31"), test=("2001-01-01", "2001-12-31"))
    with pytest.raises(ValueError, match="of 'turb'"):
        split_by_date({"prices": closes, "turb": turbulence(closes["close"]).iloc[:10]}, valid=("1999-01-01", None))
    with pytest.raises(ValueError, match="reversed"):
        split_by_date(closes, train=("1999-12-31", "1998-01-01"))
    with pytest.raises(ValueError, match="at least one"):
        split_by_date(closes)
    with pytest.raises(ValueError, match="pair"):
        split_by_date(closes, train="1998")
    with pytest.raises(ValueError, match="DatetimeIndex"):
        split_by_date(closes.reset_index(drop=True), train=("1998-01-01", "1999-12-31"))



# ---------------------------------------------------------------------------- input order and values
def test_newest_first_or_repeated_dates_are_refused(ohlcv, closes):
    """A newest-first frame would make every rolling window average the future (and the causality
    test above pass on the reversed time axis): refused, naming the dates and the fix."""
    for prices in (ohlcv, closes, closes["close"]):
        with pytest.raises(ValueError, match=r"prices: dates are newest first, .* \(row 1\) comes after .* \(row 0\).*"
                                             r"df = df.sort_index\(\)"):
            add_features(prices.iloc[::-1])
    with pytest.raises(ValueError, match=r"turbulence's closes: dates are newest first, 2000-12-28 \(row 1\) comes "
                                         r"after 2000-12-29"):
        turbulence(closes["close"].iloc[::-1])
    repeated = pd.concat([closes.iloc[:5], closes.iloc[4:]])
    with pytest.raises(ValueError, match=r"prices: duplicate dates \(1 repeated rows; the first is 1998-01-08, rows 4 "
                                         r"and 5\).*keep one row per date"):
        add_features(repeated)
    with pytest.raises(ValueError, match="turbulence's closes: duplicate dates"):
        turbulence(repeated["close"])
    shuffled = closes.iloc[[0, 2, 1] + list(range(3, len(closes)))]
    with pytest.raises(ValueError, match="dates are out of order, 1998-01-05 \\(row 2\\) comes after 1998-01-06"):
        add_features(shuffled)


@pytest.mark.parametrize("bad", [0.0, -3.0, np.inf])
def test_zero_negative_or_infinite_prices_are_refused(closes, bad):
    close = closes["close"].copy()
    close.iloc[300, 2] = bad  # a 0 made turbulence fail deep inside numpy (LinAlgError: SVD did not converge)
    kind = "NaN/inf" if np.isinf(bad) else "non-positive"
    with pytest.raises(ValueError, match=rf"turbulence's closes: 1 {kind} prices \(first at 1999-03-15, KO: {bad}\)"):
        turbulence(close)
    with pytest.raises(ValueError, match=rf"close prices: 1 {kind} prices \(first at 1999-03-15, KO"):
        add_features(close)


def test_turbulence_window_is_an_integer(closes):
    close = closes["close"].iloc[:80]
    pd.testing.assert_series_equal(turbulence(close, np.int64(20)), turbulence(close, 20))
    for window in (20.5, True):
        with pytest.raises(ValueError, match=r"window must be >= 2 \(an integer\)"):
            turbulence(close, window)
