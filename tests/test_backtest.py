"""finance.backtest: the env cross-check against buy-and-hold, metrics vs empyrical, baselines."""

from __future__ import annotations

import dataclasses

import empyrical
import numpy as np
import pandas as pd
import pytest
import torch

from finance.backtest import (BENCHMARK_METRICS, METRICS, BacktestResult, BuyAndHoldPolicy, backtest, buy_and_hold,
                              compare, drawdown_durations, index_baseline, min_variance_weights, rebalanced,
                              risk_metric_names)
from finance.data.checks import DataError
from finance.env import StockTradingVecEnv
from finance.trading_calendar import CalendarWarning


def synthetic_close(T: int = 120, S: int = 6, seed: int = 0, start: str = "2018-01-02") -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    dates = pd.bdate_range(start, periods=T, name="date")
    # Prices from about $3 to $900, so integer rounding matters for some stocks.
    p0 = np.geomspace(3.0, 900.0, S)
    return pd.DataFrame(p0 * np.exp(np.cumsum(rng.normal(2e-4, 0.02, (T, S)), axis=0)), index=dates,
                        columns=[f"S{i}" for i in range(S)])


# ---------------------------------------------------------------------------- the cross-check
@pytest.mark.parametrize("cost_pct", [0.0, 1e-3])
def test_buy_and_hold_through_the_env_reproduces_the_baseline(cost_pct):
    """The env, driven by a buy-and-hold policy, must give the equal-weight buy-and-hold curve
    computed directly in pandas: exactly (float64 rounding) with the same whole-share rounding
    and costs, and within one share per stock of the frictionless fractional curve."""
    close = synthetic_close()
    ic = 1e6
    env = StockTradingVecEnv(close, initial_cash=ic, cost_pct=cost_pct, max_trade_shares=10**6, num_envs=3,
                             execution="close")  # buy_and_hold's closed form buys at the first close
    result = backtest(BuyAndHoldPolicy(env), env, name="bh_env")
    base = result.baselines["equal_weight"]
    assert result.account_value.index.equals(close.index)
    np.testing.assert_allclose(result.account_value.to_numpy(), base.account_value.to_numpy(), rtol=1e-13, atol=1e-9)
    pd.testing.assert_frame_equal(result.positions, base.positions, check_names=False)
    pd.testing.assert_frame_equal(result.trades, base.trades, check_names=False)
    np.testing.assert_allclose(result.costs.to_numpy(), base.costs.to_numpy(), rtol=1e-13, atol=1e-9)

    # Documented gap to the ideal (fractional shares, cost inside the budget): whole shares are
    # rounded down, so the env holds less than the ideal by under one share per stock.
    p = close.to_numpy()
    ideal = ic / (1 + cost_pct) * (p / p[0]).mean(axis=1)
    gap = ideal[1:] - result.account_value.to_numpy()[1:]
    one_share_each = p[1:].sum(axis=1) + p[0].sum() * (1 + cost_pct)  # shares not bought + their cash
    assert bool((np.abs(gap) <= one_share_each).all())
    assert result.costs.iloc[0] == pytest.approx(cost_pct * (result.positions.iloc[0] * p[0]).sum(), rel=1e-12)


def test_buy_and_hold_policy_spreads_large_orders_over_days():
    close = synthetic_close(T=30, S=3)
    env = StockTradingVecEnv(close, max_trade_shares=100, initial_cash=1e5)
    result = backtest(BuyAndHoldPolicy(env), env)
    target = buy_and_hold(close, np.full(3, 1 / 3), 1e5).positions.iloc[0]
    assert (result.trades.to_numpy() >= 0).all() and (result.trades.to_numpy() <= 100).all()
    assert result.trades.iloc[0].tolist() == np.minimum(target, 100).tolist()
    assert result.positions.iloc[-1].tolist() == np.minimum(target, 100 * 29).tolist()  # 29 trading days


# ---------------------------------------------------------------------------- metrics
def test_metrics_agree_with_empyrical_and_by_hand():
    rng = np.random.default_rng(1)
    r = pd.Series(rng.normal(5e-4, 0.01, 500))
    value = pd.Series(1000.0 * np.cumprod(np.r_[1.0, 1.0 + r.to_numpy()]),
                      index=pd.bdate_range("2020-01-01", periods=501))
    for bars in (252, 52):
        m = BacktestResult("known", value, bars_per_year=bars).metrics()
        rets = value.pct_change().iloc[1:]
        assert m["cumulative_return"] == pytest.approx(value.iloc[-1] / value.iloc[0] - 1, rel=1e-12)
        assert m["annual_return"] == pytest.approx((value.iloc[-1] / value.iloc[0]) ** (bars / 500) - 1, rel=1e-9)
        assert m["annual_volatility"] == pytest.approx(rets.std(ddof=1) * np.sqrt(bars), rel=1e-9)
        assert m["sharpe"] == pytest.approx(rets.mean() / rets.std(ddof=1) * np.sqrt(bars), rel=1e-9)
        assert m["max_drawdown"] == pytest.approx((value / value.cummax() - 1).min(), rel=1e-9)
        assert m["sortino"] == pytest.approx(empyrical.sortino_ratio(rets, annualization=bars), rel=1e-12)
        assert m["calmar"] == pytest.approx(m["annual_return"] / -m["max_drawdown"], rel=1e-9)
        assert np.isnan(m["turnover"]) and np.isnan(m["costs"])


def test_turnover_and_costs_of_buy_and_hold():
    close = synthetic_close(T=253)
    res = buy_and_hold(close, np.full(6, 1 / 6), 1e6, 1e-3)
    m = res.metrics()
    # One full purchase over 252 daily returns: traded value / value on day 0 ~ 1, averaged over
    # 253 days and annualised with 252: ~1 per year.
    assert m["turnover"] == pytest.approx(res.traded_value().iloc[0] / 1e6 * 252 / 253, rel=1e-12)
    assert m["turnover"] == pytest.approx(1.0, rel=1e-2)
    assert m["costs"] == pytest.approx(1e-3 * res.traded_value().iloc[0] / 1e6, rel=1e-12)


def test_compare_builds_a_table_with_baselines_and_series():
    close = synthetic_close()
    bench = close.mean(axis=1).rename("bench")
    res = backtest(lambda obs: torch.zeros(1, 6), close, benchmark=bench, train_close=synthetic_close(seed=3),
                   name="cash")
    table = compare(res, close["S0"].rename("S0 price"))
    assert list(table.index) == ["cash", "equal_weight", "min_variance", "index", "S0 price"]
    assert table.loc["cash", "cumulative_return"] == 0.0 and table.loc["cash", "turnover"] == 0.0
    assert list(compare(res, include_baselines=False).index) == ["cash"]
    with pytest.raises(TypeError, match="compare takes"):
        compare([1, 2])
    for empty in ((), ({},)):  # found by probing: a KeyError listing the missing metric columns
        with pytest.raises(ValueError, match="compare needs at least one strategy"):
            compare(*empty)


# ---------------------------------------------------------------------------- baselines
def test_a_baseline_given_an_env_instead_of_prices_names_the_prices():
    """Found by probing: ``rebalanced(env, weights)`` failed with "'StockTradingVecEnv' object has no
    attribute 'shape'" (the weights were checked against ``close.shape`` before ``close`` was)."""
    close = synthetic_close()
    env = StockTradingVecEnv(close, num_envs=1)
    for baseline in (buy_and_hold, rebalanced):
        with pytest.raises(ValueError, match=r"close must be a dates x tickers DataFrame.*got StockTradingVecEnv; "
                                             r"pass the env's prices, e\.g\. market\.close\['test'\]"):
            baseline(env, np.full(6, 1 / 6))
        assert baseline(close, np.full(6, 1 / 6)).account_value.iloc[-1] > 0


def test_min_variance_weights_known_answer():
    # Two assets with exactly uncorrelated, zero-mean returns of std a and b (sample cov is
    # diagonal): w = (b^2, a^2) / (a^2 + b^2). A third with higher vol and perfect correlation
    # to the first gets no weight.
    x = np.tile([1.0, -1.0, 1.0, -1.0], 50)
    y = np.tile([1.0, 1.0, -1.0, -1.0], 50)
    a, b = 0.01, 0.02
    rets = np.column_stack([a * x, b * y, 3 * a * x])
    close = pd.DataFrame(100 * np.cumprod(1 + np.vstack([np.zeros(3), rets]), axis=0), columns=["A", "B", "C"])
    w = min_variance_weights(close)
    np.testing.assert_allclose(w, [b**2 / (a**2 + b**2), a**2 / (a**2 + b**2), 0.0], atol=1e-6)
    with pytest.raises(ValueError, match="training days"):
        min_variance_weights(close.iloc[:4])


def test_index_baseline_rescales_and_fills_gaps():
    dates = pd.bdate_range("2021-01-04", periods=5)
    bench = pd.Series([100.0, 110.0, 99.0], index=[pd.Timestamp("2020-12-31"), dates[1], dates[3]])
    res = index_baseline(bench, dates, initial_cash=50.0, bars_per_year=252)  # 5 weekdays cannot show the calendar
    np.testing.assert_allclose(res.account_value.to_numpy(), [50.0, 55.0, 55.0, 49.5, 49.5], rtol=1e-14)
    with pytest.raises(ValueError, match="no value on or before"):
        index_baseline(bench.iloc[1:], dates)


# ---------------------------------------------------------------------------- policies, plot
def test_backtest_accepts_agents_and_numpy_callables_deterministically():
    close = synthetic_close(T=40, S=4)

    class Agent:
        calls: list[bool] = []

        def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
            self.calls.append(deterministic)
            return torch.tanh(obs[:, 1 + 4:1 + 8] * 10)  # a function of the log prices

    agent = Agent()
    r1 = backtest(agent, close, max_trade_shares=50, name="agent")
    r2 = backtest(agent, close, max_trade_shares=50, name="agent")
    assert all(agent.calls) and len(agent.calls) == 2 * 39
    pd.testing.assert_series_equal(r1.account_value, r2.account_value)
    r3 = backtest(lambda obs: np.full(4, 0.3, np.float32), close, max_trade_shares=50)
    assert (r3.trades.iloc[:-1] == 15).all().all()
    w = r3.weights()
    assert np.allclose(w.sum(axis=1) + (r3.account_value - r3.costs - (r3.positions * r3.close).sum(axis=1)) /
                       (r3.account_value - r3.costs), 1.0)
    with pytest.raises(ValueError, match="when building the env"):
        backtest(agent, StockTradingVecEnv(close), cost_pct=0.0)


def test_plot_and_window():
    close = synthetic_close(T=60, S=4)
    res = backtest(lambda obs: torch.full((1, 4), 0.2), close, benchmark=close.mean(axis=1), name="dca")
    fig = res.plot()
    assert len(fig.axes) == 4  # equity, drawdown, rolling Sharpe, weights heatmap (its colorbar is inset)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["dca", "equal_weight", "index"]
    part = res.between(close.index[10], close.index[30])
    assert len(part.account_value) == 21 and len(part.baselines["index"].account_value) == 21
    assert np.isfinite(part.metrics()["sharpe"])


def test_widget_view_builds():
    from finance.widgets import backtest_view

    close = synthetic_close(T=40, S=3)
    res = backtest(lambda obs: torch.full((1, 3), 0.1), close, name="a")
    view = backtest_view(res, backtest(lambda obs: torch.zeros(1, 3), close, name="b"))
    assert [o for o in view.children[0].children[0].options] == ["a", "b"]


# ---------------------------------------------------------------------------- bad inputs
def test_policy_output_errors_say_what_was_returned_and_expected():
    close = synthetic_close(T=20, S=4)
    with pytest.raises(TypeError, match=r"the policy returned None; it must return actions of shape \(1, 4\).*"
                                        r"obs of shape \(1, 9\)\. Is a `return` missing\?"):
        backtest(lambda obs: None, close)
    with pytest.raises(TypeError, match=r"the policy returned str 'buy', not numbers"):
        backtest(lambda obs: "buy", close)
    with pytest.raises(ValueError, match=r"the policy returned actions of shape \(2, 4\); expected actions of shape "
                                         r"\(1, 4\)"):
        backtest(lambda obs: torch.zeros(2, 4), close)
    with pytest.raises(ValueError, match=r"shape \(1, 3\)"):
        backtest(lambda obs: np.zeros(3), close)


def test_baseline_inputs_are_checked():
    close = synthetic_close(T=30, S=3)
    with pytest.raises(ValueError, match=r"close: dates are newest first.*sort_index"):
        buy_and_hold(close.iloc[::-1], np.full(3, 1 / 3))
    with pytest.raises(ValueError, match=r"close: dates are newest first"):
        backtest(lambda obs: torch.zeros(1, 3), close.iloc[::-1])
    zero = close.copy()
    zero.iloc[0, 1] = 0.0
    with pytest.raises(ValueError, match=r"close: 1 non-positive prices \(first at 2018-01-02, S1: 0.0\)"):
        buy_and_hold(zero, np.full(3, 1 / 3))
    with pytest.raises(ValueError, match=r"train_close: 1 non-positive prices"):
        min_variance_weights(zero)
    with pytest.raises(ValueError, match="weights must be 3 finite non-negative numbers"):
        buy_and_hold(close, [0.5, np.nan, 0.1])
    with pytest.raises(ValueError, match="weights must be 3 finite non-negative numbers"):
        BuyAndHoldPolicy(StockTradingVecEnv(close), [0.5, np.nan, 0.1])
    with pytest.raises(ValueError, match=r"train_close lacks tickers \['S2'\]"):
        backtest(lambda obs: torch.zeros(1, 3), close, train_close=close.drop(columns="S2"))


# ---------------------------------------------------------------------------- risk-free rate, benchmark, tails
def strategy_and_benchmark(T: int = 500, seed: int = 2) -> tuple[BacktestResult, pd.Series]:
    """A strategy whose daily returns are 0.02% + 1.5 x the benchmark's + noise, and the benchmark's prices."""
    rng = np.random.default_rng(seed)
    b = rng.normal(3e-4, 0.01, T)
    r = 2e-4 + 1.5 * b + rng.normal(0.0, 0.004, T)
    dates = pd.bdate_range("2019-01-01", periods=T + 1)
    value = pd.Series(1e6 * np.cumprod(np.r_[1.0, 1.0 + r]), index=dates)
    return BacktestResult("strategy", value), pd.Series(250.0 * np.cumprod(np.r_[1.0, 1.0 + b]), index=dates)


def test_metrics_with_a_risk_free_rate_and_a_benchmark_agree_with_hand_formulas():
    res, prices = strategy_and_benchmark()
    r, b = res.returns(), prices.pct_change().iloc[1:]
    rf = 1.04 ** (1 / 252) - 1  # 4% a year, per day
    plain = res.metrics()
    assert list(plain.index) == list(METRICS)
    pd.testing.assert_series_equal(res.metrics(risk_free=0.0), plain)  # the defaults: today's numbers

    m = res.metrics(risk_free=0.04, benchmark=prices)
    assert list(m.index) == list(METRICS) + list(BENCHMARK_METRICS)
    assert m["sharpe"] == pytest.approx((r - rf).mean() / r.std(ddof=1) * np.sqrt(252), rel=1e-9)
    assert m["sharpe"] < plain["sharpe"]
    assert m["annual_return"] == plain["annual_return"]  # the rate enters excess returns only
    beta = np.cov(r - rf, b - rf)[0, 1] / np.var(b - rf, ddof=1)
    assert m["beta"] == pytest.approx(beta, rel=1e-9) and m["beta"] == pytest.approx(1.5, abs=0.05)
    assert m["alpha"] == pytest.approx((1 + ((r - rf) - beta * (b - rf)).mean()) ** 252 - 1, rel=1e-9)
    active = r - b
    assert m["tracking_error"] == pytest.approx(active.std(ddof=1) * np.sqrt(252), rel=1e-9)
    assert m["information_ratio"] == pytest.approx(active.mean() / active.std(ddof=1) * np.sqrt(252), rel=1e-9)
    years = len(r) / 252
    cagr = lambda v: (v.iloc[-1] / v.iloc[0]) ** (1 / years) - 1  # noqa: E731
    assert m["excess_return"] == pytest.approx(cagr(res.account_value) - cagr(prices), rel=1e-9)

    # The same benchmark as prices, returns, a BacktestResult, a baseline's name: the same numbers; a per-bar
    # risk-free Series equal to the constant rate gives the constant rate's.
    index = BacktestResult("index", prices)
    with_baseline = dataclasses.replace(res, baselines={"index": index})
    for bench in (b, index):
        pd.testing.assert_series_equal(res.metrics(0.04, bench), m, rtol=1e-12)
    pd.testing.assert_series_equal(with_baseline.metrics(0.04, "index"), m, rtol=1e-12)
    pd.testing.assert_series_equal(res.metrics(pd.Series(rf, index=r.index), prices), m, rtol=1e-12)
    # A price benchmark on other days (a holiday of the index) is read as of its last close.
    sparse = prices.drop(prices.index[[5, 6]])
    assert res.metrics(benchmark=sparse)["beta"] == pytest.approx(m["beta"], rel=0.05)


def test_benchmark_and_risk_free_input_errors():
    res, prices = strategy_and_benchmark(T=60)
    with pytest.raises(ValueError, match=r"no baseline 'index'; its baselines are \[\]"):
        res.metrics(benchmark="index")
    with pytest.raises(ValueError, match=r"benchmark has no return on 10 of 'strategy''s 60 return dates"):
        res.metrics(benchmark=prices.pct_change().iloc[11:])
    with pytest.raises(ValueError, match="benchmark has no price on or before"):
        res.metrics(benchmark=prices.iloc[3:])
    with pytest.raises(ValueError, match=r"0.04 for 4%, got 4.0; pass 0.04 for 4%"):
        res.metrics(risk_free=4.0)
    with pytest.raises(ValueError, match="risk_free has no per-bar return on 1 of"):
        res.metrics(risk_free=pd.Series(1e-4, index=res.returns().index[1:]))
    with pytest.raises(TypeError, match="benchmark must be a BacktestResult"):
        res.metrics(benchmark=[1.0, 2.0])
    with pytest.raises(ValueError, match=r"benchmark: holds non-numbers \(str"):
        res.metrics(benchmark=prices.astype(str))


def test_tail_and_drawdown_metrics():
    # Peak 2.0, under water for 3 bars (1.5, 1.8, 1.9); new peak 2.1, then 5 bars under it: the deepest fall, to
    # 1.0, is never regained.
    longest, recovery = drawdown_durations(pd.Series([1.0, 2.0, 1.5, 1.8, 1.9, 2.1, 1.0, 1.2, 1.6, 1.9, 2.0]))
    assert longest == 5 and np.isnan(recovery)
    assert drawdown_durations(pd.Series([2.0, 1.0, 1.5, 2.0, 2.5])) == (2, 2.0)  # trough at bar 1, back at bar 3
    assert drawdown_durations(pd.Series([1.0, 2.0, 3.0])) == (0, 0.0)

    res, _ = strategy_and_benchmark()
    r = np.sort(res.returns().to_numpy())
    m = res.metrics(risk=True)
    assert list(m.index) == list(METRICS) + ["var_95", "cvar_95", "longest_drawdown_bars", "recovery_bars"]
    assert m["var_95"] == pytest.approx(np.percentile(r, 5), rel=1e-12)
    k = int((len(r) - 1) * 0.05)  # empyrical's tail: the k + 1 worst returns
    assert m["cvar_95"] == pytest.approx(r[:k + 1].mean(), rel=1e-12) and m["cvar_95"] < m["var_95"] < 0
    assert (m["longest_drawdown_bars"], m["recovery_bars"]) == pytest.approx(drawdown_durations(res.account_value),
                                                                            nan_ok=True)
    m99 = res.metrics(risk=True, var_level=0.99)
    assert m99["var_99"] < m["var_95"]
    with pytest.raises(ValueError, match="var_level is a confidence level in"):
        res.metrics(risk=True, var_level=95)


def test_compare_adds_benchmark_and_risk_columns_for_every_row():
    close = synthetic_close()
    res = backtest(lambda obs: torch.full((1, 6), 0.3), close, benchmark=close.mean(axis=1), name="dca")
    table = compare(res, benchmark="equal_weight", risk=True, risk_free=0.02)
    assert list(table.columns) == list(METRICS) + list(BENCHMARK_METRICS) + list(risk_metric_names())
    assert list(table.index) == ["dca", "equal_weight", "index"]
    assert table.loc["equal_weight", "beta"] == pytest.approx(1.0) and table.loc["equal_weight", "alpha"] == \
        pytest.approx(0.0, abs=1e-12)
    assert table.loc["dca", "beta"] == pytest.approx(
        res.metrics(0.02, res.baselines["equal_weight"])["beta"], rel=1e-12)
    with pytest.raises(ValueError, match="no item has a baseline 'min_variance'"):
        compare(res, benchmark="min_variance")


def test_short_series_warn_and_text_columns_are_named():
    two = BacktestResult("two bars", pd.Series([100.0, 101.0], index=pd.bdate_range("2024-01-02", periods=2)),
                         bars_per_year=252)
    with pytest.warns(CalendarWarning, match=r"'two bars' has 1 return\(s\); its annual return.*extrapolate"):
        assert two.metrics()["annual_return"] == pytest.approx(1.01**252 - 1)
    close = synthetic_close(T=30, S=3)
    with pytest.raises(DataError, match=r"close: 1 column\(s\) hold non-numbers: \['S1'\] \(str, e.g. '1.0'\)"):
        buy_and_hold(close.assign(S1="1.0"), np.full(3, 1 / 3))
    with pytest.raises(DataError, match=r"'x''s account_value: holds non-numbers"):
        BacktestResult("x", pd.Series(["1", "2"]))
    with pytest.raises(DataError, match=r"series 'p': holds non-numbers"):
        compare(pd.Series(["a", "b"], name="p"))
