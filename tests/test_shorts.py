"""Margin accounts: short selling, leverage, the initial-margin bound on every trade, margin calls
and forced liquidation, the borrow fee; the accounting identity over thousands of random accounts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from finance import EXECUTIONS, BorrowFee, FixedPerTrade, Margin, Proportional
from finance.env import StockTradingVecEnv
from finance.execution import execute, margin_call


def gross(h: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vecdot(h.abs(), p)


def equity(cash: torch.Tensor, h: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    return cash + torch.linalg.vecdot(h, p)


def margin_accounts(N: int = 4096, S: int = 5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    holdings = torch.randint(-60, 61, (N, S), generator=g).double()
    prices = torch.rand(N, S, generator=g, dtype=torch.float64) * 200 + 5
    # equity between 0.3x and 3x the gross exposure: some accounts over the limit already
    g0 = gross(holdings, prices)
    cash = g0 * (torch.rand(N, generator=g, dtype=torch.float64) * 2.7 + 0.3) - torch.linalg.vecdot(holdings, prices)
    orders = torch.randint(-150, 151, (N, S), generator=g).double()
    return cash, holdings, prices, orders


def one_stock(prices: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"A": prices}, index=pd.bdate_range("2021-03-01", periods=len(prices)))


# ---------------------------------------------------------------------------- the fill
@pytest.mark.parametrize("shorts", [True, False])
def test_margin_fill_keeps_the_books_and_the_initial_margin(shorts):
    cash, holdings, prices, orders = margin_accounts()
    if not shorts:
        holdings = holdings.abs()
    costs = Proportional(1e-3) + FixedPerTrade(1.0) + BorrowFee(0.05)
    day = torch.zeros(len(cash), dtype=torch.long)
    L = Margin(initial=0.5).gross_limit
    ex = execute(cash, holdings, prices, orders, costs, day, gross_limit=L, shorts=shorts)

    # the books: value moves only by the costs; costs are the model's on the trades and the positions after
    torch.testing.assert_close(equity(ex.cash, ex.holdings, prices), equity(cash, holdings, prices) - ex.costs,
                               rtol=1e-12, atol=1e-7)
    expected = (1e-3 * gross(ex.trades, prices) + (ex.trades != 0).sum(1) * 1.0
                + 0.05 / 252 * torch.linalg.vecdot(ex.holdings.clamp(max=0).neg(), prices))
    torch.testing.assert_close(ex.costs, expected, rtol=1e-12, atol=1e-9)
    assert torch.equal(ex.holdings, holdings + ex.trades) and torch.equal(ex.trades, ex.trades.round())
    # never beyond the order, same sign; reductions (toward 0) always fill
    assert bool(((ex.trades * orders >= 0) & (ex.trades.abs() <= orders.abs())).all())
    reduce = torch.where(orders * holdings < 0, torch.minimum(orders.abs(), holdings.abs()), 0.0)
    assert bool((ex.trades.abs() >= reduce).all())
    if not shorts:
        assert bool((ex.holdings >= 0).all()), "no short positions without shorts"
    else:
        assert bool(((holdings >= 0) & (ex.holdings < 0)).any()), "the test must open shorts"
    # exposure is added only within the initial margin: gross' <= L equity'
    added = (ex.holdings.abs() > holdings.abs()).any(1)
    g1, e1 = gross(ex.holdings, prices), equity(ex.cash, ex.holdings, prices)
    assert bool((g1[added] <= L * e1[added] * (1 + 1e-12)).all())
    # and scaled down no further than whole shares need: one more share of every scaled order (and
    # the fees of orders rounded away, and the proportional cost of those shares) would not fit
    wanted = orders if shorts else torch.maximum(orders, -holdings)
    scaled = ex.trades.abs() < wanted.abs()
    limited = scaled.any(1)
    one_more = torch.linalg.vecdot(scaled.double(), prices)
    room = g1 + one_more + L * (scaled.sum(1) * 1.0 + 1e-3 * one_more) - L * e1 * (1 - 1e-9)
    assert bool((room[limited] >= 0).all())
    assert int((limited & added).sum()) > 200 and int((added & ~limited).sum()) > 200  # both cases exercised


def test_a_cash_account_is_the_margin_fill_with_limit_one_and_no_shorts():
    cash, holdings, prices, orders = margin_accounts(N=512)
    holdings, cash = holdings.abs(), cash.abs()
    day = torch.zeros(512, dtype=torch.long)
    ex = execute(cash, holdings, prices, orders, Proportional(1e-3), day, gross_limit=1.0, shorts=False)
    assert bool((ex.cash >= -1e-9).all()), "L = 1: gross <= equity is cash >= 0"


def test_margin_call_flags_accounts_below_maintenance():
    h, p = torch.tensor([[-100.0], [100.0], [100.0]], dtype=torch.float64), torch.full((3, 1), 10.0,
                                                                                      dtype=torch.float64)
    cash = torch.tensor([1200.0, -800.0, -700.0], dtype=torch.float64)  # equity 200, 200, 300 on gross 1000
    assert margin_call(cash, h, p, 0.25).tolist() == [True, True, False]


@pytest.mark.parametrize("kwargs, match", [
    (dict(initial=0.0), r"initial must be in \(0, 1\]"),
    (dict(initial=0.3, maintenance=0.4), r"maintenance must be in \[0, initial=0.3\]"),
    (dict(max_gross=-1.0), "max_gross must be > 0"),
    (dict(maintenance=float("nan")), "must be a finite number"),
    (dict(shorts="yes"), "shorts must be True or False"),
])
def test_bad_margin_rules(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Margin(**kwargs)


# ---------------------------------------------------------------------------- in the env
@pytest.mark.parametrize("execution", EXECUTIONS)
def test_random_margin_accounts_keep_the_accounting_identity(execution):
    """Thousands of leveraged long-short accounts under random actions: every step the value moves
    by the old positions over (close, fill], the new ones over (fill, next close], less the costs;
    the costs are the model's; margin calls close every position at the fill."""
    rng = np.random.default_rng(5)
    T, S, N = 40, 3, 1024
    dates = pd.bdate_range("2019-01-02", periods=T)
    close = pd.DataFrame(50 * np.exp(np.cumsum(rng.normal(0, 0.05, (T, S)), axis=0)), dates, list("ABC"))
    opens = close * np.exp(rng.normal(0, 0.02, (T, S)))
    fee = BorrowFee(0.1)
    env = StockTradingVecEnv(close, num_envs=N, initial_cash=1e4, max_trade_shares=400, costs=Proportional(2e-3) + fee,
                             open_prices=opens, execution=execution, margin=Margin(initial=0.5, maintenance=0.4),
                             episode_length=15, random_start=True, seed=0)
    c, o = torch.tensor(close.to_numpy()), torch.tensor(opens.to_numpy())
    g = torch.Generator().manual_seed(0)
    calls = shorts = 0
    for _ in range(30):
        day, cash0, h0, v0 = env.day.clone(), env.cash.clone(), env.holdings.clone(), env.value.clone()
        _, rewards, _, _, info = env.step(torch.rand(N, S, generator=g) * 2.4 - 1.2)
        p0, p1 = c[day], c[day + 1]
        fill = {"close": p0, "next_close": p1, "next_open": o[day + 1]}[execution]
        assert torch.equal(info["fill_prices"], fill)
        h1, tr = info["holdings"], info["trades"]
        change = torch.linalg.vecdot(h0, fill - p0) + torch.linalg.vecdot(h1, p1 - fill) - info["costs"]
        torch.testing.assert_close(info["account_value"] - v0, change, rtol=1e-9, atol=1e-7)
        torch.testing.assert_close(info["account_value"], info["cash"] + torch.linalg.vecdot(h1, p1))
        torch.testing.assert_close(info["cash"], cash0 - torch.linalg.vecdot(tr, fill) - info["costs"])
        expected = 2e-3 * gross(tr, fill) + fee.annual_rate / 252 * torch.linalg.vecdot(h1.clamp(max=0).neg(), fill)
        torch.testing.assert_close(info["costs"], expected, rtol=1e-12, atol=1e-9)
        called = info["margin_call"]
        assert torch.equal(called, margin_call(cash0, h0, p0, 0.4))
        assert bool((h1[called] == 0).all()), "a margin call closes every position"
        calls += int(called.sum())
        shorts += int((h1 < 0).any(1).sum())
    assert calls > 20 and shorts > 1000


def test_check_env_passes_with_every_market_setting():
    from finance import HalfSpread, SqrtImpact
    from podracer.envs import check_env

    rng = np.random.default_rng(0)
    close = pd.DataFrame(50 * np.exp(np.cumsum(rng.normal(0, 0.03, (60, 3)), axis=0)),
                         pd.bdate_range("2019-01-02", periods=60), list("ABC"))
    turb = pd.Series(rng.gamma(2.0, 10.0, 60), close.index)
    env = StockTradingVecEnv(close, turbulence=turb, turbulence_threshold=40.0, num_envs=8, episode_length=20,
                             random_start=True, open_prices=close * 1.01, volume=close * 0 + 1e4,
                             execution="next_open", costs=HalfSpread(1e-3) + SqrtImpact() + BorrowFee(0.01),
                             max_participation=0.1, margin=Margin(), seed=0)
    check_env(env, num_steps=60)
    check_env(env.evaluation_env(3), num_steps=70)


def test_a_short_squeeze_ends_in_a_margin_call_and_liquidation():
    env = StockTradingVecEnv(one_stock([100.0, 100.0, 150.0, 160.0, 170.0]), initial_cash=10_000,
                             max_trade_shares=1000, cost_pct=0.0, margin=Margin(initial=0.5, maintenance=0.25),
                             execution="close")  # the prices below are the fills
    _, _, _, _, info = env.step(torch.tensor([[-1.0]]))  # short as much as the margin allows: 2x equity
    assert info["holdings"].item() == -199 and info["cash"].item() == 29_900  # proceeds stay in cash
    _, _, _, _, info = env.step(torch.tensor([[0.0]]))  # the price jumps to 150 at this mark
    assert info["account_value"].item() == 29_900 - 199 * 150 == 50 and not info["margin_call"].item()
    _, _, _, _, info = env.step(torch.tensor([[-1.0]]))  # 50 < 0.25 x 29,850: called, whatever the action
    assert info["margin_call"].item() and info["holdings"].item() == 0 and info["trades"].item() == 199
    assert info["cash"].item() == 50
    _, _, _, _, info = env.step(torch.tensor([[1.0]]))
    assert info["trades"].item() == 0 and not info["margin_call"].item()  # 50 of equity buys nothing at 170


def test_leverage_and_the_gross_limit():
    close = one_stock([100.0, 110.0, 110.0])
    lev = StockTradingVecEnv(close, initial_cash=10_000, max_trade_shares=1000, cost_pct=0.0,
                             margin=Margin(initial=0.5, shorts=False), execution="close")
    _, _, _, _, info = lev.step(torch.tensor([[1.0]]))
    assert info["holdings"].item() == 199 and info["cash"].item() == 10_000 - 19_900  # borrowed cash
    assert info["account_value"].item() == 10_000 + 199 * 10  # 2x the move
    _, _, _, _, info = lev.step(torch.tensor([[-1.0]]))  # no shorts: sells stop at the holdings
    assert info["holdings"].item() == 0
    tight = StockTradingVecEnv(close, initial_cash=10_000, max_trade_shares=1000, cost_pct=0.0,
                               margin=Margin(initial=0.5, max_gross=1.5), execution="close")
    _, _, _, _, info = tight.step(torch.tensor([[-1.0]]))
    assert info["holdings"].item() == -149  # the tighter of 1 / initial and max_gross binds


def test_turbulence_closes_shorts_too_and_reset_takes_short_accounts():
    close = one_stock([100.0, 100.0, 100.0, 100.0])
    turb = pd.Series([0.0, 90.0, 0.0, 0.0], index=close.index)
    env = StockTradingVecEnv(close, turbulence=turb, turbulence_threshold=50.0, initial_cash=1e4,
                             max_trade_shares=10, cost_pct=0.0, margin=Margin())
    env.reset(options={"cash": 2e4, "holdings": [-50.0]})
    _, _, _, _, info = env.step(torch.tensor([[-1.0]]))
    assert info["holdings"].item() == -60
    _, _, _, _, info = env.step(torch.tensor([[-1.0]]))  # turbulent: close everything, open nothing
    assert info["holdings"].item() == 0 and info["trades"].item() == 60
    with pytest.raises(ValueError, match="a cash account: no loans, no short positions"):
        StockTradingVecEnv(close).reset(options={"holdings": [-1.0]})
    long_only = StockTradingVecEnv(close, margin=Margin(shorts=False))
    long_only.reset(options={"cash": -10.0, "holdings": [1.0]})  # a loan is fine on margin
    with pytest.raises(ValueError, match="holdings' must be finite and >= 0"):
        long_only.reset(options={"holdings": [-1.0]})
    with pytest.raises(ValueError, match="margin must be a finance.Margin"):
        StockTradingVecEnv(close, margin=0.5)
