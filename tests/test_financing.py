"""finance.Financing (issue 34): interest on cash, on a margin loan and on short proceeds, each
reconciled with a hand computation; zero rates keep the books bit for bit; the backtest's metrics
take their risk-free rate from the same setting; bad settings are refused by name."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from finance import Financing, Margin, StockTradingVecEnv, backtest


def one_stock(prices: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"A": prices}, index=pd.bdate_range("2021-01-04", periods=len(prices)))


def per_bar(annual: float, bars: int = 252) -> float:
    return (1.0 + annual) ** (1.0 / bars) - 1.0


def test_cash_earns_the_rate_compounded_per_bar():
    env = StockTradingVecEnv(one_stock([100.0] * 11), initial_cash=1e6, financing=Financing(cash_rate=0.05))
    for k in range(10):
        *_, info = env.step(torch.zeros(1, 1))
        assert info["interest"].item() == pytest.approx(1e6 * (1 + per_bar(0.05)) ** k * per_bar(0.05), rel=1e-12)
    assert info["account_value"].item() == pytest.approx(1e6 * 1.05 ** (10 / 252), rel=1e-12)


def test_a_rate_series_applies_the_rate_of_each_decision_day():
    close = one_stock([100.0] * 6)
    rates = pd.Series([0.02, 0.08], index=[close.index[0] - pd.Timedelta(days=30), close.index[3]])
    env = StockTradingVecEnv(close, initial_cash=1e6, financing=Financing(cash_rate=rates))
    cash, expected = 1e6, []
    for t in range(5):
        r = per_bar(0.02 if t < 3 else 0.08)
        expected.append(cash * r)
        cash += cash * r
        *_, info = env.step(torch.zeros(1, 1))
        assert info["interest"].item() == pytest.approx(expected[-1], rel=1e-12)
    np.testing.assert_allclose(env.financing.risk_free(close.index).to_numpy()[:5],
                               [per_bar(0.02)] * 3 + [per_bar(0.08)] * 2, rtol=1e-15)


def test_a_margin_loan_pays_and_short_proceeds_earn_the_rebate():
    rc, rm, rr = 0.04, 0.09, 0.03
    financing = Financing(cash_rate=rc, margin_rate=rm, short_rebate=rr)
    close = one_stock([100.0, 100.0, 100.0])
    long = StockTradingVecEnv(close, initial_cash=10_000, max_trade_shares=1000, cost_pct=0.0,
                              margin=Margin(initial=0.5), financing=financing, execution="close")
    *_, info = long.step(torch.tensor([[1.0]]))  # 199 shares at 100 on 10,000: cash -9,900, a loan
    assert info["holdings"].item() == 199
    assert info["interest"].item() == pytest.approx(-9_900 * per_bar(rm), rel=1e-12)
    assert info["cash"].item() == pytest.approx(-9_900 * (1 + per_bar(rm)), rel=1e-12)
    short = StockTradingVecEnv(close, initial_cash=10_000, max_trade_shares=1000, cost_pct=0.0,
                               margin=Margin(initial=0.5), financing=financing, execution="close")
    *_, info = short.step(torch.tensor([[-1.0]]))  # short 199: cash 29,900 of which 19,900 are proceeds
    assert info["holdings"].item() == -199
    assert info["interest"].item() == pytest.approx(10_000 * per_bar(rc) + 19_900 * per_bar(rr), rel=1e-12)
    # Next-bar fills accrue on the balance at the decision day's close: all cash on the first step.
    late = StockTradingVecEnv(close, initial_cash=10_000, max_trade_shares=1000, cost_pct=0.0,
                              margin=Margin(initial=0.5), financing=financing)
    *_, info = late.step(torch.tensor([[-1.0]]))
    assert info["interest"].item() == pytest.approx(10_000 * per_bar(rc), rel=1e-12)
    *_, info = late.step(torch.tensor([[0.0]]))
    assert info["interest"].item() == pytest.approx(10_000 * (1 + per_bar(rc)) * per_bar(rc)
                                                    + 19_900 * per_bar(rr), rel=1e-12)


def test_zero_rates_keep_the_books_bit_for_bit():
    rng = np.random.default_rng(0)
    close = pd.DataFrame(50 * np.exp(np.cumsum(rng.normal(0, 0.02, (30, 3)), axis=0)),
                         index=pd.bdate_range("2020-01-02", periods=30))
    plain = StockTradingVecEnv(close, num_envs=4, initial_cash=1e4, max_trade_shares=50)
    zero = StockTradingVecEnv(close, num_envs=4, initial_cash=1e4, max_trade_shares=50, financing=Financing())
    assert zero.financing is None
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        a = torch.rand(4, 3, generator=g) * 2 - 1
        out_a, out_b = plain.step(a), zero.step(a)
        assert torch.equal(out_a[1], out_b[1]) and torch.equal(out_a[4]["cash"], out_b[4]["cash"])


def test_the_metrics_risk_free_rate_is_the_cash_rate():
    close = one_stock(list(100 * np.cumprod(1 + np.random.default_rng(1).normal(3e-4, 0.01, 60))))
    financing = Financing(cash_rate=0.05)
    half = lambda obs: torch.full((1, 1), 0.5)  # noqa: E731
    result = backtest(half, close, max_trade_shares=100, initial_cash=1e4, financing=financing)
    rf = financing.risk_free(close.index)
    pd.testing.assert_series_equal(result.risk_free, rf)
    pd.testing.assert_series_equal(result.metrics(), result.metrics(risk_free=rf))
    assert result.metrics()["sharpe"] < result.metrics(risk_free=0.0)["sharpe"]
    assert result.baselines["equal_weight"].risk_free is rf or result.baselines["equal_weight"].risk_free.equals(rf)
    cash_only = backtest(lambda obs: torch.zeros(1, 1), close, initial_cash=1e4, financing=financing,
                         baselines=False)
    np.testing.assert_allclose(cash_only.returns().to_numpy(), rf.to_numpy()[:-1], rtol=1e-9)


@pytest.mark.parametrize("kwargs, match", [
    ({"cash_rate": -0.01}, r"cash_rate must be an annual rate in \[0, 1\)"),
    ({"cash_rate": 4.0}, "pass 0.04 for 4%"),
    ({"margin_rate": float("nan")}, "margin_rate must be a finite annual rate"),
    ({"short_rebate": -0.02}, "short_rebate must be an annual rate"),
    ({"bars_per_year": 0}, "bars_per_year must be a whole number"),
    ({"cash_rate": pd.Series([0.01, np.nan], index=pd.bdate_range("2021-01-01", periods=2))}, "no NaN"),
])
def test_bad_financing_is_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Financing(**kwargs)


def test_bad_financing_in_the_env():
    close = one_stock([100.0] * 5)
    with pytest.raises(ValueError, match="apply to a margin account"):
        StockTradingVecEnv(close, financing=Financing(margin_rate=0.05))
    with pytest.raises(ValueError, match="must be a finance.Financing"):
        StockTradingVecEnv(close, financing=0.04)
    late = pd.Series([0.03], index=[close.index[2]])
    with pytest.raises(ValueError, match="after the first day"):
        StockTradingVecEnv(close, financing=Financing(cash_rate=late))
