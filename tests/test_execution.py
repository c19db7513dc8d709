"""finance.execution.execute_orders on its own: cases computed by hand, caps, conservation, batching."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from finance.env import StockTradingVecEnv
from finance.execution import execute_orders


def t(*rows, dtype=torch.float64) -> torch.Tensor:
    return torch.tensor(rows, dtype=dtype)


def random_accounts(N: int = 64, S: int = 5, seed: int = 0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    cash = torch.rand(N, generator=g, dtype=dtype) * 1e4
    holdings = torch.randint(0, 50, (N, S), generator=g).to(dtype)
    prices = torch.rand(N, S, generator=g, dtype=dtype) * 300 + 1
    orders = torch.randint(-80, 81, (N, S), generator=g).to(dtype)
    return cash, holdings, prices, orders


# ---------------------------------------------------------------------------- by hand
def test_orders_the_cash_can_pay_fill_whole():
    ex = execute_orders(t(10_000.0), t([5.0, 0.0]), t([100.0, 40.0]), t([-2.0, 10.0]), 0.01)
    # sell 2 x 100 = 200, less 1% -> +198; buy 10 x 40 = 400, plus 1% -> -404
    assert ex.trades.tolist() == [[-2.0, 10.0]]
    assert ex.holdings.tolist() == [[3.0, 10.0]]
    assert ex.cash.item() == pytest.approx(10_000 + 198 - 404, abs=1e-9)
    assert ex.traded_value.item() == pytest.approx(600.0)
    assert ex.costs.item() == pytest.approx(6.0)


def test_sells_fund_the_buys_and_short_cash_scales_them_down():
    # 0 cash: selling 10 x 50 leaves 499.5 after 0.1%; 30 x 20 would cost 600.6, so every buy is
    # scaled by 499.5 / 600.6 = 0.8317 and rounded down: 24 shares for 480.48.
    ex = execute_orders(t(0.0), t([10.0, 0.0]), t([50.0, 20.0]), t([-10.0, 30.0]), 1e-3)
    assert ex.trades.tolist() == [[-10.0, 24.0]]
    assert ex.holdings.tolist() == [[0.0, 24.0]]
    assert ex.cash.item() == pytest.approx(499.5 - 480.48, abs=1e-9)
    assert ex.costs.item() == pytest.approx(0.98, abs=1e-12)


def test_cash_limited_buys_are_scaled_by_one_factor_per_account():
    # 1500 of orders, 1000 of cash: both orders scaled by 2/3 (a hair less), rounded down.
    ex = execute_orders(t(1000.0), t([0.0, 0.0]), t([10.0, 10.0]), t([100.0, 50.0]), 0.0)
    assert ex.trades.tolist() == [[66.0, 33.0]]
    assert ex.cash.item() == pytest.approx(10.0)


def test_exactly_enough_cash_is_not_rounded_away():
    # The orders cost exactly the cash: they fill whole (the safety margin applies only when short).
    ex = execute_orders(t(1010.0), t([0.0]), t([100.0]), t([10.0]), 0.01)
    assert ex.trades.tolist() == [[10.0]] and ex.cash.item() == pytest.approx(0.0, abs=1e-9)


def test_sells_are_capped_by_the_holdings_and_minus_inf_sells_everything():
    ex = execute_orders(t(0.0, 0.0), t([5.0, 3.0], [7.0, 0.0]), t([10.0, 20.0], [10.0, 20.0]),
                        t([-1000.0, -1.0], [-torch.inf, -torch.inf]), 0.0)
    assert ex.trades.tolist() == [[-5.0, -1.0], [-7.0, 0.0]]
    assert ex.holdings.tolist() == [[0.0, 2.0], [0.0, 0.0]]
    assert ex.cash.tolist() == [70.0, 70.0]


def test_no_orders_change_nothing():
    cash, holdings, prices, _ = random_accounts()
    ex = execute_orders(cash, holdings, prices, torch.zeros_like(holdings), 1e-3)
    assert torch.equal(ex.cash, cash) and torch.equal(ex.holdings, holdings)
    assert not ex.trades.any() and not ex.costs.any() and not ex.traded_value.any()


# ---------------------------------------------------------------------------- invariants
@pytest.mark.parametrize("cost_pct", [0.0, 1e-3, 0.05])
def test_value_changes_only_by_the_costs(cost_pct):
    cash, holdings, prices, orders = random_accounts()
    orders[:8] *= 100  # some accounts far short of cash, some selling more than they hold
    ex = execute_orders(cash, holdings, prices, orders, cost_pct)
    before = cash + torch.linalg.vecdot(holdings, prices)
    after = ex.cash + torch.linalg.vecdot(ex.holdings, prices)
    torch.testing.assert_close(after, before - ex.costs, rtol=1e-12, atol=1e-9)
    traded = torch.linalg.vecdot(ex.trades.abs(), prices)
    torch.testing.assert_close(ex.traded_value, traded, rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(ex.costs, cost_pct * traded, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ex.holdings, holdings + ex.trades, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_never_negative_never_beyond_the_order(dtype):
    cash, holdings, prices, orders = random_accounts(N=256, dtype=dtype, seed=1)
    orders *= 10
    ex = execute_orders(cash, holdings, prices, orders, 1e-3)
    assert (ex.cash >= 0).all() and (ex.holdings >= 0).all()
    assert (ex.trades >= -holdings).all()  # sells capped by holdings
    assert ((ex.trades <= orders.clamp(min=0)) & (ex.trades >= orders.clamp(max=0))).all()  # never beyond the order
    assert torch.equal(ex.trades, ex.trades.round())  # whole shares
    assert ex.cash.dtype == ex.holdings.dtype == ex.costs.dtype == dtype


def test_inputs_are_not_modified_and_batching_is_per_account():
    cash, holdings, prices, orders = random_accounts(N=16, seed=2)
    orders *= 20
    copies = [x.clone() for x in (cash, holdings, prices, orders)]
    ex = execute_orders(cash, holdings, prices, orders, 1e-3)
    for before, now in zip(copies, (cash, holdings, prices, orders)):
        assert torch.equal(before, now)
    for i in range(16):  # each account alone gives its row of the batch
        one = execute_orders(cash[i:i + 1], holdings[i:i + 1], prices[i:i + 1], orders[i:i + 1], 1e-3)
        for a, b in zip(one, ex):
            assert torch.equal(a[0], b[i])


# ---------------------------------------------------------------------------- in the env
def test_the_env_fills_its_orders_with_execute_orders_at_prices():
    rng = np.random.default_rng(0)
    close = pd.DataFrame(rng.uniform(5, 500, 4) * np.exp(np.cumsum(rng.normal(0, 0.02, (30, 4)), axis=0)),
                         index=pd.bdate_range("2020-01-02", periods=30))
    env = StockTradingVecEnv(close, num_envs=8, initial_cash=2e4, max_trade_shares=40, cost_pct=2e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(10):
        actions = torch.rand(8, 4, generator=g) * 2 - 1
        orders = (actions * 40).round().double()
        expected = execute_orders(env.cash, env.holdings, env.prices, orders, 2e-3)
        *_, info = env.step(actions)
        for key in ("cash", "holdings", "trades", "traded_value", "costs"):
            assert torch.equal(info[key], getattr(expected, key)), key
    with pytest.warns(FutureWarning, match="prices"):
        old = env.price  # the name until 0.1
    assert old is env.prices
