"""Tick sizes (issue 34): fills on a per-stock price grid, buys rounded up and sells down (the side
that costs the trader), reconciled by hand; a grid every price is on changes nothing; bad ticks are
refused by name."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from finance import Margin, StockTradingVecEnv
from finance.execution import round_to_tick

CLOSE = pd.DataFrame([[10.02, 20.10], [10.13, 20.40], [10.31, 20.90], [10.27, 21.10]],
                     index=pd.bdate_range("2023-05-01", periods=4), columns=["A", "B"])


def test_round_to_tick_by_hand():
    prices = torch.tensor([[10.02, 10.05, 99.999, 7.0]], dtype=torch.float64)
    tick = torch.tensor([0.05, 0.01, 0.01, 0.25], dtype=torch.float64)
    up, down = round_to_tick(prices, tick)
    torch.testing.assert_close(up, torch.tensor([[10.05, 10.05, 100.0, 7.0]], dtype=torch.float64), rtol=1e-15, atol=0)
    # 10.05 / 0.01 is 1005.0000000000001 in floats: a price on the grid stays there.
    torch.testing.assert_close(down, torch.tensor([[10.0, 10.05, 99.99, 7.0]], dtype=torch.float64), rtol=1e-15, atol=0)


def test_buys_fill_up_and_sells_down_by_hand():
    env = StockTradingVecEnv(CLOSE, initial_cash=10_000.0, cost_pct=1e-3, max_trade_shares=100,
                             tick_size=[0.05, 0.25])
    *_, info = env.step(torch.tensor([[1.0, 0.5]]))  # buys fill at day 1's close: A 10.13 -> 10.15, B 20.40 -> 20.50
    torch.testing.assert_close(info["fill_prices"], torch.tensor([[10.15, 20.50]], dtype=torch.float64))
    bought = 100 * 10.15 + 50 * 20.50
    assert info["cash"].item() == pytest.approx(10_000.0 - bought * 1.001, rel=1e-15)
    assert info["costs"].item() == pytest.approx(bought * 1e-3, rel=1e-12)
    *_, info = env.step(torch.tensor([[-1.0, -0.2]]))  # sells at day 2's close: A 10.31 -> 10.30, B 20.90 -> 20.75
    torch.testing.assert_close(info["fill_prices"], torch.tensor([[10.30, 20.75]], dtype=torch.float64))
    sold = 100 * 10.30 + 20 * 20.75
    assert info["cash"].item() == pytest.approx(10_000.0 - bought * 1.001 + sold * 0.999, rel=1e-14)
    assert info["holdings"].tolist() == [[0.0, 30.0]]
    # The marks stay at the closes: the account is worth cash + 30 B at 20.90.
    assert info["account_value"].item() == pytest.approx(info["cash"].item() + 30 * 20.90, rel=1e-15)


def test_a_short_sale_fills_down_and_a_cash_limited_buy_is_budgeted_at_the_rounded_price():
    short = StockTradingVecEnv(CLOSE, initial_cash=10_000.0, cost_pct=0.0, max_trade_shares=100,
                               tick_size=0.25, margin=Margin(initial=0.5), execution="next_open",
                               open_prices=CLOSE + 0.01)
    *_, info = short.step(torch.tensor([[-0.4, 0.0]]))  # opens 10.14 -> 10.00
    assert info["fill_prices"][0, 0].item() == 10.0 and info["cash"].item() == 10_000.0 + 40 * 10.0
    # 993 cash buys 97 A at 10.15 (98 would cost 994.70; 98 at the unrounded 10.13 cost 992.74).
    poor = StockTradingVecEnv(CLOSE, initial_cash=993.0, cost_pct=0.0, max_trade_shares=200, tick_size=0.05)
    *_, info = poor.step(torch.tensor([[1.0, 0.0]]))
    assert info["holdings"][0, 0].item() == 97
    assert info["cash"].item() == pytest.approx(993.0 - 97 * 10.15, rel=1e-14)


def test_a_grid_every_price_is_on_changes_nothing():
    cents = CLOSE.round(2)
    plain = StockTradingVecEnv(cents, initial_cash=1e5, max_trade_shares=100, num_envs=4)
    ticked = StockTradingVecEnv(cents, initial_cash=1e5, max_trade_shares=100, num_envs=4, tick_size=0.01)
    assert plain._fast and not ticked._fast  # no tick: the original fill, untouched
    rng = np.random.default_rng(3)
    for _ in range(3):
        a = torch.as_tensor(rng.uniform(-1, 1, (4, 2)), dtype=torch.float32)
        one, other = plain.step(a)[4], ticked.step(a)[4]
        assert torch.equal(one["holdings"], other["holdings"])
        torch.testing.assert_close(one["cash"], other["cash"], rtol=1e-14, atol=0)
        torch.testing.assert_close(one["fill_prices"], other["fill_prices"], rtol=1e-15, atol=0)
    assert torch.equal(ticked.evaluation_env()._fill_up, ticked._fill_up)  # the copy keeps the grid


@pytest.mark.parametrize("tick, message", [
    (0.0, r"tick_size must be > 0 for every stock \(0.01 for a cent\)"),
    ([0.01, -0.05], r"tick_size must be a finite number >= 0 for every stock, got -0.05"),
    ([0.01, 0.01, 0.01], r"tick_size must be a number or one value per stock \(2, in the data's ticker order\), got 3"),
    (float("nan"), r"tick_size must be a finite number"),
    (True, r"tick_size must be a finite number"),
    ([0.01, 25.0], r"tick_size 25 of B is above its price 20.1 on 2023-05-01: a sell would fill at 0"),
])
def test_bad_ticks_are_refused_by_name(tick, message):
    with pytest.raises(ValueError, match=message):
        StockTradingVecEnv(CLOSE, tick_size=tick)
