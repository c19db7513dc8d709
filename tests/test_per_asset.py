"""Per-stock market parameters (issue 34): spreads, fixed fees and borrow rates per ticker, lot
sizes and position limits, each against a hand computation, and each refusing nonsense by name."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from finance import BorrowFee, FixedPerTrade, HalfSpread, Margin, Proportional, StockTradingVecEnv


def flat(prices: list[float], days: int = 6) -> pd.DataFrame:
    return pd.DataFrame([prices] * days, columns=[f"S{i}" for i in range(len(prices))],
                        index=pd.bdate_range("2021-01-04", periods=days))


def test_per_stock_spreads_fees_and_borrow_rates_by_hand():
    close = flat([10.0, 50.0, 200.0])
    costs = HalfSpread([0.001, 0.004, 0.02]) + FixedPerTrade([1.0, 0.0, 5.0]) + BorrowFee([0.01, 0.5, 0.02])
    env = StockTradingVecEnv(close, initial_cash=1e5, max_trade_shares=100, costs=costs, execution="close",
                             margin=Margin(initial=0.5))
    *_, info = env.step(torch.tensor([[1.0, -0.5, 0.2]]))  # buy 100 S0, short 50 S1, buy 20 S2
    spread = 100 * 10 * 0.0005 + 50 * 50 * 0.002 + 20 * 200 * 0.01
    fees = 1.0 + 0.0 + 5.0
    borrow = 50 * 50 * 0.5 / 252  # only S1 is short
    assert info["costs"].item() == pytest.approx(spread + fees + borrow, rel=1e-12)
    assert costs.rate == pytest.approx(0.01)  # the widest half-spread: a budget that never falls short
    # Scalars still work, and a per-stock vector of equal values is the scalar.
    same = StockTradingVecEnv(close, initial_cash=1e5, max_trade_shares=100, execution="close",
                              costs=HalfSpread([0.004] * 3) + FixedPerTrade([2.0] * 3))
    scalar = StockTradingVecEnv(close, initial_cash=1e5, max_trade_shares=100, execution="close",
                                costs=HalfSpread(0.004) + FixedPerTrade(2.0))
    a = torch.tensor([[0.3, 0.6, -0.1]])
    assert torch.equal(same.step(a)[4]["costs"], scalar.step(a)[4]["costs"])


def test_lot_sizes_keep_orders_and_limited_fills_in_whole_lots():
    close = flat([37.0, 91.0])
    env = StockTradingVecEnv(close, initial_cash=20_000, max_trade_shares=1000, cost_pct=1e-3, lot_size=[100, 10],
                             execution="close")
    *_, info = env.step(torch.tensor([[0.26, 0.333]]))  # asks 260 and 333: rounds to 300 and 330
    trades = info["trades"][0].numpy()
    assert trades[0] % 100 == 0 and trades[1] % 10 == 0
    # 300 x 37 + 330 x 91 = 41,130 > 20,000: the cash-limited fill keeps whole lots, and only
    # less than one lot of each is left affordable.
    f_budget = 20_000 / ((300 * 37 + 330 * 91) * 1.001)
    assert trades.tolist() == [np.floor(300 * f_budget / 100) * 100, np.floor(330 * f_budget / 10) * 10] == [100, 160]
    assert info["cash"].item() >= 0


def test_position_limits_per_name():
    close = flat([10.0, 20.0])
    env = StockTradingVecEnv(close, initial_cash=1e6, max_trade_shares=100, cost_pct=0.0, max_position=[150, 40],
                             margin=Margin(initial=0.5), execution="close")
    held = []
    for a in ([1.0, 1.0], [1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]):
        held.append(env.step(torch.tensor([a]))[4]["holdings"][0].tolist())
    assert held == [[100, 40], [150, -40], [50, -40], [-50, -40], [-150, -40]]


@pytest.mark.parametrize("kwargs, match", [
    ({"lot_size": 0}, "lot of 0 shares can never trade"),
    ({"lot_size": 2.5}, "lot_size must be a whole number"),
    ({"lot_size": [100, 10, 1]}, r"one value per stock \(2"),
    ({"max_position": -5}, "max_position must be a finite number >= 0"),
    ({"max_position": [10.0, float("nan")]}, "max_position must be a finite number"),
    ({"costs": HalfSpread([0.001, 0.002, 0.003])}, "HalfSpread spread has 3 values, one per stock"),
    ({"costs": Proportional(1e-3) + FixedPerTrade([1.0])}, "FixedPerTrade fee has 1 values"),
])
def test_bad_per_stock_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        StockTradingVecEnv(flat([10.0, 20.0]), **kwargs)


def test_bad_per_stock_costs_are_refused():
    with pytest.raises(ValueError, match="BorrowFee annual_rate must be in"):
        BorrowFee([0.01, -0.02])
    with pytest.raises(ValueError, match="one value per stock, got an empty sequence"):
        HalfSpread([])
