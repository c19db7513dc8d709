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
    env = StockTradingVecEnv(close, num_envs=8, initial_cash=2e4, max_trade_shares=40, cost_pct=2e-3,
                             execution="close")  # env.prices is then the fill price
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


# ---------------------------------------------------------------------------- execution timing
def gap_up() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Closes 100, then 160: the stock gaps up overnight to open at 150 and closes at 160."""
    dates = pd.bdate_range("2021-06-01", periods=4)
    return (pd.DataFrame({"A": [100.0, 160.0, 160.0, 160.0]}, index=dates),
            pd.DataFrame({"A": [100.0, 150.0, 160.0, 160.0]}, index=dates))


@pytest.mark.parametrize("execution, fill, value", [
    ("close", 100.0, 10_000 + 50 * 60),  # buys at the close it saw: the whole jump, which no one could trade
    ("next_open", 150.0, 10_000 + 50 * 10),  # the overnight gap is gone; the day's move is earned
    ("next_close", 160.0, 10_000),  # nothing of the move
])
def test_a_jump_the_next_day_is_caught_only_by_a_same_close_fill(execution, fill, value):
    close, opens = gap_up()
    env = StockTradingVecEnv(close, open_prices=opens, initial_cash=10_000, max_trade_shares=50, cost_pct=0.0,
                             execution=execution)
    _, reward, _, _, info = env.step(torch.tensor([[1.0]]))  # decided on day 0: buy 50
    assert info["trades"].item() == 50 and info["fill_prices"].item() == fill
    assert info["cash"].item() == 10_000 - 50 * fill
    assert info["account_value"].item() == value and reward.item() == pytest.approx(100 * (value / 10_000 - 1))


def test_next_bar_fills_budget_the_cash_at_the_fill_price():
    close, opens = gap_up()
    env = StockTradingVecEnv(close, open_prices=opens, initial_cash=10_000, max_trade_shares=100, cost_pct=0.0,
                             execution="next_open")
    _, _, _, _, info = env.step(torch.tensor([[1.0]]))  # 100 shares at 100 would fit; at the 150 open only 66 do
    assert info["trades"].item() == 66 and info["cash"].item() == 10_000 - 66 * 150


def test_next_open_needs_opens():
    close, opens = gap_up()
    with pytest.raises(ValueError, match=r"no open_prices were given: pass open_prices=prices\['open'\].*sample_ohlcv"):
        StockTradingVecEnv(close, execution="next_open")
    with pytest.raises(ValueError, match="execution must be one of"):
        StockTradingVecEnv(close, execution="open")
    with pytest.raises(ValueError, match=r"open_prices must have shape \(days, stocks\) = \(4, 1\)"):
        StockTradingVecEnv(close, open_prices=np.ones((3, 1)), execution="next_open")
    with pytest.raises(ValueError, match="open_prices: 4 non-positive prices"):
        StockTradingVecEnv(close, open_prices=opens * 0, execution="next_open")


@pytest.mark.parametrize("execution", ["next_close", "next_open"])
def test_next_bar_fills_keep_the_books(execution):
    """Random accounts: value(t+1) - value(t) = h . (fill - close[t]) + h' . (close[t+1] - fill) - costs."""
    rng = np.random.default_rng(1)
    T, S, N = 30, 4, 256
    close = pd.DataFrame(rng.uniform(5, 500, S) * np.exp(np.cumsum(rng.normal(0, 0.03, (T, S)), axis=0)),
                         index=pd.bdate_range("2020-01-02", periods=T))
    opens = close.shift(1).bfill() * np.exp(rng.normal(0, 0.01, (T, S)))
    env = StockTradingVecEnv(close, num_envs=N, open_prices=opens, initial_cash=2e4, max_trade_shares=60,
                             cost_pct=2e-3, execution=execution, episode_length=12, random_start=True,
                             cash_range=(1e3, 4e4), seed=2)
    c, o = torch.tensor(close.to_numpy()), torch.tensor(opens.to_numpy())
    g = torch.Generator().manual_seed(2)
    for _ in range(25):
        day, h0, v0, cash0 = env.day.clone(), env.holdings.clone(), env.value.clone(), env.cash.clone()
        actions = torch.rand(N, S, generator=g) * 2 - 1
        _, _, _, _, info = env.step(actions)
        fill = (c if execution == "next_close" else o)[day + 1]
        expected = execute_orders(cash0, h0, fill, (actions * 60).round().double(), 2e-3)
        assert torch.equal(info["trades"], expected.trades) and torch.equal(info["cash"], expected.cash)
        h1, p0, p1 = info["holdings"], c[day], c[day + 1]
        change = torch.linalg.vecdot(h0, fill - p0) + torch.linalg.vecdot(h1, p1 - fill) - info["costs"]
        torch.testing.assert_close(info["account_value"] - v0, change, rtol=1e-10, atol=1e-8)
        torch.testing.assert_close(info["costs"], 2e-3 * torch.linalg.vecdot(info["trades"].abs(), fill))


def test_backtest_takes_execution_and_costs_and_trades_its_baselines_under_them():
    from finance import FixedPerTrade, Proportional, backtest

    close, opens = gap_up()
    env = StockTradingVecEnv(close, open_prices=opens, initial_cash=10_000, max_trade_shares=50, cost_pct=0.0)
    buy = lambda obs: torch.ones(1, 1)  # noqa: E731
    same = backtest(buy, env, execution="close", bars_per_year=252)  # (4 days show no weekend: say the calendar)
    late = backtest(buy, env, execution="next_open", bars_per_year=252)
    assert same.account_value.iloc[1] == 13_000 and late.account_value.iloc[1] == 10_500
    assert same.baselines["equal_weight"].account_value.iloc[1] == 10_000 + 100 * 60  # closed form: 100 shares
    assert late.baselines["equal_weight"].account_value.iloc[1] == 10_000 + 66 * 10  # through the env: at the open
    # The same rules through the env (a model that is not plain Proportional) give the closed form's baseline.
    rng = np.random.default_rng(3)
    walk = pd.DataFrame(rng.uniform(10, 90, 3) * np.exp(np.cumsum(rng.normal(0, 0.02, (40, 3)), axis=0)),
                        index=pd.bdate_range("2020-01-02", periods=40))
    buy3 = lambda obs: torch.full((1, 3), 0.5)  # noqa: E731
    plain = backtest(buy3, walk, cost_pct=1e-3, execution="close")  # the closed-form baselines
    general = backtest(buy3, walk, costs=Proportional(1e-3) + FixedPerTrade(0.0), execution="close")
    np.testing.assert_allclose(general.account_value, plain.account_value, rtol=1e-12)
    np.testing.assert_allclose(general.baselines["equal_weight"].account_value,
                               plain.baselines["equal_weight"].account_value, rtol=1e-12)
    with pytest.raises(ValueError, match="when building the env"):
        backtest(buy, env, max_trade_shares=5)


# ---------------------------------------------------------------------------- a margin call that restores
def test_restoring_fraction_sells_the_same_fraction_of_every_position_by_hand():
    from finance import Proportional
    from finance.execution import restoring_fraction

    # Long 100 A at 10, short 50 B at 20, cash 300: equity 300, gross 2,000, maintenance 0.3 (600).
    cash, h, p, day = t(300.0), t([100.0, -50.0]), t([10.0, 20.0]), torch.zeros(1, dtype=torch.long)
    free = restoring_fraction(cash, h, p, Proportional(0.0).bind(None, None), day, 0.3)
    assert free.tolist() == [[-50.0, 25.0]]  # k = 1/2: 0.3 x (500 + 500) = 300
    # 1% costs: 300 - 20 k >= 600 (1 - k), k >= 0.5172: 52 A and 26 B (at k = 0.51, 51 and 26 fall short).
    paid = restoring_fraction(cash, h, p, Proportional(0.01).bind(None, None), day, 0.3)
    assert paid.tolist() == [[-52.0, 26.0]]
    assert 300 - 0.01 * (520 + 520) >= 0.3 * (480 + 480)
    assert 300 - 0.01 * (510 + 520) < 0.3 * (490 + 480)
    # Lots round the sale up to whole lots; an account already above maintenance sells nothing; one
    # whose equity is gone is closed whole.
    # Lots of 30 A and 20 B: k in (0.3, 0.4] sells 60 A and 20 B (gross 400 + 600, 0.3 x 1,000 = 300).
    lots = restoring_fraction(cash, h, p, Proportional(0.0).bind(None, None), day, 0.3,
                              lot=torch.tensor([30.0, 20.0], dtype=torch.float64))
    assert lots.tolist() == [[-60.0, 20.0]]
    batch = restoring_fraction(t(300.0, 900.0, -5.0), h.expand(3, 2), p.expand(3, 2),
                               Proportional(0.0).bind(None, None), torch.zeros(3, dtype=torch.long), 0.3)
    assert batch.tolist() == [[-50.0, 25.0], [0.0, 0.0], [-100.0, 50.0]]


def test_a_margin_call_that_restores_the_maintenance_margin_by_hand():
    from finance import Margin

    close = pd.DataFrame({"A": [100.0, 100.0, 100.0, 70.0, 70.0, 70.0]}, index=pd.bdate_range("2022-03-01", periods=6))
    rules = dict(initial_cash=10_000, max_trade_shares=1000, cost_pct=0.0)
    restore = StockTradingVecEnv(close, margin=Margin(initial=0.5, maintenance=0.3, liquidation="restore"), **rules)
    whole = StockTradingVecEnv(close, margin=Margin(initial=0.5, maintenance=0.3), **rules)
    assert Margin().liquidation == "all"  # the default keeps 1.1.0's books
    for env in (restore, whole):
        *_, info = env.step(torch.tensor([[1.0]]))  # 199 shares at day 1's close: cash -9,900
        assert info["holdings"].item() == 199 and info["cash"].item() == -9_900
        env.step(torch.zeros(1, 1))
        *_, info = env.step(torch.zeros(1, 1))  # marked at 70: equity 4,030 < 0.3 x 13,930 = 4,179
        assert info["account_value"].item() == 4_030 and not info["margin_call"].item()
    *_, info = restore.step(torch.tensor([[1.0]]))  # called, whatever the action
    # 4,030 >= 0.3 x (199 - x) x 70 needs x >= 7.1: 8 shares sold at 70, 191 kept (192 x 21 = 4,032 > 4,030).
    assert info["margin_call"].item() and info["trades"].item() == -8 and info["holdings"].item() == 191
    assert info["cash"].item() == -9_900 + 8 * 70 and info["account_value"].item() == 4_030
    *_, info = whole.step(torch.tensor([[1.0]]))
    assert info["margin_call"].item() and info["holdings"].item() == 0 and info["cash"].item() == 4_030
    *_, info = restore.step(torch.zeros(1, 1))
    assert not info["margin_call"].item() and info["holdings"].item() == 191  # restored: no second call
    with pytest.raises(ValueError, match=r"Margin liquidation must be one of \('all', 'restore'\)"):
        Margin(liquidation="partial")


def test_restoring_fraction_restores_or_closes_every_random_account():
    from finance import FixedPerTrade, Proportional
    from finance.costs import split_trade_costs
    from finance.execution import restoring_fraction

    g = torch.Generator().manual_seed(7)
    N, S = 256, 4
    h = torch.randint(-300, 301, (N, S), generator=g).double()
    p = torch.rand(N, S, generator=g, dtype=torch.float64) * 90 + 10
    gross = (h.abs() * p).sum(1)
    cash = -(h * p).sum(1) + gross * (torch.rand(N, generator=g, dtype=torch.float64) * 0.5 - 0.1)  # equity -10%..40%
    costs, day = (Proportional(2e-3) + FixedPerTrade(1.0)).bind(p, None), torch.zeros(N, dtype=torch.long)
    orders = restoring_fraction(cash, h, p, costs, day, 0.3)
    assert (orders * h <= 0).all() and (orders.abs() <= h.abs()).all()  # toward zero, never past it
    scaling, fixed = split_trade_costs(costs, orders.abs(), p, day)
    equity = cash + (h * p).sum(1) - scaling - fixed
    restored = equity >= 0.3 * ((h + orders).abs() * p).sum(1)
    closed = ((h + orders) == 0).all(1)
    assert (restored | closed).all()
    assert (orders[equity > 0.3 * gross + 1e-9] == 0).all()  # accounts above maintenance sell nothing
    assert 0 < int(restored.sum() - (restored & closed).sum()) < N  # partial sales happen; so do closes
