"""Order execution for a batch of long-only accounts: a pure function of tensors, no env state.

``execute_orders(cash, holdings, prices, orders, cost_pct)`` fills signed share orders at one
price per stock, with the rules of ``finance.env.StockTradingVecEnv`` (which calls it every step):

- sells execute first and are capped at the shares held (no short selling); an order of
  ``-inf`` sells the whole position;
- sells settle first and their proceeds, less ``cost_pct``, fund the buys;
- buys cost ``shares * price * (1 + cost_pct)``; if an account's cash cannot pay for all of them,
  every buy order of that account is scaled by the same factor ``cash / cost`` (times
  ``1 - 64 eps``, so float rounding can never overdraw) and rounded down to whole shares; the
  cash left over by the rounding stays cash;
- costs are ``cost_pct`` of the traded value, sells and buys alike.

So cash and holdings never go negative, and ``cash + holdings . prices`` changes by exactly
``-costs`` (to float rounding). Orders are whole shares (the env rounds actions to them).
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Execution(NamedTuple):
    """The accounts after ``execute_orders``: every tensor in the dtype of ``cash``."""

    cash: torch.Tensor  # (N,) after sells and buys, costs paid
    holdings: torch.Tensor  # (N, S) shares held after the trades
    trades: torch.Tensor  # (N, S) signed shares executed (negative: sold)
    traded_value: torch.Tensor  # (N,) value of the shares sold plus the shares bought, at ``prices``
    costs: torch.Tensor  # (N,) cost_pct * traded_value


def execute_orders(cash: torch.Tensor, holdings: torch.Tensor, prices: torch.Tensor, orders: torch.Tensor,
                   cost_pct: float) -> Execution:
    """Fill ``orders`` (N, S) signed whole shares for N accounts with ``cash`` (N,) and
    ``holdings`` (N, S) at ``prices`` (N, S), paying ``cost_pct`` of the traded value (rules in
    the module docstring). Batched over accounts and stocks; the inputs are not modified.

    ``cash``, ``holdings``, ``prices`` and ``orders`` share one floating dtype (float64 keeps
    share counts exact to 2**53) and device; cash and holdings must be >= 0, prices > 0.
    """
    margin = 1.0 - 64 * torch.finfo(cash.dtype).eps  # shrink the cash-limited buys by 64 ulps
    sell = torch.minimum(orders.neg(), holdings).clamp_(min=0.0)  # no short selling
    buy = orders.clamp(min=0.0)

    sell_value = torch.linalg.vecdot(sell, prices)  # (N,)
    cash = cash + sell_value * (1.0 - cost_pct)  # sells settle first and fund the buys
    buy_cost = torch.linalg.vecdot(buy, prices) * (1.0 + cost_pct)
    # Cash-limited buys: scale every order by cash / cost, round down to whole shares
    # (exact no-op where fill = 1: the orders are whole already).
    fill = torch.where(buy_cost > cash, cash / buy_cost.clamp(min=torch.finfo(cash.dtype).tiny) * margin, 1.0)
    buy = buy.mul_(fill[:, None]).floor_()
    buy_value = torch.linalg.vecdot(buy, prices)
    cash = cash - buy_value * (1.0 + cost_pct)
    trades = buy.sub_(sell)  # (N, S) signed shares
    traded_value = sell_value + buy_value
    return Execution(cash, holdings + trades, trades, traded_value, traded_value * cost_pct)
