"""Order execution for a batch of accounts: pure functions of tensors, no env state.

``execute_orders(cash, holdings, prices, orders, cost_pct)`` fills signed share orders at one
price per stock for long-only cash accounts paying a proportional cost, with the rules of
``finance.env.StockTradingVecEnv`` (which calls it every step with its default settings):

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

``execute(cash, holdings, prices, orders, costs, day, ...)`` is the general fill the env uses
with any other setting: any ``finance.costs`` model, a participation cap, and margin accounts
(``Margin``: leverage, short selling). Each order splits into the part that *reduces* a
position (toward 0, at most its size) and the part that *adds* exposure. Reductions always fill.
The additions of an account are scaled by one factor ``f`` in [0, 1], the largest that keeps

    gross' <= L * equity'        (gross = sum_s |h_s| p_s, equity = cash + sum_s h_s p_s),

after the trade and its costs, then rounded toward zero to whole shares (``L`` the gross limit:
1 for a cash account, where it reads ``cash' >= 0``; ``1 / initial`` margin, or ``max_gross``,
for a margin account). Costs enter the budget as the cost model says they scale
(``finance.costs``), so the bound holds whatever the model; with a convex cost (``SqrtImpact``)
``f`` is solved for exactly (bisection), so no affordable share is left unbought. A cash account (``L = 1``, no shorts)
with ``Proportional(c)`` fills exactly as ``execute_orders`` (to float rounding).

``margin_call(cash, holdings, prices, maintenance)`` says which accounts are below maintenance
(``equity < maintenance * gross``): the env liquidates them at the next fill, every position
(``Margin(liquidation="all")``, the default) or only the pro-rata part ``restoring_fraction`` finds
(``"restore"``).

``round_to_tick(prices, tick)`` puts prices on a tick grid, up for buys and down for sells (the
env's ``tick_size``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, NamedTuple

import numpy as np
import pandas as pd
import torch

from finance.costs import CostModel, holding_costs, split_trade_costs


class Execution(NamedTuple):
    """The accounts after ``execute_orders``: every tensor in the dtype of ``cash``."""

    cash: torch.Tensor  # (N,) after sells and buys, costs paid
    holdings: torch.Tensor  # (N, S) shares held after the trades
    trades: torch.Tensor  # (N, S) signed shares executed (negative: sold)
    traded_value: torch.Tensor  # (N,) value of the shares sold plus the shares bought, at ``prices``
    costs: torch.Tensor  # (N,) cost_pct * traded_value (execute: trade costs plus holding costs)


LIQUIDATIONS = ("all", "restore")
"""The values of ``Margin(liquidation=...)``: close the whole account, or only what restores maintenance."""


@dataclasses.dataclass(frozen=True)
class Margin:
    """The rules of a margin account: leverage and short selling (the env's ``margin=``; None, the
    default, is a long-only cash account).

    Args:
        initial: initial margin, ``equity / gross`` a trade may not take the account below
            (Reg T: 0.5, so gross exposure up to 2x equity). In (0, 1].
        maintenance: ``equity < maintenance * gross`` at a close is a margin call: the env
            liquidates every position of that account at its next fill (FINRA's minimum for
            longs: 0.25). In [0, initial].
        max_gross: a tighter gross exposure limit, ``gross / equity``, if any (e.g. 1.5).
        shorts: allow short positions (selling shares not held).
        liquidation: what a margin call does at the next fill. ``"all"`` (the default, the books of
            1.1.0): close every position. ``"restore"``: as brokers do, sell (or buy back) the same
            fraction of every position, the smallest that leaves ``equity >= maintenance * gross``
            at the fill prices after the trade costs, in whole shares (lots) rounded up
            (``restoring_fraction``); an account that cannot be restored is closed whole.

    Short-sale proceeds stay in cash, so cash can exceed equity; buying on margin makes it negative
    (a loan, at no interest here). Borrowing stock costs ``finance.costs.BorrowFee`` if the cost
    model has one.
    """

    initial: float = 0.5
    maintenance: float = 0.25
    max_gross: float | None = None
    shorts: bool = True
    liquidation: str = "all"

    def __post_init__(self) -> None:
        for name in ("initial", "maintenance") + (("max_gross",) if self.max_gross is not None else ()):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"Margin {name} must be a finite number, got {value!r}")
        if not 0 < self.initial <= 1:
            raise ValueError(f"Margin initial must be in (0, 1] (equity / gross exposure; 0.5 allows 2x), got "
                             f"{self.initial}")
        if not 0 <= self.maintenance <= self.initial:
            raise ValueError(f"Margin maintenance must be in [0, initial={self.initial}], got {self.maintenance}")
        if self.max_gross is not None and self.max_gross <= 0:
            raise ValueError(f"Margin max_gross must be > 0 (gross exposure / equity), got {self.max_gross}")
        if not isinstance(self.shorts, bool):
            raise ValueError(f"Margin shorts must be True or False, got {self.shorts!r}")
        if self.liquidation not in LIQUIDATIONS:
            raise ValueError(f"Margin liquidation must be one of {LIQUIDATIONS} ('all': a margin call closes every "
                             f"position; 'restore': only what restores the maintenance margin), got "
                             f"{self.liquidation!r}")

    @property
    def gross_limit(self) -> float:
        """``L``: the most gross exposure a trade may reach, as a multiple of equity."""
        return min(1.0 / self.initial, math.inf if self.max_gross is None else self.max_gross)


@dataclasses.dataclass(frozen=True)
class Financing:
    """Interest on an account's cash (the env's ``financing=``; None, the default, is 0% on
    everything, the books of 1.1.0 bit for bit).

    Args:
        cash_rate: annual rate earned on cash (0.04 for 4%): a constant, or a ``pd.Series`` of
            annual rates indexed by date (a T-bill yield / 100), the last one on or before each day.
        margin_rate: annual rate paid on negative cash, a margin loan (a margin account).
        short_rebate: annual rate earned on the proceeds of short sales, held by the broker as
            collateral (they earn this instead of ``cash_rate``).
        bars_per_year: the annual rates are compounded down to a bar as ``(1 + rate)**(1 / bars_per_year) - 1``,
            as ``BacktestResult.metrics`` does with a constant risk-free rate.

    Each step accrues on the balances at the close of its decision day, after any trade at that
    close (with ``execution="close"``; the next-bar fills trade on the next day, so their balances
    accrue from the next step): with ``S = sum_s max(-h_s, 0) p_s`` the short proceeds and
    ``F = cash - S`` the account's own cash, interest is ``r_cash * max(F, 0) - r_margin * max(-F, 0)
    + r_rebate * S``, added to the cash at the mark (``info["interest"]``). ``risk_free(dates)`` is
    the per-bar cash rate: the risk-free rate of the backtest's metrics, from this same setting.
    """

    cash_rate: Any = 0.0
    margin_rate: float = 0.0
    short_rebate: float = 0.0
    bars_per_year: int = 252

    def __post_init__(self) -> None:
        for name in ("margin_rate", "short_rebate") + (() if isinstance(self.cash_rate, pd.Series) else ("cash_rate",)):
            _check_annual_rate(getattr(self, name), f"Financing {name}")
        if isinstance(self.cash_rate, pd.Series):
            values = pd.to_numeric(self.cash_rate, errors="coerce")
            if values.isna().any() or not isinstance(self.cash_rate.index, pd.DatetimeIndex):
                raise ValueError("Financing cash_rate as a Series must hold annual rates (0.04 for 4%), no NaN, "
                                 "indexed by date; drop or fill the missing days (cash_rate.ffill().dropna())")
            for value in (values.min(), values.max()):
                _check_annual_rate(float(value), "Financing cash_rate")
        if isinstance(self.bars_per_year, bool) or not isinstance(self.bars_per_year, int) or self.bars_per_year < 1:
            raise ValueError(f"Financing bars_per_year must be a whole number >= 1 (252 for daily bars), got "
                             f"{self.bars_per_year!r}")

    @property
    def is_zero(self) -> bool:
        """No interest at all: the env skips the accrual (the books stay bit-identical)."""
        constant = not isinstance(self.cash_rate, pd.Series) and self.cash_rate == 0.0
        return constant and self.margin_rate == 0.0 and self.short_rebate == 0.0

    def _per_bar(self, annual: Any) -> Any:
        return (1.0 + annual) ** (1.0 / self.bars_per_year) - 1.0

    def risk_free(self, dates: pd.Index) -> pd.Series:
        """Per-bar cash rate on ``dates`` (the rate of each bar's start, the last one on or before
        it): the ``risk_free`` Series ``BacktestResult.metrics`` takes."""
        if isinstance(self.cash_rate, pd.Series):
            rates = self.cash_rate.sort_index()
            annual = rates.reindex(rates.index.union(dates)).ffill().reindex(dates)
            if annual.isna().any():
                raise ValueError(f"Financing cash_rate starts on {rates.index[0].date()}, after the first day "
                                 f"{dates[0]}; pass rates from that day or earlier")
        else:
            annual = pd.Series(float(self.cash_rate), index=dates)
        return self._per_bar(annual.astype("float64")).rename("risk_free")

    def per_bar(self, dates: pd.Index) -> tuple[np.ndarray, float, float]:
        """(cash rate (T,) per bar on each date, margin rate per bar, short rebate per bar)."""
        if not isinstance(dates, pd.DatetimeIndex) and isinstance(self.cash_rate, pd.Series):
            raise ValueError("Financing cash_rate as a Series needs an env with dates (a DataFrame of closes)")
        cash = (self.risk_free(dates).to_numpy() if isinstance(dates, pd.DatetimeIndex)
                else np.full(len(dates), self._per_bar(float(self.cash_rate))))
        return cash, self._per_bar(self.margin_rate), self._per_bar(self.short_rebate)

    def interest(self, cash: torch.Tensor, holdings: torch.Tensor, prices: torch.Tensor, cash_rate: torch.Tensor,
                 margin_rate: float, rebate: float) -> torch.Tensor:
        """(N,) one bar's interest on ``cash`` (N,) and ``holdings`` (N, S) at ``prices``, at per-bar rates."""
        short = torch.linalg.vecdot(holdings.clamp(max=0.0).neg(), prices)
        own = cash - short
        return cash_rate * own.clamp(min=0.0) - margin_rate * (-own).clamp(min=0.0) + rebate * short


def _check_annual_rate(value: Any, name: str) -> float:
    number = isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)
    if not number or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite annual rate (0.04 for 4%), got {value!r}")
    if not 0.0 <= value < 1.0:
        hint = f"; pass {value / 100:g} for {value:g}%" if value >= 1 else ""
        raise ValueError(f"{name} must be an annual rate in [0, 1) (0.04 for 4%), got {value}{hint}")
    return float(value)


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


def margin_call(cash: torch.Tensor, holdings: torch.Tensor, prices: torch.Tensor, maintenance: float) -> torch.Tensor:
    """(N,) bool: accounts whose equity ``cash + h . p`` is below ``maintenance`` times their gross
    exposure ``|h| . p`` at ``prices``."""
    equity = cash + torch.linalg.vecdot(holdings, prices)
    return equity < maintenance * torch.linalg.vecdot(holdings.abs(), prices)


def restoring_fraction(cash: torch.Tensor, holdings: torch.Tensor, prices: torch.Tensor, costs: CostModel,
                       day: torch.Tensor, maintenance: float, lot: torch.Tensor | None = None) -> torch.Tensor:
    """(N, S) liquidation orders: for each account the same fraction ``k`` of every position,
    toward zero, rounded up to whole shares (or lots, capped at the position), with ``k`` the
    smallest in [0, 1] after which ``equity >= maintenance * gross`` at ``prices`` net of the trade
    costs of the liquidation (found by bisection; a position sold at ``p`` turns into the same cash,
    so only the costs and the gross exposure change). Where no ``k`` restores it, every position is
    closed (``k = 1``); where the account already meets it, nothing is sold (``k = 0``)."""
    size = holdings.abs()
    equity = cash + torch.linalg.vecdot(holdings, prices)

    def cut(k: torch.Tensor) -> torch.Tensor:  # (N, S) shares sold or bought back at fraction k
        shares = size * k[:, None]
        shares = shares.ceil() if lot is None else (shares / lot).ceil() * lot
        return torch.minimum(shares, size)

    def restored(k: torch.Tensor) -> torch.Tensor:
        shares = cut(k)
        scaling, fixed = split_trade_costs(costs, shares, prices, day)
        gross = torch.linalg.vecdot(size - shares, prices)
        return equity - scaling - fixed >= maintenance * gross

    # the smallest k that restores: restored(high) holds or high is 1
    _, high = _bisect(lambda k: ~restored(k), torch.zeros_like(cash), torch.ones_like(cash))
    k = torch.where(restored(torch.zeros_like(cash)), 0.0, high)
    k = torch.where(restored(k), k, 1.0)
    return -torch.sign(holdings) * cut(k)


def execute(cash: torch.Tensor, holdings: torch.Tensor, prices: torch.Tensor, orders: torch.Tensor, costs: CostModel,
            day: torch.Tensor, *, gross_limit: float = 1.0, shorts: bool = False,
            max_shares: torch.Tensor | None = None, lot: torch.Tensor | None = None) -> Execution:
    """Fill ``orders`` (N, S) signed whole shares at ``prices`` (N, S) under any cost model and
    margin rule (module doc): the general form of ``execute_orders``.

    Args:
        cash, holdings: (N,), (N, S) the accounts (holdings < 0 are short positions).
        costs: a bound ``finance.costs`` model; ``day`` (N,) the data rows it reads (the decision day).
        gross_limit: ``L``, gross exposure after a trade <= L * equity (1: a cash account).
        shorts: allow sells beyond the holdings; off, sells are capped at the shares held.
        max_shares: (N, S) most shares traded per stock (a participation cap), or None.
        lot: (S,) shares per lot: the orders and ``max_shares`` are whole lots, and a limited fill
            rounds toward zero to whole lots. None: single shares.

    Returns ``Execution``; its ``costs`` are the trade costs plus the holding costs of the
    positions after the trades (``BorrowFee``). The inputs are not modified.
    """
    if max_shares is not None:
        orders = torch.minimum(torch.maximum(orders, -max_shares), max_shares)
    if not shorts:
        orders = torch.maximum(orders, -holdings.clamp(min=0.0))  # sells capped at the shares held
    # Split every order into the part that reduces the position (toward 0) and the part that adds.
    opposite = orders * holdings < 0
    reduce = torch.where(opposite, torch.copysign(torch.minimum(orders.abs(), holdings.abs()), orders), 0.0)
    add = orders - reduce
    after_reduce = holdings + reduce
    # Costs paid whatever f (reductions, fixed fees, holdings left), and what f adds to them.
    reduce_cost, _ = split_trade_costs(costs, reduce.abs(), prices, day)
    full_cost, fixed_cost = split_trade_costs(costs, orders.abs(), prices, day)
    hold_reduce, hold_full = holding_costs(costs, after_reduce, prices), holding_costs(costs, holdings + orders, prices)
    # gross' <= L equity' for f in [0, 1]: slack - paid >= f * slope, where slack = equity - gross_r / L
    # (cash + sold value for a cash account, no cancellation) and slope = added value / L + its costs.
    slack = cash + torch.linalg.vecdot(holdings - after_reduce.abs() / gross_limit, prices)
    paid = slack - (reduce_cost + fixed_cost + hold_reduce)
    slope = torch.linalg.vecdot(add.abs(), prices) / gross_limit + (full_cost - reduce_cost) + (hold_full - hold_reduce)
    margin = 1.0 - 64 * torch.finfo(cash.dtype).eps  # shrink a limited fill by 64 ulps, as execute_orders
    limited = paid < slope
    f = torch.where(limited, (paid / slope.clamp(min=torch.finfo(cash.dtype).tiny)).clamp(0.0, 1.0), 1.0)
    if not all(m.linear for m in costs.parts) and bool(limited.any()):
        # A convex cost (cost(f q) < f cost(q)) makes the proportional f a lower bound: solve for the largest.
        def need(f: torch.Tensor) -> torch.Tensor:
            added = add * f[:, None]
            scaling, _ = split_trade_costs(costs, reduce.abs() + added.abs(), prices, day)
            held = holding_costs(costs, after_reduce + added, prices)
            return (f * torch.linalg.vecdot(add.abs(), prices) / gross_limit + (scaling - reduce_cost)
                    + (held - hold_reduce))

        f = _largest_fill(need, paid, f, limited)
    f = torch.where(limited, f * margin, f)
    if lot is None:
        trades = reduce + (add * f[:, None]).trunc_()  # whole shares, toward zero
    else:
        trades = reduce + (add * f[:, None] / lot).trunc_() * lot  # whole lots, toward zero
    after = holdings + trades
    trade_cost, fixed_paid = split_trade_costs(costs, trades.abs(), prices, day)
    paid_costs = trade_cost + fixed_paid + holding_costs(costs, after, prices)
    paid_costs = paid_costs + torch.zeros_like(cash)  # a (N,) tensor when the model has no cost
    cash = cash - torch.linalg.vecdot(trades, prices) - paid_costs
    traded_value = torch.linalg.vecdot(trades.abs(), prices)
    return Execution(cash, after, trades, traded_value, paid_costs)


TICK_TOLERANCE = 1e-9  # in ticks: a price this close to the grid is on it (10.05 / 0.01 is 1005.0000000000001)


def round_to_tick(prices: torch.Tensor, tick: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(buy, sell) prices on the grid of ``tick`` (S,) per stock: ``prices`` (..., S) rounded up
    to a whole number of ticks for a buy and down for a sell, the side that costs the trader. A
    price already on the grid (to ``TICK_TOLERANCE`` of a tick, float rounding) is kept on it."""
    ticks = prices / tick
    nearest = ticks.round()
    on_grid = (ticks - nearest).abs() <= TICK_TOLERANCE
    up = torch.where(on_grid, nearest, ticks.ceil()) * tick
    down = torch.where(on_grid, nearest, ticks.floor()) * tick
    return up, down


BISECTION_STEPS = 60  # halves [f_proportional, 1] to below 1e-18: past float64's resolution of f


def _largest_fill(need: Callable[[torch.Tensor], torch.Tensor], paid: torch.Tensor, low: torch.Tensor,
                  limited: torch.Tensor) -> torch.Tensor:
    """(N,) the largest ``f`` in [low, 1] with ``need(f) <= paid`` where ``limited``, by bisection.
    ``need`` increases with ``f`` (costs and exposure grow with the order) and ``need(low) <= paid``
    (the proportional budget of a convex cost), so the bracket always holds a feasible end."""
    low, _ = _bisect(lambda f: need(f) <= paid, low, torch.ones_like(low))
    return torch.where(limited, low, 1.0)


def _bisect(below: Callable[[torch.Tensor], torch.Tensor], low: torch.Tensor, high: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """(low, high) after ``BISECTION_STEPS`` halvings of [low, high] (per account) around the point
    where the monotone ``below`` turns from True (at and under it) to False."""
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (low + high)
        fits = below(mid)
        low, high = torch.where(fits, mid, low), torch.where(fits, high, mid)
    return low, high
