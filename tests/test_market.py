"""prepare_market: splits in order, scaler fitted on the training dates only, shared price scale."""

import numpy as np
import pandas as pd
import pytest

from finance import prepare_market, relative_features
from finance.data import load_prices
from finance.features import add_features

TICKERS = ["AAPL", "JPM", "XOM"]
SPANS = dict(train=("2010-01-01", "2014-12-31"), valid=("2015-01-01", "2015-12-31"), test=("2016-01-01", "2016-12-31"))


@pytest.fixture(scope="module")
def market():
    return prepare_market(TICKERS, **SPANS)


def test_splits_are_ordered_and_disjoint(market):
    d = market.describe()
    assert list(d.index) == ["train", "valid", "test"]
    assert d.loc["train", "last"] < d.loc["valid", "first"] and d.loc["valid", "last"] < d.loc["test", "first"]
    for split in ("train", "valid", "test"):
        assert market.features[split].index.equals(market.close[split].index)
        assert market.benchmark[split].notna().all()


def test_scaler_fitted_on_train_only(market):
    train = market.features["train"]
    np.testing.assert_allclose(train.mean().to_numpy(), 0, atol=1e-6)
    assert not np.allclose(market.features["test"].mean().to_numpy(), 0, atol=1e-3)
    # Changing the test period does not change the training features.
    other = prepare_market(TICKERS, train=SPANS["train"], valid=SPANS["valid"], test=("2016-01-01", "2018-12-31"))
    pd.testing.assert_frame_equal(other.features["train"], train)


def test_envs_share_the_training_price_scale(market):
    train_env, test_env = market.env("train"), market.env("test")
    np.testing.assert_allclose(np.asarray(train_env.price_scale), np.asarray(test_env.price_scale))
    np.testing.assert_allclose(np.asarray(test_env.price_scale), market.close["train"].iloc[0].to_numpy())
    with pytest.raises(ValueError, match="unknown split 'tset'"):
        market.env("tset")


def test_relative_features_are_ratios_to_close():
    prices = load_prices(TICKERS, "2012-01-01", "2013-12-31", source="sample")
    raw = add_features(prices)
    rel = relative_features(raw, prices["close"])
    np.testing.assert_allclose(rel["close_30_sma"].to_numpy(), (raw["close_30_sma"] / prices["close"] - 1).to_numpy())
    np.testing.assert_allclose(rel["macd"].to_numpy(), (raw["macd"] / prices["close"]).to_numpy())
    pd.testing.assert_frame_equal(rel["rsi_30"], raw["rsi_30"])
    # Found by review: the middle band "boll" stayed in price units (scaled test values clipped at +10 on
    # 60% of days), while the bands and the moving averages became ratios.
    raw = add_features(prices, ("boll", "boll_ub"))
    rel = relative_features(raw, prices["close"])
    for name in ("boll", "boll_ub"):
        np.testing.assert_allclose(rel[name].to_numpy(), (raw[name] / prices["close"] - 1).to_numpy())


def test_one_ticker_as_a_string():
    market = prepare_market("AAPL", **SPANS)  # was split into the letters A, A, P, L
    assert market.tickers == ["AAPL"]
    assert market.env("test").num_stocks == 1


def test_train_split_is_required():
    with pytest.raises(ValueError, match="needs train=\\(start, end\\)"):
        prepare_market(TICKERS, train=None, valid=SPANS["valid"], test=SPANS["test"])


def test_dates_given_as_start_and_end_name_the_splits():
    """Found by probing: ``prepare_market(start=..., end=...)`` (yfinance's and load_prices' names)
    failed with "load_prices() got multiple values for keyword argument 'start'"."""
    for dates in (dict(start="2010-01-01", end="2020-12-31"), dict(start_date="2010-01-01")):
        with pytest.raises(TypeError, match=r"takes its dates as the splits.*train=\(start, end\)"):
            prepare_market(TICKERS, **dates)


# ---------------------------------------------------------------------------- issue 22: OHLCV
def test_an_ohlcv_market_carries_opens_and_volume_to_its_envs(market):
    import torch

    from finance import SAMPLE_OHLCV_TICKERS, HalfSpread, SqrtImpact, compare_execution

    ohlcv = prepare_market(SAMPLE_OHLCV_TICKERS, source="sample_ohlcv", history_start="2010-01-01",
                           train=("2011-01-01", "2011-12-31"), valid=None, test=("2012-01-02", "2012-03-30"))
    prices = load_prices(SAMPLE_OHLCV_TICKERS, "2012-01-02", "2012-03-30", source="sample_ohlcv")
    pd.testing.assert_frame_equal(ohlcv.open["test"], prices["open"])
    pd.testing.assert_frame_equal(ohlcv.volume["test"], prices["volume"])
    env = ohlcv.env("test", execution="next_open", costs=HalfSpread(1e-3) + SqrtImpact(), max_participation=0.01)
    np.testing.assert_array_equal(env.open_prices.numpy(), prices["open"].to_numpy())
    np.testing.assert_array_equal(env.volume.numpy(), prices["volume"].to_numpy())

    def momentum(obs):  # long what rose since the first day, short nothing: trades every day
        return (obs[:, 5:9] * 20).clamp(0.0, 1.0)

    table = compare_execution(momentum, ohlcv, costs={"10bp": 1e-3, "spread+impact": HalfSpread(2e-3) + SqrtImpact()})
    assert table.index.names == ["execution", "costs"] and len(table) == 6
    assert (table.xs("spread+impact", level="costs")["costs"] > table.xs("10bp", level="costs")["costs"]).all()
    assert table["annual_return"].nunique() == 6  # every timing and cost model changes the result
    with pytest.raises(ValueError, match="source='sample_ohlcv'"):  # the close-only sample has no opens
        market.env("test", execution="next_open")
    assert market.open == {} and market.volume == {}
