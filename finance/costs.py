"""Trading costs behind one small interface: what a fill pays, as batched tensor code.

A cost model prices the trades of a batch of accounts in money, per stock: ``trade_costs(shares,
prices, day)`` for ``shares`` (N, S) whole shares traded (absolute), ``prices`` (N, S) the fill
prices and ``day`` (N,) the row each account decided on; and, for positions held,
``holding_costs(holdings, prices)`` (N,). Models add up: ``Proportional(1e-3) + BorrowFee(0.02)``
is a model too. ``finance.env.StockTradingVecEnv(costs=...)`` and ``finance.execution.execute``
use them; ``cost_pct=c`` is ``Proportional(c)``, the default, and keeps the original fast path.

The models, for ``q`` shares traded of a stock at price ``p`` (money, per stock and step):

====================  =======================================================================
``Proportional(pct)`` ``pct * q * p``: commissions and fees as a fraction of traded value
``FixedPerTrade(fee)`` ``fee * 1[q > 0]``: a ticket fee for every stock traded in a step
``HalfSpread(spread)`` ``spread / 2 * q * p``: crossing half the bid-ask spread (a fraction of price)
``SqrtImpact(eta)``   ``eta * sigma * sqrt(q / ADV) * q * p``: square-root market impact
``BorrowFee(rate)``   ``rate / bars_per_year * sum_s max(-h_s, 0) * p_s`` per step, on the shorts
====================  =======================================================================

``HalfSpread(s) + SqrtImpact(eta)`` is the cost per unit of traded value
``s / 2 + eta * sigma * sqrt(q / ADV)`` of Almgren, Thum, Hauptmann and Li, *Direct Estimation of
Equity Market Impact* (Risk, 2005), with their exponent 3/5 on the participation ``q / ADV``
replaced by the square-root law's 1/2 (Toth et al., *Anomalous price impact and the critical nature
of liquidity in financial markets*, PRX 2011). ``sigma`` is the daily volatility of returns and
``ADV`` the average daily volume in shares, both over a trailing window ending on the decision day
(causal), so the model needs daily volume (``StockTradingVecEnv(volume=...)``).

How the fill budgets costs. A fill that is short of cash (or of margin) scales the orders that add
exposure down by one factor ``f`` in [0, 1] (``finance.execution``). That needs to know how a cost
changes when an order shrinks: a model whose cost is convex in the order size and zero at zero
(the proportional, spread, impact and borrow models: ``cost(f q) <= f cost(q)``) is budgeted in
proportion; one with ``fixed = True`` (the ticket fee) is budgeted in full, whatever ``f``. A new
model must be one or the other, or a fill can overdraw. Budgeting in proportion is exact for a
linear cost; for a convex one (``linear = False``: ``SqrtImpact``) it is only a lower bound on
``f``, so the fill then solves for the largest ``f`` that fits by bisection from that bound.
``rate`` is the part of a model that is a fixed fraction of traded value (``pct``, ``spread / 2``):
what a sizing rule such as ``finance.backtest.BuyAndHoldPolicy`` budgets with (the env's
``cost_pct``).

Every model is a frozen dataclass of floats; ``bind(close, volume)`` returns the copy an env uses,
holding whatever per-day tables it needs (``SqrtImpact``: sigma and ADV) on the env's device.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd
import torch

from finance.data.checks import check_int, check_number


def _check_rate(value: Any, name: str, high: float = np.inf) -> float:
    value = check_number(value, name)
    if not 0 <= value < high:
        raise ValueError(f"{name} must be in [0, {high:g}), got {value}")
    return value


def _check_per_stock(value: Any, name: str, high: float = np.inf) -> float | tuple[float, ...]:
    """A rate for every stock (a number) or one per stock (a sequence, kept as a tuple of floats)."""
    if isinstance(value, (list, tuple, np.ndarray, pd.Series, torch.Tensor)):
        values = np.asarray(value.cpu() if isinstance(value, torch.Tensor) else value, dtype=np.float64).ravel()
        if len(values) == 0:
            raise ValueError(f"{name} per stock must hold one value per stock, got an empty sequence")
        return tuple(_check_rate(float(v), name, high) for v in values)
    return _check_rate(value, name, high)


def _check_length(model: "CostModel", field: str, num_stocks: int) -> None:
    value = getattr(model, field)
    if isinstance(value, tuple) and len(value) != num_stocks:
        raise ValueError(f"{type(model).__name__} {field} has {len(value)} values, one per stock, and the data has "
                         f"{num_stocks} stocks; pass a single number or one value per ticker, in the data's order")


def _as_row(value: float | tuple[float, ...], like: torch.Tensor) -> float | torch.Tensor:
    """A number as is, a per-stock tuple as a (S,) tensor like ``like``: both broadcast over (N, S)."""
    return value if isinstance(value, float) else torch.as_tensor(value, dtype=like.dtype, device=like.device)


def _largest(value: float | tuple[float, ...]) -> float:
    return value if isinstance(value, float) else max(value)


# ---------------------------------------------------------------------------- the interface
class CostModel:
    """The interface (module doc). Subclasses override ``trade_costs`` or ``holding_costs``."""

    fixed: bool = False  # True: the cost of an order does not shrink with it (budgeted in full)
    linear: bool = True  # False: convex but not proportional in the order size (SqrtImpact); the fill solves for f
    needs_volume: bool = False  # True: bind() needs daily volume
    on_trades: bool = True  # prices trades (trade_costs)
    on_holdings: bool = False  # prices positions held (holding_costs)

    @property
    def rate(self) -> float:
        """The part of the cost that is a fixed fraction of traded value (0 if none)."""
        return 0.0

    @property
    def parts(self) -> tuple["CostModel", ...]:
        """The single models this one adds up."""
        return (self,)

    def bind(self, close: torch.Tensor, volume: torch.Tensor | None) -> "CostModel":
        """The copy an env uses on ``close`` (T, S) and ``volume`` (T, S) or None, on their device."""
        if self.needs_volume and volume is None:
            raise ValueError(f"{self!r} needs daily volume (shares traded per day): pass volume=prices['volume'] to "
                             "the env (source='sample_ohlcv' or 'yfinance' has it; MarketData.env passes it when "
                             "the market has it)")
        return self

    def trade_costs(self, shares: torch.Tensor, prices: torch.Tensor, day: torch.Tensor) -> torch.Tensor:
        """(N, S) money paid for trading ``shares`` (N, S, >= 0) at ``prices`` (N, S) on rows ``day`` (N,)."""
        return torch.zeros_like(prices)

    def holding_costs(self, holdings: torch.Tensor, prices: torch.Tensor) -> torch.Tensor:
        """(N,) money paid for holding ``holdings`` (N, S, signed) at ``prices`` for one step."""
        return torch.zeros_like(prices[:, 0])

    def __add__(self, other: "CostModel") -> "CostModel":
        if not isinstance(other, CostModel):
            return NotImplemented
        return Sum(self.parts + other.parts)

    def __radd__(self, other: object) -> "CostModel":
        return self if isinstance(other, int) and other == 0 else NotImplemented  # sum(models) starts at 0


@dataclasses.dataclass(frozen=True)
class Sum(CostModel):
    """Several models together: every cost is the sum of the parts' (``a + b`` builds one)."""

    models: tuple[CostModel, ...]

    def __post_init__(self) -> None:
        for m in self.models:
            if not isinstance(m, CostModel) or isinstance(m, Sum):
                raise TypeError(f"Sum takes single cost models, got {m!r}; write a + b + c")

    @property
    def rate(self) -> float:
        return sum(m.rate for m in self.models)

    @property
    def parts(self) -> tuple[CostModel, ...]:
        return self.models

    @property
    def needs_volume(self) -> bool:  # type: ignore[override]
        return any(m.needs_volume for m in self.models)

    def bind(self, close: torch.Tensor, volume: torch.Tensor | None) -> "Sum":
        return Sum(tuple(m.bind(close, volume) for m in self.models))

    def trade_costs(self, shares: torch.Tensor, prices: torch.Tensor, day: torch.Tensor) -> torch.Tensor:
        return sum(m.trade_costs(shares, prices, day) for m in self.models if m.on_trades)

    def holding_costs(self, holdings: torch.Tensor, prices: torch.Tensor) -> torch.Tensor:
        return sum(m.holding_costs(holdings, prices) for m in self.models if m.on_holdings)

    def __repr__(self) -> str:
        return " + ".join(map(repr, self.models))


# ---------------------------------------------------------------------------- trade costs
@dataclasses.dataclass(frozen=True)
class Proportional(CostModel):
    """``pct * q * p``: a fraction of the traded value, on buys and sells (the env's ``cost_pct``)."""

    pct: float = 1e-3

    def __post_init__(self) -> None:
        object.__setattr__(self, "pct", _check_rate(self.pct, "Proportional pct", 1.0))

    @property
    def rate(self) -> float:
        return self.pct

    def trade_costs(self, shares: torch.Tensor, prices: torch.Tensor, day: torch.Tensor) -> torch.Tensor:
        return shares * prices * self.pct


@dataclasses.dataclass(frozen=True)
class FixedPerTrade(CostModel):
    """``fee * 1[q > 0]``: a fixed fee (money) for each stock traded in a step, whatever its size.

    A fill short of cash budgets the fee of every order in full (``fixed``). A sell worth less than
    its fee lowers the cash; in a cash account that can leave it below zero by at most the fees."""

    fee: Any = 1.0  # a number, or one per stock
    fixed = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "fee", _check_per_stock(self.fee, "FixedPerTrade fee"))

    def bind(self, close: torch.Tensor, volume: torch.Tensor | None) -> "FixedPerTrade":
        _check_length(self, "fee", close.shape[1])
        return self

    def trade_costs(self, shares: torch.Tensor, prices: torch.Tensor, day: torch.Tensor) -> torch.Tensor:
        return (shares > 0).to(prices.dtype) * _as_row(self.fee, prices)


@dataclasses.dataclass(frozen=True)
class HalfSpread(CostModel):
    """``spread / 2 * q * p``: every fill crosses half the quoted bid-ask ``spread``, a fraction of the
    price (``spread=1e-3`` is 10 bp, about right for US large caps; small caps pay 10x that)."""

    spread: Any = 1e-3  # a number, or one per stock (small caps 10x large caps)

    def __post_init__(self) -> None:
        object.__setattr__(self, "spread", _check_per_stock(self.spread, "HalfSpread spread", 2.0))

    @property
    def rate(self) -> float:
        """Half the spread; per stock, the widest (what a sizing rule budgets with never falls short)."""
        return _largest(self.spread) / 2

    def bind(self, close: torch.Tensor, volume: torch.Tensor | None) -> "HalfSpread":
        _check_length(self, "spread", close.shape[1])
        return self

    def trade_costs(self, shares: torch.Tensor, prices: torch.Tensor, day: torch.Tensor) -> torch.Tensor:
        return shares * prices * (_as_row(self.spread, prices) / 2)


@dataclasses.dataclass(frozen=True)
class SqrtImpact(CostModel):
    """Square-root market impact: ``eta * sigma * sqrt(q / ADV) * q * p`` (module doc).

    ``sigma``: standard deviation of the daily simple returns and ``ADV``: mean daily volume
    (shares), each over the ``window`` days ending on the decision day. The first days of the data,
    before two returns exist, use the first estimate (``sigma`` of days 1-2): the one place a cost
    reads two days ahead. ``ADV`` is at least 1 share. ``eta`` has no universal value: Almgren et
    al. (2005) fit 0.142 for US large caps (with exponent 3/5); the square-root-law literature puts
    it of order 1 for the total impact. Without a participation cap an order of many days' volume
    can cost more than it is worth: pair it with ``max_participation``.
    """

    eta: float = 0.142
    window: int = 20
    sigma: torch.Tensor | None = dataclasses.field(default=None, repr=False, compare=False)  # (T, S) once bound
    adv: torch.Tensor | None = dataclasses.field(default=None, repr=False, compare=False)  # (T, S) once bound
    needs_volume = True
    linear = False  # q^1.5: budgeting in proportion would leave cash unspent; the fill solves for f

    def __post_init__(self) -> None:
        object.__setattr__(self, "eta", _check_rate(self.eta, "SqrtImpact eta"))
        object.__setattr__(self, "window", check_int(self.window, "SqrtImpact window", low=2))

    def bind(self, close: torch.Tensor, volume: torch.Tensor | None) -> "SqrtImpact":
        super().bind(close, volume)
        prices = pd.DataFrame(close.double().cpu().numpy())
        sigma = prices.pct_change().rolling(self.window, min_periods=2).std().bfill().fillna(0.0)
        adv = pd.DataFrame(volume.double().cpu().numpy()).rolling(self.window, min_periods=1).mean().clip(lower=1.0)
        as_tensor = lambda x: torch.tensor(x.to_numpy(), dtype=close.dtype, device=close.device)  # noqa: E731
        return dataclasses.replace(self, sigma=as_tensor(sigma), adv=as_tensor(adv))

    def trade_costs(self, shares: torch.Tensor, prices: torch.Tensor, day: torch.Tensor) -> torch.Tensor:
        if self.sigma is None:
            raise RuntimeError("SqrtImpact is not bound to data: the env binds it (model.bind(close, volume))")
        sigma, adv = self.sigma.index_select(0, day), self.adv.index_select(0, day)
        return (shares / adv).sqrt_().mul_(sigma).mul_(shares * prices * self.eta)


# ---------------------------------------------------------------------------- holding costs
@dataclasses.dataclass(frozen=True)
class BorrowFee(CostModel):
    """``annual_rate / bars_per_year * sum_s max(-h_s, 0) * p_s`` each step: the stock-loan fee on
    the value shorted, charged on the positions after the step's trades at the fill prices
    (``annual_rate=0.005`` is 50 bp a year, general collateral; hard-to-borrow names pay 10x-100x)."""

    annual_rate: Any = 0.005  # a number, or one per stock (hard-to-borrow names)
    bars_per_year: int = 252
    on_trades = False
    on_holdings = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "annual_rate", _check_per_stock(self.annual_rate, "BorrowFee annual_rate"))
        object.__setattr__(self, "bars_per_year", check_int(self.bars_per_year, "BorrowFee bars_per_year", low=1))

    def bind(self, close: torch.Tensor, volume: torch.Tensor | None) -> "BorrowFee":
        _check_length(self, "annual_rate", close.shape[1])
        return self

    def holding_costs(self, holdings: torch.Tensor, prices: torch.Tensor) -> torch.Tensor:
        short = holdings.clamp(max=0.0).neg_()
        if isinstance(self.annual_rate, float):  # the scalar's arithmetic, bit for bit
            return torch.linalg.vecdot(short, prices) * (self.annual_rate / self.bars_per_year)
        return torch.linalg.vecdot(short, prices * (_as_row(self.annual_rate, prices) / self.bars_per_year))


def as_cost_model(costs: Any, name: str = "costs") -> CostModel:
    """``costs`` as a model: a ``CostModel`` as given, a number as ``Proportional(number)``."""
    if isinstance(costs, CostModel):
        return costs
    if isinstance(costs, (int, float, np.floating, np.integer)) and not isinstance(costs, (bool, np.bool_)):
        return Proportional(costs)
    raise ValueError(f"{name} must be a finance.costs model (Proportional, FixedPerTrade, HalfSpread, SqrtImpact, "
                    f"BorrowFee, or a sum of them) or a number (a proportional rate), got {costs!r}")


def split_trade_costs(model: CostModel, shares: torch.Tensor, prices: torch.Tensor,
                      day: torch.Tensor) -> tuple[torch.Tensor | float, torch.Tensor | float]:
    """(scaling, fixed): the (N,) trade costs of ``shares`` from the parts that shrink with an order
    and from those that do not (``fixed``); 0.0 where a model has no such part."""
    scaling: torch.Tensor | float = 0.0
    fixed: torch.Tensor | float = 0.0
    for m in model.parts:
        if m.on_trades:
            c = m.trade_costs(shares, prices, day).sum(1)
            if m.fixed:
                fixed = fixed + c
            else:
                scaling = scaling + c
    return scaling, fixed


def holding_costs(model: CostModel, holdings: torch.Tensor, prices: torch.Tensor) -> torch.Tensor | float:
    """(N,) holding costs of ``holdings`` at ``prices``; 0.0 when no part prices holdings."""
    parts = [m for m in model.parts if m.on_holdings]
    return sum(m.holding_costs(holdings, prices) for m in parts) if parts else 0.0
