"""finance.costs: each model's formula by hand, sums, binding to data without look-ahead, the general
fill under every model (never overdraws, equals the fast path for proportional costs), participation
caps, and the errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import finance
from finance.costs import (BorrowFee, FixedPerTrade, HalfSpread, Proportional, SqrtImpact, as_cost_model,
                           split_trade_costs)
from finance.env import StockTradingVecEnv
from finance.execution import execute, execute_orders


def t(*rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def ohlcv(T: int = 60, S: int = 3, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """close, open, volume (shares) of a random walk."""
    rng = np.random.default_rng(seed)
    dates = pd.bdate_range("2018-01-02", periods=T, name="date")
    cols = [f"S{i}" for i in range(S)]
    close = pd.DataFrame(rng.uniform(20, 200, S) * np.exp(np.cumsum(rng.normal(0, 0.02, (T, S)), axis=0)), dates, cols)
    opens = close.shift(1).bfill() * np.exp(rng.normal(0, 0.01, (T, S)))
    volume = pd.DataFrame(rng.integers(1_000, 20_000, (T, S)).astype(float), dates, cols)
    return close, opens, volume


def random_accounts(N: int = 512, S: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    cash = torch.rand(N, generator=g, dtype=torch.float64) * 1e4
    holdings = torch.randint(0, 60, (N, S), generator=g).double()
    prices = torch.rand(N, S, generator=g, dtype=torch.float64) * 200 + 5
    orders = torch.randint(-80, 81, (N, S), generator=g).double()
    orders[: N // 4] *= 20  # far more than the cash can pay
    return cash, holdings, prices, orders


# ---------------------------------------------------------------------------- formulas by hand
def test_each_model_by_hand():
    q, p, day = t([10.0, 0.0, 3.0]), t([50.0, 20.0, 100.0]), torch.zeros(1, dtype=torch.long)
    np.testing.assert_allclose(Proportional(0.01).trade_costs(q, p, day), [[5.0, 0.0, 3.0]], rtol=1e-15)
    np.testing.assert_allclose(FixedPerTrade(1.5).trade_costs(q, p, day), [[1.5, 0.0, 1.5]], rtol=1e-15)
    np.testing.assert_allclose(HalfSpread(0.002).trade_costs(q, p, day), [[0.5, 0.0, 0.3]], rtol=1e-15)
    # borrow: 2% a year over 250 bars on the value shorted (-4 x 20 = 80), longs free
    fee = BorrowFee(0.02, bars_per_year=250).holding_costs(t([10.0, -4.0, 0.0]), p)
    np.testing.assert_allclose(fee, [80 * 0.02 / 250], rtol=1e-15)
    assert Proportional(0.01).rate == 0.01 and HalfSpread(0.002).rate == 0.001 and FixedPerTrade(1).rate == 0.0


def test_square_root_impact_by_hand():
    close, _, volume = ohlcv(T=30, S=2)
    model = SqrtImpact(eta=0.5, window=5).bind(torch.tensor(close.to_numpy()), torch.tensor(volume.to_numpy()))
    day = torch.tensor([12, 20])
    sigma = close.pct_change().rolling(5).std().to_numpy()[[12, 20]]  # the 5 returns up to the decision day
    adv = volume.rolling(5).mean().to_numpy()[[12, 20]]
    q = t([300.0, 0.0], [40.0, 7.0])
    p = torch.tensor(close.to_numpy()[[13, 21]])  # a next-bar fill price: the cost reads the decision day
    expected = 0.5 * sigma * np.sqrt(q.numpy() / adv) * q.numpy() * p.numpy()
    np.testing.assert_allclose(model.trade_costs(q, p, day).numpy(), expected, rtol=1e-12)
    # it grows as q^1.5: a quarter of the order costs an eighth
    np.testing.assert_allclose(model.trade_costs(q / 4, p, day).numpy(), expected / 8, rtol=1e-12)


def test_square_root_impact_reads_no_later_day():
    close, _, volume = ohlcv(T=40, S=2)
    base = SqrtImpact(window=10).bind(torch.tensor(close.to_numpy()), torch.tensor(volume.to_numpy()))
    c2, v2 = close.copy(), volume.copy()
    c2.iloc[21:] *= 1.3
    v2.iloc[21:] *= 5
    moved = SqrtImpact(window=10).bind(torch.tensor(c2.to_numpy()), torch.tensor(v2.to_numpy()))
    assert torch.equal(base.sigma[:21], moved.sigma[:21]) and torch.equal(base.adv[:21], moved.adv[:21])
    assert not torch.equal(base.sigma[21:], moved.sigma[21:]) and not torch.equal(base.adv[21:], moved.adv[21:])


def test_models_add_up():
    q, p, day = t([10.0, 2.0]), t([50.0, 20.0]), torch.zeros(1, dtype=torch.long)
    total = Proportional(1e-3) + HalfSpread(4e-3) + FixedPerTrade(1.0) + BorrowFee(0.1)
    assert len(total.parts) == 4 and total.rate == pytest.approx(3e-3)
    assert repr(total).startswith("Proportional(pct=0.001) + HalfSpread(")
    torch.testing.assert_close(total.trade_costs(q, p, day), (540.0 * 3e-3 / 540.0) * q * p + 1.0)
    scaling, fixed = split_trade_costs(total, q, p, day)
    torch.testing.assert_close(scaling, torch.tensor([540.0 * 3e-3], dtype=torch.float64))
    torch.testing.assert_close(fixed, torch.tensor([2.0], dtype=torch.float64))
    assert as_cost_model(0.002) == Proportional(0.002)
    assert sum([Proportional(1e-3), HalfSpread(4e-3)]).rate == pytest.approx(3e-3)


@pytest.mark.parametrize("make, match", [
    (lambda: Proportional(-0.1), r"pct must be in \[0, 1\)"),
    (lambda: Proportional(float("nan")), "must be finite"),
    (lambda: HalfSpread(3.0), r"spread must be in \[0, 2\)"),
    (lambda: FixedPerTrade("1"), "must be a number"),
    (lambda: SqrtImpact(window=1), "window must be >= 2"),
    (lambda: BorrowFee(bars_per_year=0), "bars_per_year must be >= 1"),
    (lambda: as_cost_model("10bp"), "must be a finance.costs model"),
])
def test_bad_models_say_what_to_fix(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


# ---------------------------------------------------------------------------- the general fill
def test_the_general_fill_is_the_fast_one_for_proportional_costs():
    cash, holdings, prices, orders = random_accounts()
    day = torch.zeros(len(cash), dtype=torch.long)
    fast = execute_orders(cash, holdings, prices, orders, 2e-3)
    general = execute(cash, holdings, prices, orders, Proportional(2e-3), day)
    assert torch.equal(general.trades, fast.trades) and torch.equal(general.holdings, fast.holdings)
    for a, b in zip(general, fast):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-8)


@pytest.mark.parametrize("model", [HalfSpread(0.01), FixedPerTrade(5.0), Proportional(1e-3) + FixedPerTrade(1.0),
                                   SqrtImpact(eta=1.0, window=3) + HalfSpread(2e-3)])
def test_a_cash_account_never_overdraws_whatever_the_model(model):
    cash, holdings, prices, orders = random_accounts(N=2048, seed=3)
    N, S = holdings.shape
    day = torch.randint(0, 10, (N,), generator=torch.Generator().manual_seed(0))
    history = torch.rand(10, S, dtype=torch.float64) * 100 + 50
    model = model.bind(history, torch.full((10, S), 500.0, dtype=torch.float64))
    ex = execute(cash, holdings, prices, orders, model, day)
    fees = 5.0 * S  # a sell worth less than its fixed fee may take the cash below 0 by the fees
    assert bool((ex.cash >= -fees).all()) and bool((ex.holdings >= 0).all())
    bought = ex.trades.clamp(min=0).sum(1) > 0
    assert bool((ex.cash[bought] >= -1e-9).all()), "buys never overdraw"
    assert torch.equal(ex.trades, ex.trades.round())
    assert bool(((ex.trades <= orders.clamp(min=0)) & (ex.trades >= torch.maximum(orders.clamp(max=0), -holdings))).all())
    scaling, fixed = split_trade_costs(model, ex.trades.abs(), prices, day)
    torch.testing.assert_close(ex.costs, scaling + fixed + torch.zeros(N, dtype=torch.float64))
    value = cash + torch.linalg.vecdot(holdings, prices)
    torch.testing.assert_close(ex.cash + torch.linalg.vecdot(ex.holdings, prices), value - ex.costs,
                               rtol=1e-12, atol=1e-8)
    limited = (ex.trades < orders.clamp(min=0)).any(1)
    assert int(limited.sum()) > N // 10, "the test must exercise cash-limited buys"


@pytest.mark.parametrize("eta", [0.142, 1.0, 5.0])
def test_a_cash_limited_impact_fill_buys_every_share_the_cash_affords(eta):
    """Issue 34: the fill budgeted SqrtImpact in proportion, a lower bound for a convex cost (at
    eta = 1: 9,265 shares bought, 55,880 of 1 M left, where 9,798 fit). Brute force over whole shares."""
    price, cash = 100.0, 1e6
    history = torch.tensor([[90.0], [95.0], [100.0], [97.0], [103.0]], dtype=torch.float64)
    model = (SqrtImpact(eta=eta, window=5) + HalfSpread(2e-3)).bind(history, torch.full((5, 1), 50_000.0,
                                                                                         dtype=torch.float64))
    day = torch.tensor([4])
    prices = torch.tensor([[price]], dtype=torch.float64)

    def outlay(n: np.ndarray) -> np.ndarray:  # cash spent on n shares, costs included
        q = torch.tensor(n, dtype=torch.float64)[:, None]
        return (q[:, 0] * price + model.trade_costs(q, prices.expand(len(n), 1), day.expand(len(n))).sum(1)).numpy()

    n = np.arange(0, 10_001, dtype=float)
    affordable = int(n[outlay(n) <= cash].max())
    ex = execute(torch.tensor([cash], dtype=torch.float64), torch.zeros(1, 1, dtype=torch.float64), prices,
                 torch.tensor([[20_000.0]], dtype=torch.float64), model, day)
    assert ex.trades.item() == affordable < 10_000
    assert 0 <= ex.cash.item() < outlay(np.array([affordable + 1.0]))[0] - outlay(np.array([float(affordable)]))[0]
    # Several stocks, one factor: the cash left is less than one more share of each at its marginal cost.
    cash3, holdings, prices3, orders = random_accounts(N=256, S=3, seed=5)
    day3 = torch.randint(0, 5, (256,), generator=torch.Generator().manual_seed(1))
    model3 = SqrtImpact(eta=eta, window=5).bind(torch.rand(5, 3, dtype=torch.float64) * 100 + 50,
                                                torch.full((5, 3), 500.0, dtype=torch.float64))
    ex3 = execute(cash3, holdings, prices3, orders, model3, day3)
    limited = (ex3.trades < orders.clamp(min=0)).any(1) & (orders > 0).all(1)
    bought = ex3.trades.clamp(min=0).sum(1) > 0  # (a sell's impact may exceed its proceeds: reductions always fill)
    assert int(limited.sum()) > 10 and bool((ex3.cash[bought] >= -1e-9).all())
    one_more = (ex3.trades + (orders > 0)).clamp(min=0)
    extra = (prices3 * (one_more - ex3.trades.clamp(min=0))).sum(1) + \
        (model3.trade_costs(one_more, prices3, day3) - model3.trade_costs(ex3.trades.abs(), prices3, day3)).sum(1)
    assert bool((ex3.cash[limited] < extra[limited]).all())


def test_participation_cap():
    cash, holdings, prices, orders = random_accounts(N=64, seed=4)
    cap = torch.full_like(orders, 7.0)
    ex = execute(cash, holdings, prices, orders, Proportional(0.0), torch.zeros(64, dtype=torch.long), max_shares=cap)
    assert bool((ex.trades.abs() <= 7).all()) and bool((ex.trades == -7).any())


# ---------------------------------------------------------------------------- in the env
def test_proportional_model_in_the_env_is_cost_pct_bit_for_bit():
    close, _, _ = ohlcv(T=40)
    kw = dict(num_envs=16, initial_cash=2e4, max_trade_shares=50, episode_length=15, random_start=True, seed=0)
    a, b = StockTradingVecEnv(close, cost_pct=2e-3, **kw), StockTradingVecEnv(close, costs=Proportional(2e-3), **kw)
    assert a.cost_pct == b.cost_pct == 2e-3
    g = torch.Generator().manual_seed(0)
    for _ in range(30):
        act = torch.rand(16, 3, generator=g) * 2 - 1
        out_a, out_b = a.step(act), b.step(act)
        for x, y in zip(out_a[:4], out_b[:4]):
            assert torch.equal(x, y)
        assert torch.equal(out_a[4]["cash"], out_b[4]["cash"])


def test_env_charges_the_model_and_caps_participation():
    close, opens, volume = ohlcv(T=30)
    model = HalfSpread(0.004) + FixedPerTrade(2.0) + SqrtImpact(eta=0.3, window=5)
    env = StockTradingVecEnv(close, num_envs=4, initial_cash=1e6, max_trade_shares=2000, costs=model, volume=volume,
                             open_prices=opens, execution="next_open", max_participation=0.05)
    assert env.cost_pct == pytest.approx(0.002)  # what a sizing rule budgets with: the proportional part
    g = torch.Generator().manual_seed(1)
    capped = 0
    for k in range(20):
        day0 = env.day.clone()
        _, _, _, _, info = env.step(torch.rand(4, 3, generator=g) * 2 - 1)
        fill = torch.tensor(opens.to_numpy())[day0 + 1]  # the next bar's open
        assert torch.equal(info["fill_prices"], fill)
        cap = (torch.tensor(volume.to_numpy())[day0] * 0.05).floor()  # of the decision day's volume
        assert bool((info["trades"].abs() <= cap).all())
        capped += int((info["trades"].abs() == cap).sum())
        q = info["trades"].abs()
        expected = model.bind(env.close_prices, env.volume).trade_costs(q, fill, day0).sum(1)
        torch.testing.assert_close(info["costs"], expected, rtol=1e-12, atol=1e-9)
    assert capped > 20


def test_the_participation_cap_reads_only_volume_known_when_the_order_is_placed():
    """Issue 34: under next_open the cap read the fill day's whole volume, unknown at its open. Now
    a volume spike on the fill day changes nothing; one on the decision day lifts the cap."""
    close, opens, volume = ohlcv(T=12)
    spike = volume.copy()
    spike.iloc[5] *= 100
    buy = torch.ones(1, 3)
    for execution in ("next_open", "next_close", "close"):
        trades = {}
        for name, v in (("plain", volume), ("spike", spike)):
            env = StockTradingVecEnv(close, initial_cash=1e9, max_trade_shares=10**7, volume=v, open_prices=opens,
                                     execution=execution, max_participation=0.01, cost_pct=0.0)
            trades[name] = torch.cat([env.step(buy)[4]["trades"] for _ in range(8)]).numpy()
        expected = np.floor(0.01 * volume.to_numpy()[:8])  # row t: 1% of day t's volume, every day
        np.testing.assert_array_equal(trades["plain"], expected)
        np.testing.assert_array_equal(trades["spike"][[4, 6, 7]], expected[[4, 6, 7]])  # the day before: no change
        np.testing.assert_array_equal(trades["spike"][5], np.floor(0.01 * spike.to_numpy()[5]))


def test_env_settings_errors():
    close, opens, volume = ohlcv(T=20)
    with pytest.raises(ValueError, match="cost_pct or costs, not both"):
        StockTradingVecEnv(close, cost_pct=1e-3, costs=HalfSpread(1e-3))
    with pytest.raises(ValueError, match=r"need daily volume: pass volume=prices\['volume'\]"):
        StockTradingVecEnv(close, costs=SqrtImpact())
    with pytest.raises(ValueError, match="max_participation caps trades"):
        StockTradingVecEnv(close, max_participation=0.1)
    with pytest.raises(ValueError, match=r"max_participation must be in \(0, 1\]"):
        StockTradingVecEnv(close, volume=volume, max_participation=5)
    with pytest.raises(ValueError, match="volume must be finite and >= 0"):
        StockTradingVecEnv(close, volume=-volume)
    with pytest.raises(ValueError, match="must be a finance.costs model"):
        StockTradingVecEnv(close, costs="spread")


def test_compare_execution_on_an_env():
    close, opens, volume = ohlcv(T=50)
    env = StockTradingVecEnv(close, open_prices=opens, volume=volume, max_trade_shares=200)
    policy = lambda obs: torch.full((1, 3), 0.5)  # noqa: E731  (buys every day: costs show)
    table = finance.compare_execution(policy, env, costs={"10bp": 1e-3, "spread+fee": HalfSpread(0.01) + FixedPerTrade(5)})
    assert list(table.index) == [(e, c) for e in finance.EXECUTIONS for c in ("10bp", "spread+fee")]
    assert list(table.columns) == ["sharpe", "annual_return", "costs", "turnover"]
    for e in finance.EXECUTIONS:
        assert table.loc[(e, "spread+fee"), "costs"] > 4 * table.loc[(e, "10bp"), "costs"] > 0
        assert table.loc[(e, "spread+fee"), "annual_return"] < table.loc[(e, "10bp"), "annual_return"]
    assert len({round(v, 12) for v in table.xs("10bp", level="costs")["annual_return"]}) == 3  # timing matters
