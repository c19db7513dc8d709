"""Markets with planted skill (finance.planted): the signal predicts as strongly as asked, an IC of 0
predicts nothing, nothing depends on later rows, and the market trades in StockTradingVecEnv."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from finance.planted import (PLANTED_STRENGTHS, SIGNAL_FEATURE, conditional_mean_return, planted_market,
                             planted_prices, signal_sharpe)

LONG = ("2000-01-01", "2039-12-31")  # 40 years x 20 stocks: ~209,000 (signal, next return) pairs


def _pairs(ic, lag=0, seed=0, stocks=20, **kwargs):
    """Pooled (signal[t], log return t+lag -> t+lag+1) over every stock and day of a long panel."""
    prices, signal = planted_prices(stocks, *LONG, ic, seed=seed, **kwargs)
    ahead = np.log(prices["close"]).diff().shift(-1 - lag)  # row t: log return t+lag -> t+lag+1
    x, y = signal.to_numpy()[:-1 - lag].ravel(), ahead.to_numpy()[:-1 - lag].ravel()
    return x, y


@pytest.mark.parametrize("ic", [PLANTED_STRENGTHS["weak"], PLANTED_STRENGTHS["easy"]])
def test_measured_ic_matches_the_requested_strength(ic):
    x, y = _pairs(ic, seed=1)
    se = (1 - ic**2) / math.sqrt(len(x))  # the sample correlation's standard error
    assert abs(np.corrcoef(x, y)[0, 1] - ic) < 4 * se


def test_ic_decays_with_the_persistence_at_longer_lags():
    ic, phi = 0.1, 0.8
    x, y = _pairs(ic, lag=2, seed=2, persistence=phi)
    assert abs(np.corrcoef(x, y)[0, 1] - ic * phi**2) < 4 / math.sqrt(len(x))


def test_a_common_market_factor_keeps_the_pooled_ic():
    x, y = _pairs(0.05, seed=3, market_corr=0.5)
    # Returns of one day share the factor, so pairs are not independent: the error is larger than
    # 1/sqrt(n) (about sqrt(1 + (S - 1) rho^2 ic-ish) times); 0.012 is over 4 such errors.
    assert abs(np.corrcoef(x, y)[0, 1] - 0.05) < 0.012


def test_strength_zero_predicts_nothing():
    market = planted_market(0.0, tickers=5, train=("2001-01-01", "2020-12-31"), valid=None, test=None, seed=4)
    feats, close = market.features["train"], market.close["train"]
    ahead = close.pct_change().shift(-1).iloc[:-1]  # row t: return t -> t+1
    n = ahead.size
    for name in feats.columns.get_level_values(0).unique():  # every feature, the signal and each indicator
        x = feats[name].iloc[:-1].to_numpy().ravel()
        r = np.corrcoef(x, ahead.to_numpy().ravel())[0, 1]
        assert abs(r) < 4 / math.sqrt(n), name
    assert signal_sharpe(0.0, num_stocks=5) == 0.0
    assert np.allclose(market.expected_return["train"].to_numpy(), market.expected_return["train"].iloc[0, 0])


def test_later_rows_change_nothing_before_them():
    short, sig_short = planted_prices(["A", "B"], "2000-01-01", "2003-12-31", 0.05, seed=5)
    long, sig_long = planted_prices(["A", "B"], "2000-01-01", "2010-12-31", 0.05, seed=5)
    pd.testing.assert_frame_equal(short, long.loc[short.index])
    pd.testing.assert_frame_equal(sig_short, sig_long.loc[sig_short.index])
    # and a ticker's path does not depend on the other tickers asked for
    alone, _ = planted_prices(["B"], "2000-01-01", "2003-12-31", 0.05, seed=5)
    pd.testing.assert_series_equal(alone["close", "B"], short["close", "B"])
    # the market's features: the same up to the last training day whatever comes after it
    a = planted_market(0.05, tickers=3, train=("2001-01-01", "2002-12-31"), valid=None,
                       test=("2003-01-01", "2003-06-30"), seed=5)
    b = planted_market(0.05, tickers=3, train=("2001-01-01", "2002-12-31"), valid=None,
                       test=("2003-01-01", "2009-12-31"), seed=5)
    pd.testing.assert_frame_equal(a.features["train"], b.features["train"])
    pd.testing.assert_frame_equal(a.features["test"], b.features["test"].loc[a.features["test"].index])


def test_signal_sharpe_matches_a_long_simulation():
    ic, phi, stocks, noise_var = 0.05, 0.9, 10, 0.5
    prices, signal = planted_prices(stocks, *LONG, ic, seed=6, persistence=phi, annual_drift=0.0, annual_vol=0.2)
    rng = np.random.default_rng(0)
    for lag in (0, 1):
        w = signal.to_numpy() + math.sqrt(noise_var) * rng.standard_normal(signal.shape)
        r = np.log(prices["close"]).diff().shift(-1 - lag).to_numpy() + 0.5 * 0.2**2 / 252  # remove the Ito drift
        pnl = np.nanmean(w[:-1 - lag] * r[:-1 - lag], axis=1)
        realised = pnl.mean() / pnl.std(ddof=1)
        expected = signal_sharpe(ic, 1.0, noise_var, stocks, phi, lag=lag)
        assert abs(realised - expected) < 4 / math.sqrt(len(pnl)), lag  # SE of a per-day Sharpe ~ 1/sqrt(n)
    assert signal_sharpe(ic, num_stocks=stocks, periods_per_year=252) == pytest.approx(
        signal_sharpe(ic, num_stocks=stocks) * math.sqrt(252))


def test_conditional_mean_return_is_the_mean_of_the_next_return():
    prices, signal = planted_prices(20, *LONG, 0.1, seed=7)
    expected = conditional_mean_return(signal, 0.1)
    realised = prices["close"].pct_change().shift(-1)
    high = signal > 1.0  # days with a strong positive signal
    assert realised[high].stack().mean() == pytest.approx(expected[high].stack().mean(), abs=3e-4)
    assert expected[high].stack().mean() > 3 * abs(expected.stack().mean())


def _follow_signal(env):
    """A policy that holds 20% of the initial cash in each stock whose signal is positive, none otherwise:
    it trades the gap between that target and its position, read from the observation."""
    S = env.num_stocks
    scale = env.price_scale.to(torch.float32)

    def policy(obs):
        value, log_price, signal = obs[:, 1:1 + S], obs[:, 1 + S:1 + 2 * S], obs[:, -S:]
        target = 0.2 * (signal > 0).float()
        shares = (target - value) * env.initial_cash / (scale * torch.exp(log_price))
        return torch.clamp(shares / env.max_trade_shares, -1.0, 1.0)

    return policy


def test_the_planted_market_trades_in_the_stock_env():
    spans = dict(indicators=(), train=("2001-01-01", "2004-12-31"), valid=("2005-01-01", "2008-12-31"), test=None,
                 seed=8)
    market = planted_market(PLANTED_STRENGTHS["easy"], tickers=4, **spans)
    env = market.env("valid", max_trade_shares=10_000)
    assert env.feature_names == [SIGNAL_FEATURE]
    np.testing.assert_allclose(env.obs_table[:, -4:].cpu().numpy(), market.features["valid"][SIGNAL_FEATURE],
                               rtol=1e-5, atol=1e-5)  # the last S observations are the scaled signal

    from finance.backtest import backtest
    rich = backtest(_follow_signal(env), env, baselines=False).returns()
    flat = planted_market(0.0, tickers=4, **spans).env("valid", max_trade_shares=10_000)
    poor = backtest(_follow_signal(flat), flat, baselines=False).returns()
    # The same noise draws: the planted market's signal policy earns more, far beyond the noise.
    assert rich.mean() - poor.mean() > 4 * (rich - poor).std() / math.sqrt(len(rich))


def test_bad_input_names_the_problem():
    with pytest.raises(ValueError, match="ic must be in"):
        planted_prices(2, "2000-01-01", "2001-01-01", 1.5)
    with pytest.raises(ValueError, match="distinct names"):
        planted_prices(["A", "A"], "2000-01-01", "2001-01-01", 0.1)
    with pytest.raises(ValueError, match="at least 2"):
        planted_prices(2, "2000-01-01", "2000-01-01", 0.1)
    with pytest.raises(ValueError, match="loading"):
        signal_sharpe(0.1, loading=0.0)
