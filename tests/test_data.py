"""finance.data: bundled samples, the yfinance path with the network simulated, cleaning, errors."""

import warnings

import numpy as np
import pandas as pd
import pytest
import yfinance

from finance.data import (FIELDS, SAMPLE_OHLCV_TICKERS, SAMPLE_TICKERS, DataError, DataUnavailableError, DataWarning,
                          _cache_path, load_benchmark, load_prices)


def _check_panel(prices: pd.DataFrame, fields: list[str], tickers: list[str]) -> None:
    """The documented output contract."""
    assert isinstance(prices.index, pd.DatetimeIndex) and prices.index.tz is None
    assert prices.index.name == "date" and prices.index.is_monotonic_increasing and prices.index.is_unique
    assert prices.columns.names == ["field", "ticker"]
    assert list(prices.columns) == [(f, t) for f in fields for t in tickers]
    assert list(prices["close"].columns) == tickers
    assert np.isfinite(prices.to_numpy()).all()
    assert (prices.drop(columns="volume", level="field", errors="ignore") > 0).all().all()


# ---------------------------------------------------------------------------- samples
def test_sample_all_tickers_and_dates():
    prices = load_prices(None, source="sample")
    _check_panel(prices, ["close"], list(SAMPLE_TICKERS))
    assert len(prices) == 8313
    assert prices.index[0] == pd.Timestamp("1990-01-02") and prices.index[-1] == pd.Timestamp("2022-12-28")


def test_sample_subset_keeps_order_and_inclusive_end():
    prices = load_prices(["MSFT", "AAPL", "MSFT"], "2010-01-01", "2010-12-31", source="sample", min_days=200)
    _check_panel(prices, ["close"], ["MSFT", "AAPL"])
    assert len(prices) == 252 and prices.index[-1] == pd.Timestamp("2010-12-31")
    assert load_prices("KO", "2010-12-31", "2010-12-31", source="sample").shape == (1, 1)


def test_sample_ohlcv():
    prices = load_prices(None, "2005-01-01", "2005-12-31", source="sample_ohlcv")
    _check_panel(prices, list(FIELDS), list(SAMPLE_OHLCV_TICKERS))
    assert (prices["high"] >= prices[["open", "close", "low"]].T.groupby(level="ticker").max().T).all().all()
    assert (prices["low"] <= prices[["open", "close"]].T.groupby(level="ticker").min().T).all().all()
    # Split-adjusted: AAPL's 2:1 split on 2005-02-28 is not a -50% day.
    assert prices["close"]["AAPL"].pct_change().abs().max() < 0.2
    only = load_prices(["IBM"], "2005-01-01", "2005-12-31", source="sample_ohlcv", fields=["close", "open"])
    _check_panel(only, ["open", "close"], ["IBM"])


def test_sample_ohlcv_warns_for_late_listing():
    """GOOG starts in 2004: asking from 2003 drops it, by name (not silently)."""
    with pytest.warns(DataWarning, match=r"GOOG has no price before 2004-08-19"):
        prices = load_prices(None, "2003-01-01", "2005-01-01", source="sample_ohlcv")
    assert list(prices["close"].columns) == ["AAPL", "IBM", "MSFT"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        assert "GOOG" in load_prices(None, "2004-08-19", "2005-01-01", source="sample_ohlcv")["close"]


def test_benchmark_sample_aligns_with_prices():
    bench = load_benchmark("2020-01-01", "2020-12-31")
    assert isinstance(bench, pd.Series) and bench.name == "S&P 500" and bench.index.name == "date"
    assert bench.index.equals(load_prices(["AAPL"], "2020-01-01", "2020-12-31", source="sample").index)
    assert bench.iloc[0] == pytest.approx(3257.85)


def test_benchmark_from_a_file(tmp_path):
    path = tmp_path / "bench.csv"
    pd.DataFrame({"date": pd.bdate_range("2021-01-01", periods=5), "SPX": [1.0, 2, 3, 4, 5]}).to_csv(path, index=False)
    bench = load_benchmark(None, None, source=path)
    assert bench.name == "S&P 500" and bench.tolist() == [1.0, 2, 3, 4, 5]


# ---------------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("kwargs, match", [
    (dict(source="yahoo"), r"unknown source 'yahoo': expected 'yfinance', 'sample'"),
    (dict(tickers=["AAPL", "TSLA"]), r"unknown tickers \['TSLA'\] for source 'sample'; available: AAPL, AMD"),
    (dict(tickers=["aapl"]), r"did you mean 'AAPL'"),
    (dict(tickers=["IBM"]), r"source='sample_ohlcv' has AAPL, GOOG, IBM, MSFT"),
    (dict(tickers=[]), r"one or more non-empty tickers"),
    (dict(start="2010-12-31", end="2010-01-01"), r"reversed date range: start 2010-12-31 is after end 2010-01-01"),
    (dict(start="2030-01-01", end="2030-12-31"), r"no dates between 2030-01-01 and 2030-12-31 .* covers 1990-01-02 "
                                                 r"\.\. 2022-12-28"),
    (dict(start="2010-01-02", end="2010-01-03"), r"no dates between 2010-01-02 and 2010-01-03"),  # a weekend
    (dict(start="last tuesday"), r"start='last tuesday' is not a date"),
    (dict(start="2010-01-01", end="2010-01-31", min_days=60), r"got 19 dates .* need at least min_days=60; start "
                                                               r"earlier"),
    (dict(min_days=0), r"min_days must be >= 1"),
    (dict(min_days=2.5), r"min_days must be >= 1 \(an integer\), got 2.5 \(float\)"),  # was truncated to 2
    (dict(min_days=True), r"min_days must be >= 1 \(an integer\), got True \(bool\)"),
    (dict(ffill_limit=-1), r"ffill_limit must be >= 0"),
    (dict(ffill_limit=1.5), r"ffill_limit must be >= 0 \(an integer\), got 1.5"),
    (dict(fields=["close", "adj_close"]), r"unknown fields \['adj_close'\]"),
    (dict(fields=["open", "close"]), r"source 'sample' has no \['open'\] .* Use source='sample_ohlcv' or 'yfinance'"),
    (dict(fields=["volume"]), r"has no price; add 'close'"),
    (dict(interval="1h"), r"daily, got interval='1h'"),
])
def test_bad_inputs_raise_clear_errors(kwargs, match):
    args = dict(tickers=["AAPL"], start="2010-01-01", end="2010-12-31", source="sample") | kwargs
    with pytest.raises(DataError, match=match):
        load_prices(**args)


def test_yfinance_argument_errors(tmp_path):
    with pytest.raises(DataError, match="yfinance needs a start date"):
        load_prices(["AAPL"], source="yfinance", cache_dir=tmp_path)
    with pytest.raises(DataError, match="yfinance needs a list of tickers"):
        load_prices(None, "2020-01-01", source="yfinance", cache_dir=tmp_path)
    with pytest.raises(DataError, match="unknown interval '1 day'; yfinance accepts 1m, 2m"):
        load_prices(["AAPL"], "2020-01-01", "2020-02-01", source="yfinance", interval="1 day", cache_dir=tmp_path)
    with pytest.raises(DataError, match="one bundled series"):
        load_benchmark(source="sample_ohlcv")


# ---------------------------------------------------------------------------- files, gaps, bad values
def _long_file(tmp_path, closes: dict[str, list[float]], name="prices.csv"):
    """A FinRL-style long csv (date, tic, open, high, low, close, volume) with given closes."""
    dates = pd.bdate_range("2021-01-04", periods=len(next(iter(closes.values()))))
    rows = [dict(date=d, tic=t, open=c, high=c, low=c, close=c, volume=100.0)
            for t, cs in closes.items() for d, c in zip(dates, cs)]  # NaN rows kept: the file has holes
    path = tmp_path / name
    pd.DataFrame(rows).to_csv(path, index=False)
    return path, dates


def test_short_gap_is_filled_as_a_flat_no_trade_bar(tmp_path):
    nan = np.nan
    path, dates = _long_file(tmp_path, {"AAA": [1, 2, nan, nan, 5, 6], "BBB": [10, 11, 12, 13, 14, 15]})
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)  # a short gap is repaired without a warning
        prices = load_prices(None, source=path, ffill_limit=2)
    _check_panel(prices, list(FIELDS), ["AAA", "BBB"])
    assert prices["close"]["AAA"].tolist() == [1, 2, 2, 2, 5, 6]
    assert prices["open"]["AAA"].tolist() == [1, 2, 2, 2, 5, 6]
    assert prices["volume"]["AAA"].tolist() == [100, 100, 0, 0, 100, 100]


def test_long_gap_drops_the_ticker_with_a_warning(tmp_path):
    nan = np.nan
    path, dates = _long_file(tmp_path, {"AAA": [1, 2, nan, nan, nan, 6], "BBB": [10, 11, 12, 13, 14, 15],
                                        "NEW": [nan, nan, 3, 4, 5, 6], "DEAD": [nan] * 6})
    with pytest.warns(DataWarning) as record:
        prices = load_prices(None, source=path, ffill_limit=2)
    messages = " | ".join(str(w.message) for w in record)
    assert "dropping ['DEAD']" in messages and "no close price in the range" in messages
    assert "AAA is missing from 2021-01-06 for more than ffill_limit=2 rows" in messages
    assert "NEW has no price before 2021-01-06" in messages
    assert list(prices["close"].columns) == ["BBB"]
    # The same gap is filled with a larger limit.
    with pytest.warns(DataWarning):  # DEAD and NEW are still dropped
        assert "AAA" in load_prices(None, source=path, ffill_limit=3)["close"]


def test_every_ticker_unusable_raises(tmp_path):
    nan = np.nan
    path, _ = _long_file(tmp_path, {"AAA": [1, nan, nan, nan, 5, 6], "BBB": [1, 2, 3, 4, nan, nan]})
    with pytest.raises(DataError, match="no ticker left .* AAA is missing from 2021-01-05 for more than ffill_limit=1 "
                                        "rows .* BBB is missing from 2021-01-08"):
        load_prices(None, source=path, ffill_limit=1)
    # A date on which no ticker has a price is not a trading day of the panel: dropped, not a gap.
    path, _ = _long_file(tmp_path, {"AAA": [1, nan, nan, nan, 5]}, name="one.csv")
    assert load_prices(None, source=path, ffill_limit=0)["close"]["AAA"].tolist() == [1, 5]


def test_non_positive_prices_raise(tmp_path):
    path, _ = _long_file(tmp_path, {"AAA": [1, 2, 0, 4], "BBB": [1, 2, 3, 4]})
    with pytest.raises(DataError, match="non-positive close price 0.0 for AAA on 2021-01-06 .* leave AAA out"):
        load_prices(None, source=path)
    path, _ = _long_file(tmp_path, {"AAA": [1, 2, np.inf, 4], "BBB": [1, 2, 3, 4]}, name="inf.csv")
    with pytest.raises(DataError, match="infinite close price inf for AAA on 2021-01-06 .* leave AAA out"):
        load_prices(None, source=path)


def test_integer_sizes_of_any_integer_type():
    prices = load_prices("KO", "2010-01-01", "2010-03-31", source="sample", min_days=np.int64(20),
                         ffill_limit=np.int32(3))
    assert len(prices) >= 20


def test_file_dates_are_sorted_and_checked(tmp_path):
    """A file may list dates in any order (they are labels, read and sorted); the panel returned
    always has strictly increasing dates."""
    path = tmp_path / "newest_first.csv"
    pd.DataFrame({"date": pd.bdate_range("2021-01-04", periods=4)[::-1], "X": [4.0, 3, 2, 1]}).to_csv(path, index=False)
    prices = load_prices(None, source=path)
    _check_panel(prices, ["close"], ["X"])
    assert prices["close"]["X"].tolist() == [1.0, 2, 3, 4]


def test_wide_file_and_file_errors(tmp_path):
    wide = tmp_path / "wide.parquet"
    pd.DataFrame({"Date": pd.bdate_range("2021-01-04", periods=3), "X": [1.0, 2, 3]}).to_parquet(wide)
    _check_panel(load_prices(["X"], source=wide), ["close"], ["X"])
    no_date = tmp_path / "nodate.csv"
    pd.DataFrame({"day": ["2021-01-04"], "X": [1.0]}).to_csv(no_date, index=False)
    with pytest.raises(DataError, match="no 'date' column"):
        load_prices(None, source=no_date)
    dup = tmp_path / "dup.csv"
    pd.DataFrame({"date": ["2021-01-04", "2021-01-04"], "X": [1.0, 2.0]}).to_csv(dup, index=False)
    with pytest.raises(DataError, match="duplicate dates"):
        load_prices(None, source=dup)
    other = tmp_path / "prices.json"
    other.write_text("{}")
    with pytest.raises(DataError, match="expected a .parquet, .csv or .csv.gz file"):
        load_prices(None, source=other)


# ---------------------------------------------------------------------------- yfinance, network simulated
def _yahoo_frame(tickers, dates, tz=None, missing=()):
    """What yf.download(..., group_by="ticker", auto_adjust=True) returns: (Ticker, Price) columns."""
    index = pd.DatetimeIndex(dates, name="Date" if tz is None else "Datetime")
    index = index.tz_localize(tz) if tz else index
    parts = {}
    for i, t in enumerate(tickers):
        base = 100.0 + 10 * i + np.arange(len(index))
        values = dict(Open=base, High=base + 1, Low=base - 1, Close=base + 0.5, Volume=np.full(len(index), 1e6))
        parts[t] = pd.DataFrame(values, index=index) * (np.nan if t in missing else 1.0)
    return pd.concat(parts, axis=1, names=["Ticker", "Price"])


def _fail(*args, **kwargs):
    raise AssertionError("yf.download must not be called: the cache should serve this request")


def test_offline_yfinance_raises_data_unavailable(monkeypatch, tmp_path):
    calls = []
    # Offline, yf.download logs the failures and returns an empty frame instead of raising.
    monkeypatch.setattr(yfinance, "download", lambda *a, **k: calls.append(k) or pd.DataFrame())
    with pytest.raises(DataUnavailableError, match=r"no data for AAPL, MSFT from 2020-01-01 to 2020-06-30 .*"
                                                   r"source='sample'.*no cached copy at"):
        load_prices(["aapl", "MSFT"], "2020-01-01", "2020-06-30", source="yfinance", cache_dir=tmp_path)
    assert len(calls) == 1 and not list(tmp_path.iterdir())

    def broken(*args, **kwargs):
        raise ConnectionError("Failed to resolve 'query2.finance.yahoo.com'")
    monkeypatch.setattr(yfinance, "download", broken)
    with pytest.raises(DataUnavailableError, match="ConnectionError: Failed to resolve"):
        load_prices(["AAPL"], "2020-01-01", "2020-06-30", source="yfinance", cache_dir=tmp_path)
    with pytest.raises(DataUnavailableError, match=r"\^GSPC"):
        load_benchmark("2020-01-01", "2020-06-30", source="yfinance", cache_dir=tmp_path)


def test_download_is_cached_and_reused_offline(monkeypatch, tmp_path):
    dates = pd.bdate_range("2020-01-02", "2020-03-31")
    calls = []

    def fake_download(tickers, **kwargs):
        calls.append((tickers, kwargs))
        return _yahoo_frame(["AAPL", "MSFT"], dates)
    monkeypatch.setattr(yfinance, "download", fake_download)
    first = load_prices(["AAPL", "MSFT"], "2020-01-01", "2020-03-31", source="yfinance", cache_dir=tmp_path)
    _check_panel(first, list(FIELDS), ["AAPL", "MSFT"])
    assert first["close"]["MSFT"].iloc[0] == 110.5 and len(first) == len(dates)

    tickers, kwargs = calls[0]
    assert tickers == ["AAPL", "MSFT"]
    assert kwargs == dict(start="2020-01-01", end="2020-04-01", interval="1d", auto_adjust=True, group_by="ticker",
                          threads=False, progress=False)  # yfinance's end is exclusive: one day added
    cached = list(tmp_path.glob("*.parquet"))
    assert cached == [_cache_path(["AAPL", "MSFT"], pd.Timestamp("2020-01-01"), pd.Timestamp("2020-03-31"), "1d",
                                  tmp_path)]

    monkeypatch.setattr(yfinance, "download", _fail)
    again = load_prices(["MSFT", "AAPL"], "2020-01-01", "2020-03-31", source="yfinance", cache_dir=tmp_path,
                        fields=["close"])
    pd.testing.assert_frame_equal(again, first[["close"]].reindex(columns=["MSFT", "AAPL"], level="ticker"))
    # The cache file is a plain long parquet file: a valid `source` path too.
    pd.testing.assert_frame_equal(load_prices(None, source=cached[0]), first)


def test_partial_failure_warns_by_name_and_is_not_cached(monkeypatch, tmp_path):
    dates = pd.bdate_range("2020-01-02", "2020-01-31")
    monkeypatch.setattr(yfinance, "download", lambda *a, **k: _yahoo_frame(["AAPL", "NOPE"], dates, missing={"NOPE"}))
    with pytest.warns(DataWarning, match=r"dropping \['NOPE'\]: no close price"):
        prices = load_prices(["AAPL", "NOPE"], "2020-01-01", "2020-01-31", source="yfinance", cache_dir=tmp_path)
    assert list(prices["close"].columns) == ["AAPL"]
    assert not list(tmp_path.iterdir())  # a transient failure is retried on the next call

    # A ticker yfinance leaves out of its frame entirely is reported the same way.
    monkeypatch.setattr(yfinance, "download", lambda *a, **k: _yahoo_frame(["AAPL"], dates))
    with pytest.warns(DataWarning, match=r"dropping \['GONE'\]"):
        load_prices(["AAPL", "GONE"], "2020-01-01", "2020-01-31", source="yfinance", cache_dir=tmp_path)

    monkeypatch.setattr(yfinance, "download", lambda *a, **k: _yahoo_frame(["NOPE"], dates, missing={"NOPE"}))
    with pytest.raises(DataUnavailableError, match="NOPE"):
        load_prices(["NOPE"], "2020-01-01", "2020-01-31", source="yfinance", cache_dir=tmp_path)


def test_repeated_bars_from_yfinance_raise_and_are_not_cached(monkeypatch, tmp_path):
    dates = pd.bdate_range("2020-01-02", "2020-01-10")
    repeated = dates.insert(3, dates[2])  # Yahoo sometimes sends a bar twice
    monkeypatch.setattr(yfinance, "download", lambda *a, **k: _yahoo_frame(["AAPL"], repeated))
    with pytest.raises(DataError, match=r"yfinance's download of AAPL \(1d\): duplicate dates \(1 repeated rows; the "
                                        r"first is 2020-01-06, rows 2 and 3\).*nothing was cached"):
        load_prices("AAPL", "2020-01-01", "2020-01-10", source="yfinance", cache_dir=tmp_path)
    assert not list(tmp_path.iterdir())


def test_intraday_interval_passes_through_and_index_is_tz_naive(monkeypatch, tmp_path):
    stamps = pd.date_range("2024-03-04 09:30", periods=6, freq="5min")
    seen = {}
    monkeypatch.setattr(yfinance, "download",
                        lambda t, **k: seen.update(k) or _yahoo_frame(["SPY"], stamps, tz="America/New_York"))
    prices = load_prices("SPY", "2024-03-04", "2024-03-04", source="yfinance", interval="5m", cache_dir=tmp_path)
    assert seen["interval"] == "5m"
    assert prices.index.tz is None and prices.index[0] == pd.Timestamp("2024-03-04 09:30")  # exchange wall time
    assert len(prices) == 6


def test_benchmark_from_yfinance(monkeypatch, tmp_path):
    dates = pd.bdate_range("2020-01-02", "2020-01-31")
    monkeypatch.setattr(yfinance, "download", lambda t, **k: _yahoo_frame(t, dates))
    bench = load_benchmark("2020-01-01", "2020-01-31", source="yfinance", cache_dir=tmp_path)
    assert bench.name == "S&P 500" and len(bench) == len(dates) and bench.iloc[0] == 100.5


def test_cache_key_distinguishes_tickers_dates_interval(monkeypatch, tmp_path):
    day = pd.Timestamp
    base = _cache_path(["AAPL", "MSFT"], day("2020-01-01"), day("2020-12-31"), "1d", tmp_path)
    assert base == _cache_path(["MSFT", "AAPL"], day("2020-01-01"), day("2020-12-31"), "1d", tmp_path)
    variants = [_cache_path(["AAPL"], day("2020-01-01"), day("2020-12-31"), "1d", tmp_path),
                _cache_path(["AAPL", "MSFT", "KO"], day("2020-01-01"), day("2020-12-31"), "1d", tmp_path),
                _cache_path(["AAPL", "MSFT"], day("2020-01-02"), day("2020-12-31"), "1d", tmp_path),
                _cache_path(["AAPL", "MSFT"], day("2020-01-01"), day("2021-01-01"), "1d", tmp_path),
                _cache_path(["AAPL", "MSFT"], day("2020-01-01"), day("2020-12-31"), "1wk", tmp_path)]
    assert len({base, *variants}) == 6 and all(p.parent == tmp_path for p in variants)
    assert base.name.startswith("yf_1d_2020-01-01_2020-12-31_AAPL-MSFT_")

    # End to end: another interval is another download, not the cached daily file.
    calls = []
    monkeypatch.setattr(yfinance, "download",
                        lambda t, **k: calls.append(k["interval"]) or _yahoo_frame(t, pd.bdate_range("2020-01-06",
                                                                                                      periods=3)))
    for interval in ("1d", "1wk", "1d"):
        load_prices(["AAPL"], "2020-01-01", "2020-01-31", source="yfinance", interval=interval, cache_dir=tmp_path)
    assert calls == ["1d", "1wk"] and len(list(tmp_path.glob("*.parquet"))) == 2


def test_check_numeric_names_the_columns_that_hold_text():
    from finance.data.checks import check_numeric

    frame = pd.DataFrame({"AAA": [1.0, 2.0], "BBB": ["3.5", "n/a"], "flag": [True, False]})
    with pytest.raises(DataError, match=r"close: 2 column\(s\) hold non-numbers: \['BBB', 'flag'\] \(str, e.g. "
                                        r"'3.5'\).*pd.to_numeric"):
        check_numeric(frame, "close")  # numpy alone says "could not convert string to float: 'n/a'", no column
    with pytest.raises(DataError, match=r"returns: holds non-numbers \(object, e.g. 'x'\)"):
        check_numeric(np.array([0.01, "x"], dtype=object), "returns")
    with pytest.raises(DataError, match=r"holds non-numbers \(datetime64"):
        check_numeric(pd.Series(pd.date_range("2024-01-01", periods=2)), "returns")
    # Numbers of any kind come back as float64 of the same shape, NaN (and pandas' NA) kept.
    np.testing.assert_array_equal(check_numeric(frame[["AAA"]].astype("Int64"), "x"), [[1.0], [2.0]])
    out = check_numeric(pd.Series([1.5, None], dtype="Float64"), "x")
    assert out.dtype == np.float64 and out.shape == (2,) and np.isnan(out[1])
    assert check_numeric([1, 2], "x").tolist() == [1.0, 2.0]
