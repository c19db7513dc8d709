"""Stock trading as a batched tensor env: ``num_envs`` brokerage accounts trading one price
history together, stepped in one call with no Python loop over accounts or stocks.

It follows FinRL's ``StockTradingEnv`` (cash, holdings, prices and indicators in the state;
actions in [-1, 1] scaled to at most ``max_trade_shares`` shares per stock; sells before buys;
proportional transaction costs; reward = change in account value; an optional turbulence switch)
and the podracer protocol (``podracer.envs.base``): torch tensors on ``device``, gymnasium
spaces, same-step autoreset with a dense ``info["final_obs"]``.

Timing: no look-ahead, by construction
--------------------------------------
Row t of ``close`` / ``features`` / ``turbulence`` is what is known at the close of day t. A
step taken on day t:

1. the policy sees ``obs(t)``: cash, holdings valued at ``close[t]``, ``close[t]``,
   ``features[t]`` (the turbulence switch reads ``turbulence[t]``);
2. the orders execute at the fill price of ``execution`` (below), sells first, then buys;
3. the env moves to day t+1 and marks the account at ``close[t+1]``;
   ``reward(t) = reward_scale * (value(t+1) - value(t)) / initial_cash``.

So ``obs(t)`` never depends on a row after t; ``reward(t)`` depends on row t+1 only through the
mark (and, with a next-bar fill, the fill). ``tests/test_stock_env.py`` checks this by perturbing
all data after a day.

Execution timing (``execution=``):

- ``"next_close"`` (the default after 1.1.0): fill at ``close[t+1]``; the account rides the old
  positions through day t+1. Causal on any data, close-only data included: nothing the policy
  saw at close t can be traded on before close t+1.
- ``"close"`` (FinRL's, the default up to 1.1.0; an explicit opt-in now): fill at ``close[t]``, the
  very price the policy just saw. **Optimistic**: nobody can trade at a close after seeing it, and
  a signal computed from that close gets the whole next day's move (the return close[t] ->
  close[t+1]). Building such an env warns (``OptimisticExecutionWarning``; Python's default filter
  shows it once per calling line), and a
  backtest under it says so (``BacktestResult.execution``, the plot's title).
- ``"next_open"``: fill at ``open[t+1]`` (pass ``open_prices``; ``MarketData.env`` does when the
  market has OHLCV data, ``source="sample_ohlcv"`` or yfinance): old positions from ``close[t]``
  to ``open[t+1]``, new ones from there to ``close[t+1]``.

Either way the change of value over a step is, with ``h`` the holdings before and ``h'`` after
the trades and ``fill`` the fill prices: ``h . (fill - close[t]) + h' . (close[t+1] - fill) -
costs``. Cash-limited buys are budgeted at the fill price.

Episodes
--------
An episode starts on day ``t0`` (0, or uniform in ``[0, T-1-episode_length]`` with
``random_start``) with all-cash ``initial_cash`` (or uniform in ``cash_range``) and runs
``episode_length`` steps, or to the last day when ``episode_length`` is None. The end is a
*truncation* (the account would go on; learners bootstrap with ``V(final_obs)``): ``terminated``
is always False (cash and holdings never go negative, so the account cannot go bust; a margin
account that does lose more than its equity is liquidated and stays bust, unable to trade, to the
end of its episode). ``reset(options={"cash": c, "holdings": h})`` starts that one reset's episodes from a given
account instead (a walk-forward carries one test window's account into the next,
``finance.walk_forward``); later autoresets start from cash again.

Observation (float32), ``1 + S + S + F*S`` values, names in ``env.obs_names``
-----------------------------------------------------------------------------
- ``cash / initial_cash``: 1.0 at the start of an evaluation episode. Money is measured in
  units of the nominal ``initial_cash`` everywhere (also with ``cash_range``), so the agent sees
  how rich it is.
- ``holdings * close[t] / initial_cash`` per stock: each position's value, same unit; the
  sum of these and the cash is the account value / initial_cash.
- ``log(close[t] / price_scale)`` per stock: ``price_scale`` is the first close in the data
  (known on every day, so causal) unless given; pass the training env's ``price_scale`` to an
  evaluation env so both see the same numbers for the same price.
- ``features[t]`` as given, feature-major (all stocks for feature 0, then feature 1, ...) as in
  FinRL. Scale them yourself, with ``finance.features.FeatureScaler`` fitted on the training
  window.

Actions and execution
---------------------
``shares = round(clip(a, -1, 1) * max_trade_shares)`` per stock: the nearest whole share (FinRL
truncates toward zero; rounding lets a policy ask for exactly ``n`` shares with
``a = n / max_trade_shares``, which float32 carries to well under half a share for
``max_trade_shares`` up to ~10**6). Negative sells, positive buys. Sells execute first and are capped
at the shares held (no short selling). Buys cost ``shares * price * (1 + cost_pct)``; if the
cash after sells cannot pay for all of them, every buy order of that account is scaled by the
same factor ``cash / cost`` (times ``1 - 64 eps`` so float rounding can never overdraw) and
rounded down to whole shares; the cash left over by the rounding stays cash (FinRL instead fills
buys largest-first until the cash runs out). Sells pay ``cost_pct`` of their value too, so
``costs = cost_pct * traded value`` exactly. Cash and holdings never go negative. The fill is
``finance.execution.execute_orders``, a pure function tested on its own.

Other market models (``finance.execution.execute``, the same rules in general form, used as soon as
one of these is set; ``docs/trading_realism.md``):

- ``costs=``: any ``finance.costs`` model or sum of them (fixed fee per trade, half-spread,
  square-root impact with ``volume``, borrow fee on shorts) instead of ``cost_pct``;
- ``max_participation=x``: at most ``floor(x * volume[t])`` shares per stock in a step, the volume of
  the decision day t, known when the order is placed, whatever the fill timing (the fill day's
  full volume is not known at the next open; needs ``volume``);
- ``margin=finance.Margin(...)``: a margin account. Short selling (sells beyond the holdings) and
  leverage: orders that add exposure are scaled down so that after the trade gross exposure
  ``|h| . p <= L * equity`` (``L = 1 / initial`` margin, or ``max_gross``); when the equity at a
  close is below ``maintenance * gross``, every position of the account is closed at its next fill
  (``info["margin_call"]``), whatever the action; with ``Margin(liquidation="restore")`` only the
  same fraction of every position that restores ``equity >= maintenance * gross`` at that fill.

- ``financing=finance.Financing(cash_rate=..., margin_rate=..., short_rebate=...)``: interest on
  the balances at each close, added to the cash at the next mark (``info["interest"]``).
- ``dividends=``: cash per share on each ex-date (``load_prices(..., dividends=True)["dividends"]``),
  with prices adjusted for splits only: the shares held overnight into an ex-date are paid
  ``shares * dividend`` in cash at that day's mark, a short position pays it (``info["dividends"]``).
  Refused on prices tagged total-return, which hold the dividends already.
- ``tick_size=``: fills on a price grid per stock: buys round up to the tick, sells down.

Turbulence switch (FinRL): with ``turbulence_threshold`` set, on a day with
``turbulence[t] >= turbulence_threshold`` every account sells all holdings (paying costs) and
all buys are blocked, whatever the action (a margin account closes its shorts too).

Returned tensors
----------------
``obs``, ``info["final_obs"]`` and the info tensors may share memory with each other and with
the env's state (on a step where no episode ends, ``obs`` *is* ``info["final_obs"]``; copying
them would cost a pass over the largest tensors). The env never writes into a tensor it has
returned; do not modify them in place either (``obs = obs - mean`` is fine, ``obs -= mean`` is
not).

Dtype
-----
Cash, holdings and prices are kept in ``dtype`` (float64 by default): integer share counts are
exact up to 2**53 and the accounting invariants (``cash + holdings . price == value``,
``costs == cost_pct * traded value``) hold to ~1e-15 relative. float32 halves memory traffic on a
GPU; then the invariants hold to ~1e-6 relative and share counts are exact up to 2**24.
Observations and rewards are float32. Actions may be any floating dtype; float16 and bfloat16 ones
are cast to float32 before they are scaled to shares (in float16, ``a * max_trade_shares``
overflows above 65504).
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
import torch

from finance.costs import CostModel, Proportional, as_cost_model
from finance.data.checks import ADJUSTMENT, _show_date, check_dates, check_int, check_number, check_prices
from finance.execution import (Financing, Margin, execute, execute_orders, margin_call, restoring_fraction,
                               round_to_tick)
from podracer.deprecation import deprecated_alias
from podracer.envs import TensorVecEnv

ArrayLike = pd.DataFrame | pd.Series | np.ndarray | torch.Tensor
EXECUTIONS = ("close", "next_close", "next_open")  # fill at the observed close, the next close, the next open
"""The values of ``execution=``: when an order fills (docs/trading_realism.md)."""
DEFAULT_EXECUTION = "next_close"  # causal on close-only data too; "close" is an explicit, optimistic opt-in
"""The ``execution=`` of the envs, ``backtest`` and ``walk_forward`` when none is given."""


class OptimisticExecutionWarning(UserWarning):
    """``execution="close"``: fills at the close the policy just observed, a price nobody can
    trade at after seeing it; results are optimistic (``docs/trading_realism.md``)."""


def warn_optimistic(where: str, stacklevel: int = 4) -> None:
    """Warn that ``where`` fills at the observed close (Python's default filter: once per calling line)."""
    warnings.warn(f"{where}(execution='close') fills each order at the close the policy just observed: an optimistic "
                  "fill nobody can get (a signal from that close earns the next day's whole move). Results are an "
                  "upper bound; the default, execution='next_close', fills at the next close",
                  OptimisticExecutionWarning, stacklevel=stacklevel)
MAX_TRADE_SHARES = 2**53  # share counts are exact in float64 up to here
_HALF = (torch.float16, torch.bfloat16)


def _to_numpy(x: Any) -> np.ndarray:
    """A float64 numpy copy of an array or tensor (writable, so torch can wrap it)."""
    return np.array(x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x, dtype=np.float64)


# ---------------------------------------------------------------------------- input checks
def _close_array(close: ArrayLike) -> tuple[np.ndarray, pd.Index, list[str]]:
    """``close`` as a (T, S) float64 array, its dates and tickers; raise on unsorted dates, NaN,
    inf or non-positive prices."""
    if isinstance(close, pd.DataFrame):
        if isinstance(close.columns, pd.MultiIndex):
            raise ValueError(
                "close must be a dates x tickers frame of closing prices, got MultiIndex columns "
                f"{list(close.columns.names)}; pass prices['close'] from finance.data.load_prices"
            )
        dates, tickers = close.index, [str(c) for c in close.columns]
        check_dates(dates, "close")
        values = close.to_numpy(dtype=np.float64, na_value=np.nan, copy=True)
    else:
        values = _to_numpy(close)
        if values.ndim != 2:
            raise ValueError(f"close must have shape (days, stocks), got {values.shape}")
        dates, tickers = pd.RangeIndex(values.shape[0], name="day"), [f"stock_{i}" for i in range(values.shape[1])]
    if values.shape[1] == 0:
        raise ValueError("close has no stock columns")
    check_prices(values, dates, tickers, "close")
    return values, dates, tickers


def _features_array(features: ArrayLike, dates: pd.Index, tickers: list[str],
                    close_is_frame: bool) -> tuple[np.ndarray, list[str]]:
    """``features`` as a (T, S, F) float32 array and the feature names."""
    T, S = len(dates), len(tickers)
    if isinstance(features, pd.DataFrame):
        cols = features.columns
        if not isinstance(cols, pd.MultiIndex) or cols.nlevels != 2:
            raise ValueError(
                "features must have MultiIndex columns (feature, ticker), as finance.features.add_features "
                f"returns, got columns {list(cols[:4])}..."
            )
        check_dates(features.index, "features")
        if close_is_frame and not features.index.equals(dates):
            raise ValueError(
                f"features index ({len(features.index)} rows, {features.index[0]} .. {features.index[-1]}) "
                f"differs from close index ({T} rows, {dates[0]} .. {dates[-1]}); align them, e.g. "
                "features = features.loc[close.index] or close = close.loc[features.index]"
            )
        if len(features.index) != T:
            raise ValueError(f"features has {len(features.index)} rows, close has {T}")
        names = list(dict.fromkeys(str(f) for f in cols.get_level_values(0)))
        have = set(map(str, cols.get_level_values(1)))
        missing = [t for t in tickers if t not in have]
        if missing:
            raise ValueError(f"features lack tickers {missing[:8]} that close has; compute features on the same "
                             "tickers")
        frame = features.copy()
        frame.columns = pd.MultiIndex.from_arrays([cols.get_level_values(0).map(str),
                                                   cols.get_level_values(1).map(str)])
        frame = frame.reindex(columns=pd.MultiIndex.from_product([names, tickers]))
        values = frame.to_numpy(dtype=np.float64, na_value=np.nan, copy=True)
        values = values.reshape(T, len(names), S).transpose(0, 2, 1)
    else:
        values = _to_numpy(features)
        if values.ndim != 3 or values.shape[:2] != (T, S):
            raise ValueError(f"features must have shape (days, stocks, features) = ({T}, {S}, F), got {values.shape}")
        names = [f"feature_{i}" for i in range(values.shape[2])]
    bad = ~np.isfinite(values)
    if bad.any():
        t, s, f = np.argwhere(bad)[0]
        raise ValueError(
            f"features have {int(bad.sum())} NaN/inf values (first at {dates[t]!s}, {tickers[s]}, {names[f]}); "
            "rolling-window features are undefined during their warm-up: drop those rows from both "
            "close and features (features.dropna()), or fill them"
        )
    return values.astype(np.float32), names


def _panel_array(x: ArrayLike, name: str, dates: pd.Index, tickers: list[str], close_is_frame: bool,
                 positive: bool) -> np.ndarray:
    """``open_prices`` or ``volume`` as a (T, S) float64 array on the dates and tickers of ``close``."""
    if isinstance(x, pd.DataFrame):
        check_dates(x.index, name)
        if close_is_frame and not x.index.equals(dates):
            raise ValueError(f"{name} index differs from close index; align it, e.g. {name}.loc[close.index]")
        missing = [t for t in tickers if t not in set(map(str, x.columns))]
        if close_is_frame and missing:
            raise ValueError(f"{name} lacks tickers {missing[:8]} that close has; pass prices[...] of the same tickers")
        if close_is_frame:
            x = x.set_axis(x.columns.map(str), axis=1)[tickers]
        values = x.to_numpy(dtype=np.float64, na_value=np.nan, copy=True)
    else:
        values = _to_numpy(x)
    if values.shape != (len(dates), len(tickers)):
        raise ValueError(f"{name} must have shape (days, stocks) = ({len(dates)}, {len(tickers)}), got {values.shape}")
    if positive:
        check_prices(values, dates, tickers, name)
    elif not (np.isfinite(values).all() and (values >= 0).all()):
        t, s = np.argwhere(~(np.isfinite(values) & (values >= 0)))[0]
        what = "cash per share on each ex-date" if name == "dividends" else "shares traded per day"
        raise ValueError(f"{name} must be finite and >= 0 ({what}), got {values[t, s]} at "
                         f"{_show_date(dates[t])}, {tickers[s]}; fill gaps ({name}.fillna(0))")
    return values


def _turbulence_array(turbulence: ArrayLike, dates: pd.Index, close_is_frame: bool) -> np.ndarray:
    if isinstance(turbulence, pd.Series):
        check_dates(turbulence.index, "turbulence")
        if close_is_frame and not turbulence.index.equals(dates):
            raise ValueError("turbulence index differs from close index; align it with turbulence.loc[close.index]")
        values = turbulence.to_numpy(dtype=np.float64, na_value=np.nan, copy=True)
    else:
        values = _to_numpy(turbulence)
    if values.shape != (len(dates),):
        raise ValueError(f"turbulence must have shape (days,) = ({len(dates)},), got {values.shape}")
    if not np.isfinite(values).all():
        raise ValueError("turbulence has NaN/inf values (its look-back warm-up?); fill them, e.g. turbulence.fillna(0)")
    return values


def _price_scale_array(price_scale: ArrayLike | None, close_np: np.ndarray) -> np.ndarray:
    """The (S,) reference prices of the log-price observation: ``price_scale``, checked, or the first close."""
    if price_scale is None:
        return close_np[0]
    S = close_np.shape[1]
    scale_np = _to_numpy(price_scale)
    if scale_np.shape != (S,) or not (np.isfinite(scale_np).all() and (scale_np > 0).all()):
        got = scale_np if scale_np.size <= 8 else f"shape {scale_np.shape}"
        raise ValueError(f"price_scale must be {S} finite prices > 0 (one per stock; default: the first "
                         f"close), got {got}")
    return scale_np


def _per_stock(value: Any, name: str, num_stocks: int, whole: bool, low: float) -> np.ndarray | None:
    """None, or a (S,) float64 array from a number (every stock) or one value per stock, checked."""
    if value is None:
        return None
    arr = np.asarray(_to_numpy(value) if isinstance(value, (torch.Tensor, pd.Series)) else value, dtype=object)
    if arr.ndim > 1 or (arr.ndim == 1 and len(arr) != num_stocks):
        raise ValueError(f"{name} must be a number or one value per stock ({num_stocks}, in the data's ticker order), "
                         f"got {arr.shape[0] if arr.ndim == 1 else arr.shape} values")
    flat = np.broadcast_to(arr, (num_stocks,))
    out = np.empty(num_stocks)
    for i, v in enumerate(flat):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)) \
                or not np.isfinite(v) or v < low or (whole and float(v) != int(v)):
            kind = f"a whole number >= {low:g}" if whole else f"a finite number >= {low:g}"
            raise ValueError(f"{name} must be {kind} for every stock, got {v!r}" + (
                " (a lot of 0 shares can never trade; 1 is whole shares)" if whole and v == 0 else ""))
        out[i] = float(v)
    return out


def _check_flag(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


# ---------------------------------------------------------------------------- the env
class StockTradingVecEnv(TensorVecEnv):
    """``num_envs`` trading accounts over one history of daily closes (see module doc): long-only
    cash accounts, or margin accounts with ``margin``.

    Args:
        close: daily closes, a dates x tickers DataFrame (``prices["close"]``) or a (T, S)
            array/tensor. Dates strictly increasing (oldest first); prices finite and > 0.
        features: per-stock indicators known at each close: a DataFrame with MultiIndex columns
            (feature, ticker) on the same dates, or a (T, S, F) array/tensor. Used as given.
        turbulence: a (T,) Series/array for the turbulence switch (``finance.features.turbulence``).
        num_envs: accounts stepped together.
        device: torch device of every tensor.
        initial_cash: starting cash, and the money unit of observations and rewards.
        max_trade_shares: whole shares traded per stock for an action of +-1 (FinRL's ``hmax``),
            in [1, 2**53].
        cost_pct: transaction cost as a fraction of traded value, on buys and sells; default 1e-3
            (``finance.costs.Proportional``). Give it or ``costs``, not both.
        episode_length: steps per episode; None runs to the last day.
        random_start: start each episode on a uniform random day (training diversity); needs
            ``episode_length``. Off: every episode starts on the first day (evaluation).
        cash_range: (low, high) to draw each episode's starting cash uniformly; None: ``initial_cash``.
        turbulence_threshold: liquidate and block buys on days with turbulence >= this (> 0); None: off.
        reward_scale: reward = reward_scale * change in account value / initial_cash; the
            default 100 makes it the day's P&L in percent of the initial cash (about +-1).
        seed: seeds ``self.rng`` (start days and cash draws); ``reset(seed)`` reseeds it.
        price_scale: (S,) reference prices for the log-price observation; default the first close.
        dtype: accounting dtype (float64 default; see module doc).
        validate_actions: check each action batch (shape, dtype, device, finite) with a clear error.
        open_prices: daily opens like ``close`` (``prices["open"]``): needed by ``"next_open"``.
        volume: daily volume in shares like ``close`` (``prices["volume"]``): needed by
            ``max_participation`` and ``finance.costs.SqrtImpact``.
        execution: ``"next_close"`` (default: causal on any data), ``"next_open"`` (needs
            ``open_prices``) or ``"close"`` (optimistic, warns: fills at the close the policy just
            saw; the default up to 1.1.0) (module doc).
        costs: a ``finance.costs`` model (or a sum of them) instead of ``cost_pct``.
        max_participation: at most this fraction of the decision day's volume (known at its close,
            whatever the fill timing) traded per stock and step, in (0, 1]; None: no cap.
        margin: ``finance.Margin`` rules for a margin account (shorts, leverage, margin calls);
            None: a long-only cash account.
        financing: ``finance.Financing``: interest on cash, on a margin loan, a rebate on short
            proceeds; None: 0% on everything. Backtests take their metrics' risk-free rate from it.
        lot_size: shares per lot, a whole number or one per stock: orders round to whole lots and
            fills (cash-limited, capped) stay in whole lots. None: single shares.
        universe: a point-in-time membership table (``ticker``, ``start``, ``end``; a DataFrame or a
            csv/parquet path, ``finance.universe``): a name trades only on fill days inside its
            spells, and its position is closed at a spell's last fill. None: every name, every day.
        max_position: the most shares held per stock, long or short, a number or one per stock
            (in whole lots with ``lot_size``); orders beyond it are cut. None: no limit (a gross
            limit relative to equity is ``finance.Margin(max_gross=...)``).
        dividends: cash dividends per share on each ex-date, like ``close`` (0 on other days;
            ``load_prices(..., dividends=True)["dividends"]``), with closes adjusted for splits
            only. Holdings carried into an ex-date receive (short: pay) ``shares * dividend`` at
            its mark. A close frame tagged ``attrs["adjustment"] == "total_return"`` (yfinance's
            default, the samples) is refused: its prices hold the dividends already. None: none.
        tick_size: the price grid, a number or one per stock (> 0): buys fill at the fill price
            rounded up to a tick, sells rounded down (the side that costs the trader). None: any price.

    Sizes (``num_envs``, ``max_trade_shares``, ``episode_length``, ``seed``) take any integer type
    (``np.int64`` too), never a float or a bool; amounts must be finite. A bad value is a
    ``ValueError`` that names it.

    Data attributes (read-only by convention): ``close_prices`` (T, S) in ``dtype``,
    ``features`` (T, S, F) float32, ``turbulence`` (T,) or None, ``obs_table`` (T, obs_dim),
    ``dates``, ``tickers``, ``feature_names``, ``obs_names``, ``price_scale`` (S,),
    ``open_prices`` and ``volume`` (T, S) or None, ``costs`` (the bound cost model; ``cost_pct`` is
    its ``rate``), ``execution``, ``max_participation``, ``margin``; per account
    ``cash`` (N,), ``holdings`` (N, S), ``value`` (N,), ``day`` (N,), ``prices`` (N, S) today's
    close. ``close()`` is the protocol's (nothing to release); ``close_frame()`` gives the closes
    as a DataFrame.
    """

    task = "stock_trading"  # make_agent("ppo", env) picks the "stock_trading" preset (finance/presets.py)

    def __init__(self, close: ArrayLike, features: ArrayLike | None = None, turbulence: ArrayLike | None = None,
                 num_envs: int = 1, device: str | torch.device = "cpu", initial_cash: float = 1e6,
                 max_trade_shares: int = 100, cost_pct: float | None = None, episode_length: int | None = None,
                 random_start: bool = False, cash_range: tuple[float, float] | None = None,
                 turbulence_threshold: float | None = None, reward_scale: float = 100.0, seed: int | None = None,
                 price_scale: ArrayLike | None = None, dtype: torch.dtype = torch.float64,
                 validate_actions: bool = True, *, open_prices: ArrayLike | None = None,
                 volume: ArrayLike | None = None, execution: str = "next_close", costs: CostModel | None = None,
                 max_participation: float | None = None, margin: Margin | None = None,
                 financing: Financing | None = None, lot_size: Any = None, max_position: Any = None,
                 universe: Any = None, dividends: ArrayLike | None = None, tick_size: Any = None):
        num_envs = check_int(num_envs, "num_envs", low=1)  # np.int64 too; the base class wants an int
        super().__init__(num_envs, device, _check_flag(validate_actions, "validate_actions"))
        close_is_frame = isinstance(close, pd.DataFrame)
        close_np, self.dates, self.tickers = _close_array(close)
        T, S = close_np.shape
        if T < 2:
            raise ValueError(f"close has {T} day(s); an episode needs at least 2 (trade on one, mark on the next)")
        self.num_days, self.num_stocks = T, S
        self._set_episode_rules(episode_length, random_start, initial_cash, cash_range)
        self._set_trading_rules(max_trade_shares, cost_pct, turbulence_threshold, turbulence is not None,
                                reward_scale, dtype)
        self._set_market_model(execution, costs, cost_pct is not None, max_participation, margin,
                               open_prices is not None, volume is not None)
        self._set_data(close_np, features, turbulence, price_scale, close_is_frame)
        self._set_market_data(open_prices, volume, close_is_frame)
        self._set_financing(financing)
        self._set_position_rules(lot_size, max_position)
        self._set_universe(universe)
        self._set_dividends(dividends, close, close_is_frame)
        self._set_ticks(tick_size)
        self._set_starts(seed)
        self.reset()

    def _set_episode_rules(self, episode_length: Any, random_start: Any, initial_cash: Any, cash_range: Any) -> None:
        """Check and store how episodes run: their length, start day and starting cash."""
        T = self.num_days
        if episode_length is not None:
            try:
                episode_length = check_int(episode_length, "episode_length", low=1, high=T - 1)
            except ValueError as exc:
                raise ValueError(f"{exc}: {T} days of data allow at most {T - 1} steps (each step trades on one "
                                 "day and marks on the next); pass more days or a shorter episode_length") from None
        random_start = _check_flag(random_start, "random_start")
        if random_start and episode_length is None:
            raise ValueError("random_start=True needs episode_length (steps per episode), e.g. episode_length=252")
        initial_cash = check_number(initial_cash, "initial_cash")
        if initial_cash <= 0:
            raise ValueError(f"initial_cash must be > 0, got {initial_cash}")
        if cash_range is not None:
            if not isinstance(cash_range, (tuple, list, np.ndarray)) or len(cash_range) != 2:
                raise ValueError(f"cash_range must be a (low, high) pair, got {cash_range!r}")
            cash_range = (check_number(cash_range[0], "cash_range low"), check_number(cash_range[1], "cash_range high"))
            if not 0 < cash_range[0] <= cash_range[1]:
                raise ValueError(f"cash_range must be (low, high) with 0 < low <= high, got {cash_range}")
        self.episode_length, self.random_start = episode_length, random_start
        self.initial_cash, self.cash_range = initial_cash, cash_range
        self._max_steps = episode_length if episode_length is not None else T - 1

    def _set_trading_rules(self, max_trade_shares: Any, cost_pct: Any, turbulence_threshold: Any,
                           has_turbulence: bool, reward_scale: Any, dtype: torch.dtype) -> None:
        """Check and store the trading rules: sizes, costs, the turbulence switch, reward scale, dtype."""
        cost_pct = check_number(cost_pct, "cost_pct") if cost_pct is not None else 1e-3
        if not 0 <= cost_pct < 1:
            raise ValueError(f"cost_pct must be in [0, 1), got {cost_pct}")
        # Whole shares: an action of +-1 must be able to trade at least one (0.5 rounds every order to 0).
        max_trade_shares = check_int(max_trade_shares, "max_trade_shares", low=1)
        if max_trade_shares > MAX_TRADE_SHARES:  # 10**40 would overflow the float conversion in step
            raise ValueError(f"max_trade_shares must be at most 2**53 = {MAX_TRADE_SHARES} (share counts are exact "
                             f"in float64 only up to there), got {max_trade_shares:.3g}")
        if turbulence_threshold is not None:
            if not has_turbulence:
                raise ValueError("turbulence_threshold needs a turbulence series: pass "
                                 "turbulence=finance.features.turbulence(close)")
            turbulence_threshold = check_number(turbulence_threshold, "turbulence_threshold")
            if turbulence_threshold <= 0:  # turbulence is >= 0: the switch would fire every day
                raise ValueError(f"turbulence_threshold must be > 0 (turbulence is >= 0, so {turbulence_threshold} "
                                 "would liquidate every day); use None to turn the switch off")
        reward_scale = check_number(reward_scale, "reward_scale")
        if reward_scale <= 0:
            raise ValueError(f"reward_scale must be > 0, got {reward_scale}")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float64 or torch.float32, got {dtype}")

        self.max_trade_shares, self.cost_pct = max_trade_shares, cost_pct
        self.turbulence_threshold, self.reward_scale, self.dtype = turbulence_threshold, reward_scale, dtype
        self._tiny = torch.finfo(dtype).tiny  # guards the turnover's division

    def _set_market_model(self, execution: Any, costs: Any, cost_pct_given: bool, max_participation: Any,
                          margin: Any, has_opens: bool, has_volume: bool) -> None:
        """Check and store how orders fill: timing, cost model, participation cap, margin rules."""
        if execution not in EXECUTIONS:
            raise ValueError(f"execution must be one of {EXECUTIONS}, got {execution!r}")
        if execution == "next_open" and not has_opens:
            raise ValueError("execution='next_open' fills at the next bar's open, and no open_prices were given: pass "
                             "open_prices=prices['open'] (OHLCV data: finance.load_prices(..., source='sample_ohlcv') "
                             "or source='yfinance'; MarketData.env passes them when the market has them), or use "
                             "execution='next_close'")
        if execution == "close":
            warn_optimistic("StockTradingVecEnv")
        if costs is None:
            costs = Proportional(self.cost_pct)
        elif cost_pct_given:
            raise ValueError("give cost_pct or costs, not both: cost_pct=c is costs=finance.Proportional(c); add "
                             "models for more, e.g. costs=finance.Proportional(c) + finance.HalfSpread(s)")
        costs = as_cost_model(costs)
        if costs.needs_volume and not has_volume:
            raise ValueError(f"costs {costs!r} need daily volume: pass volume=prices['volume'] (OHLCV data: "
                             "source='sample_ohlcv' or 'yfinance'; MarketData.env passes it when the market has it)")
        if max_participation is not None:
            max_participation = check_number(max_participation, "max_participation")
            if not 0 < max_participation <= 1:
                raise ValueError(f"max_participation must be in (0, 1] (a fraction of the day's volume), got "
                                 f"{max_participation}; None: no cap")
            if not has_volume:
                raise ValueError("max_participation caps trades at a fraction of the day's volume: pass "
                                 "volume=prices['volume']")
        if margin is not None and not isinstance(margin, Margin):
            raise ValueError(f"margin must be a finance.Margin (e.g. finance.Margin(initial=0.5, maintenance=0.25)) "
                             f"or None for a cash account, got {margin!r}")
        self.execution, self.max_participation, self.margin = execution, max_participation, margin
        self.costs, self.cost_pct = costs, costs.rate  # bound to the data in _set_market_data
        # The original market model runs execute_orders, the long-only proportional fill (fast, bit-exact).
        self._fast = isinstance(costs, Proportional) and max_participation is None and margin is None

    @property
    def plain_market(self) -> bool:
        """True for the original market model: fills at the observed close, proportional costs, a
        cash account, no cap; ``finance.backtest.buy_and_hold`` reproduces it in closed form."""
        return self._fast and self.execution == "close" and self.financing is None and self.dividends is None

    def _set_data(self, close_np: np.ndarray, features: ArrayLike | None, turbulence: ArrayLike | None,
                  price_scale: ArrayLike | None, close_is_frame: bool) -> None:
        """The per-day tensors (closes, features, turbulence), then the observations built on them."""
        T, S, dev = self.num_days, self.num_stocks, self.device
        self.close_prices = torch.as_tensor(close_np, dtype=self.dtype, device=dev)  # (T, S)
        if features is not None:
            feat_np, self.feature_names = _features_array(features, self.dates, self.tickers, close_is_frame)
        else:
            feat_np, self.feature_names = np.zeros((T, S, 0), np.float32), []
        self.features = torch.as_tensor(feat_np, device=dev)  # (T, S, F) float32
        self.turbulence = None  # (T,) or None
        if turbulence is not None:
            turb_np = _turbulence_array(turbulence, self.dates, close_is_frame)
            self.turbulence = torch.as_tensor(turb_np, dtype=self.dtype, device=dev)
        self._set_observations(close_np, feat_np, _price_scale_array(price_scale, close_np))

    def _set_market_data(self, open_prices: ArrayLike | None, volume: ArrayLike | None, close_is_frame: bool) -> None:
        """Opens, volume, the fill price (and volume) of each decision day, and the bound cost model."""
        def panel(x: ArrayLike | None, name: str, positive: bool) -> torch.Tensor | None:
            if x is None:
                return None
            values = _panel_array(x, name, self.dates, self.tickers, close_is_frame, positive)
            return torch.as_tensor(values, dtype=self.dtype, device=self.device)

        self.open_prices, self.volume = panel(open_prices, "open_prices", True), panel(volume, "volume", False)
        # Row t: the fill price of an order decided on day t, (T, S).
        if self.execution == "close":
            self._fill_prices = self.close_prices
        else:  # the next bar's; the last row never trades
            fill = self.open_prices if self.execution == "next_open" else self.close_prices
            self._fill_prices = torch.cat([fill[1:], fill[-1:]])
        # The participation cap reads the decision day's volume, the last one known when the order is
        # placed: the fill day's is not known at its open, and high-volume days move more (issue 34).
        self._cap_volume = self.volume
        self.costs = self.costs.bind(self.close_prices, self.volume)

    def _set_financing(self, financing: Any) -> None:
        """Check and store the interest rules; per-bar cash rates on the env's dates."""
        if financing is not None and not isinstance(financing, Financing):
            raise ValueError(f"financing must be a finance.Financing (e.g. finance.Financing(cash_rate=0.04)) or None "
                             f"for no interest, got {financing!r}")
        if financing is not None and financing.is_zero:
            financing = None  # 0% on everything: the books of no financing, bit for bit
        self.financing = financing
        if financing is not None:
            if (financing.margin_rate or financing.short_rebate) and self.margin is None:
                raise ValueError("Financing margin_rate and short_rebate apply to a margin account (negative cash, "
                                 "short positions): pass margin=finance.Margin(...), or leave them at 0")
            cash_rate, self._margin_rate, self._rebate = financing.per_bar(self.dates)
            self._cash_rate = torch.as_tensor(cash_rate, dtype=self.dtype, device=self.device)  # (T,)

    def _set_position_rules(self, lot_size: Any, max_position: Any) -> None:
        """Per-stock lot sizes (orders and fills in whole lots) and position limits (|shares| held)."""
        S = self.num_stocks
        self.lot_size = _per_stock(lot_size, "lot_size", S, whole=True, low=1)
        self.max_position = _per_stock(max_position, "max_position", S, whole=False, low=0)
        if self.lot_size is not None or self.max_position is not None:
            self._fast = False  # the general fill rounds to lots
        as_row = lambda x: None if x is None else torch.as_tensor(x, dtype=self.dtype, device=self.device)  # noqa: E731
        self._lot, self._limit = as_row(self.lot_size), as_row(self.max_position)
        if self._lot is not None and self._limit is not None:
            self._limit = (self._limit / self._lot).floor() * self._lot  # a limit in whole lots

    def _set_universe(self, universe: Any) -> None:
        """The point-in-time universe: per decision day, the names whose fill day is in a spell of
        membership (tradable) and those whose spell ends at that fill (closed there)."""
        self.universe, self._tradable, self._leaving = universe, None, None
        if universe is None:
            return
        from finance.universe import membership_mask

        member = torch.as_tensor(membership_mask(universe, self.dates, self.tickers), device=self.device)
        if self.execution != "close":  # decision day t fills on day t+1 (the last day decides nothing)
            member = torch.cat([member[1:], member[-1:]])
        after = torch.cat([member[1:], member[-1:]])  # the next decision's fill; the data's end is no exit
        self._tradable, self._leaving = member, member & ~after
        self._fast = False  # orders are masked per name; the general fill takes them

    def _set_dividends(self, dividends: ArrayLike | None, close: Any, close_is_frame: bool) -> None:
        """Cash dividends per share by ex-date, (T, S), or None (none, or all zero: the books of no dividends)."""
        self.dividends = None
        if dividends is None:
            return
        if close_is_frame and close.attrs.get(ADJUSTMENT) == "total_return":
            raise ValueError("dividends as cash on total-return prices would count each dividend twice: these closes "
                             "are back-adjusted for dividends (attrs['adjustment'] == 'total_return'). Load split-only "
                             "prices with their dividends, prices = finance.load_prices(..., dividends=True), and pass "
                             "close=prices['close'], dividends=prices['dividends']; or drop dividends=")
        values = _panel_array(dividends, "dividends", self.dates, self.tickers, close_is_frame, positive=False)
        if values.any():
            self.dividends = torch.as_tensor(values, dtype=self.dtype, device=self.device)

    def _set_ticks(self, tick_size: Any) -> None:
        """The tick grid: per decision day the fill price of a buy (rounded up) and of a sell (down), (T, S)."""
        self.tick_size = _per_stock(tick_size, "tick_size", self.num_stocks, whole=False, low=0)
        self._fill_up = self._fill_down = None
        if self.tick_size is None:
            return
        if not (self.tick_size > 0).all():
            raise ValueError(f"tick_size must be > 0 for every stock (0.01 for a cent), got {self.tick_size.tolist()}; "
                             "None: no price grid")
        tick = torch.as_tensor(self.tick_size, dtype=self.dtype, device=self.device)
        prices = self.open_prices if self.execution == "next_open" else self.close_prices
        up, down = round_to_tick(prices, tick)
        low = (down <= 0).nonzero()
        if len(low):
            t, s = low[0].tolist()
            raise ValueError(f"tick_size {self.tick_size[s]:g} of {self.tickers[s]} is above its price "
                             f"{float(prices[t, s]):g} on {_show_date(self.dates[t])}: a sell would fill at 0; use a "
                             "smaller tick (prices back-adjusted far into the past can fall below a cent)")
        if self.execution != "close":  # row t: the next bar's, as the fill prices
            up, down = torch.cat([up[1:], up[-1:]]), torch.cat([down[1:], down[-1:]])
        self._fill_up, self._fill_down = up, down
        self._fast = False  # the general fill takes per-side prices

    def _in_universe(self, orders: torch.Tensor) -> torch.Tensor:
        """No order in a name outside its membership on the fill day; a spell's last fill closes the position."""
        if self._tradable is None:
            return orders
        orders = torch.where(self._tradable.index_select(0, self.day), orders, 0.0)
        return torch.where(self._leaving.index_select(0, self.day), -self.holdings, orders)

    def _set_observations(self, close_np: np.ndarray, feat_np: np.ndarray, scale_np: np.ndarray) -> None:
        """``price_scale``, the per-day observation table, ``obs_names`` and the spaces."""
        T, S, dev = self.num_days, self.num_stocks, self.device
        self.price_scale = torch.as_tensor(scale_np, dtype=torch.float64, device=dev)  # (S,)
        # Every observation is one row gather from this per-day table, whose first 1+S columns
        # (cash, position values) are placeholders the step overwrites: one pass over the obs.
        log_price = np.log(close_np / scale_np).astype(np.float32)  # (T, S)
        feat_major = feat_np.transpose(0, 2, 1).reshape(T, -1)  # (T, F*S), feature-major as FinRL
        self.obs_table = torch.as_tensor(np.concatenate([np.zeros((T, 1 + S), np.float32), log_price, feat_major],
                                                        axis=1), device=dev)  # (T, obs_dim)

        self.obs_names = (["cash"] + [f"position_value/{t}" for t in self.tickers]
                          + [f"log_price/{t}" for t in self.tickers]
                          + [f"{f}/{t}" for f in self.feature_names for t in self.tickers])
        obs_dim = len(self.obs_names)
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(obs_dim,), dtype=np.float32)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, shape=(S,), dtype=np.float32)

    # -- episode starts
    def _set_starts(self, seed: Any) -> None:
        """What ``_draw_starts`` draws from, and its generator."""
        N, dev = self.num_envs, self.device
        self._zero_start = torch.zeros(N, dtype=torch.long, device=dev)
        self._cash0 = torch.full((N,), self.initial_cash, dtype=self.dtype, device=dev)
        self._max_start = self.num_days - 1 - self._max_steps  # start days in [0, _max_start]
        self._seed(None if seed is None else check_int(seed, "seed"))

    def _draw_starts(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(start day, starting cash) for every account, each (N,)."""
        start = (torch.randint(0, self._max_start + 1, (self.num_envs,), generator=self.rng, device=self.device)
                 if self.random_start else self._zero_start)
        if self.cash_range is None:
            cash = self._cash0
        else:
            lo, hi = self.cash_range
            u = torch.rand(self.num_envs, generator=self.rng, device=self.device, dtype=self.dtype)
            cash = lo + (hi - lo) * u
        return start, cash

    def _observe(self, cash: torch.Tensor, position_value: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """(N, obs_dim) float32 observation on day ``t`` (layout in the module doc), from the
        cash (N,) and the holdings valued at day t's close (N, S)."""
        obs = self.obs_table.index_select(0, t)
        obs[:, 0] = cash / self.initial_cash
        obs[:, 1:1 + self.num_stocks] = position_value / self.initial_cash
        return obs

    # -- protocol
    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        """Start a new episode in every account. Returns obs (N, obs_dim) and info with
        ``account_value``, ``cash`` (N,), ``holdings`` (N, S) and ``day`` (N,) row indices, and
        ``account``: the accounts the next action trades, exactly (``obs`` shows them in float32,
        in units of ``initial_cash``): ``cash`` (N,), ``holdings`` (N, S), ``prices`` (N, S)
        today's close (the execution price) and ``first_bar`` (N,) bool, True where that action
        is the first of an episode. ``step``'s info has it too, after any autoreset, so a policy
        that needs exact money (``finance.backtest.BuyAndHoldPolicy``) reads it there, not the
        env's state.

        ``options={"cash": c, "holdings": h}`` (either key) starts from that account instead of
        all cash: ``c`` a number or (N,), ``h`` shares per stock, (S,) or (N, S), all >= 0 (a
        margin account may start with cash < 0, and with short positions if it allows shorts)."""
        self._seed(None if seed is None else check_int(seed, "seed"))
        start, cash = self._draw_starts()
        holdings = torch.zeros(self.num_envs, self.num_stocks, dtype=self.dtype, device=self.device)
        if options:
            cash, holdings = self._given_account(options, cash)
        self.day = start.clone()  # (N,) row of the data each account is on
        self.elapsed = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)  # (N,) steps this episode
        self.prices = self.close_prices.index_select(0, self.day)  # (N, S) close of each account's current day
        self.cash = cash.clone()  # (N,)
        self.holdings = holdings  # (N, S)
        position_value = holdings * self.prices
        self.value = cash + position_value.sum(1)  # (N,) account value at the current day's close
        self.total_costs = torch.zeros(self.num_envs, dtype=self.dtype, device=self.device)  # (N,) this episode
        obs = self._observe(self.cash, position_value, self.day)
        info = {"account_value": self.value.clone(), "cash": self.cash.clone(), "holdings": self.holdings.clone(),
                "day": self.day.clone()}
        info["account"] = self._account(first_bar=torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        return obs, info

    def _given_account(self, options: dict, drawn_cash: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(cash (N,), holdings (N, S)) from ``reset``'s options, checked; cash defaults to the drawn one."""
        unknown = sorted(set(options) - {"cash", "holdings"})
        if unknown:
            raise ValueError(f"unknown reset options {unknown}; StockTradingVecEnv.reset takes "
                             "options={'cash': number or (N,), 'holdings': (S,) or (N, S) shares}")
        N, S = self.num_envs, self.num_stocks
        m = self.margin
        out = []
        for key, default, shape, signed in (("cash", drawn_cash, (N,), m is not None),
                                            ("holdings", torch.zeros(S), (N, S), m is not None and m.shorts)):
            given = options.get(key)
            x = torch.as_tensor(_to_numpy(default if given is None else given), dtype=self.dtype, device=self.device)
            if tuple(x.shape) not in (shape, shape[1:], ()):
                raise ValueError(f"reset option {key!r} must have shape {shape} or {shape[1:]}, got {tuple(x.shape)}")
            if not (torch.isfinite(x).all() and (signed or (x >= 0).all())):
                rule = "finite" if signed else "finite and >= 0 (a cash account: no loans, no short positions)"
                raise ValueError(f"reset option {key!r} must be {rule}, got {x}")
            out.append(x.expand(shape).clone())
        return out[0], out[1]

    def step(self, actions: torch.Tensor):
        """Trade (at today's close, or the next bar's, by ``execution``), move to the next day, mark
        the account at its close (module doc).

        ``info`` describes the step just taken, before any autoreset: ``account_value``,
        ``cash`` (N,) and ``holdings`` (N, S) after trading, marked on the new day;
        ``trades`` (N, S) signed shares executed; ``costs`` and ``traded_value`` (N,) of this
        step; ``turnover`` = traded value / account value before trading; ``total_costs``
        paid this episode (trading and holding costs); ``day`` (N,) the new day's row;
        ``fill_prices`` (N, S) the prices the trades executed at; with a margin account
        ``margin_call`` (N,), True where this step's orders were replaced by a liquidation; plus
        ``final_obs`` / ``_final_obs`` and ``account``, the accounts the next action trades (after
        any autoreset; see ``reset``).
        """
        self._check(actions)
        # With execution="close" orders fill at today's close and only the mark below reads day t+1.
        fill = self.prices if self.execution == "close" else self._fill_prices.index_select(0, self.day)
        called = None
        if self._fast:
            ex = execute_orders(self.cash, self.holdings, fill, self._orders(actions), self.cost_pct)
        else:
            ex, called, fill = self._execute(actions, fill)
        # The balances carried overnight into day t+1: after a same-close trade, else before the next-bar fill.
        held = (ex.cash, ex.holdings) if self.execution == "close" else (self.cash, self.holdings)
        interest = paid = None
        if self.financing is not None:  # on the balances at today's close (after a same-close trade)
            interest = self.financing.interest(*held, self.prices, self._cash_rate.index_select(0, self.day),
                                               self._margin_rate, self._rebate)
            ex = ex._replace(cash=ex.cash + interest)
        if self.dividends is not None:  # the holders of record going into the ex-date t+1; shorts pay
            paid = torch.linalg.vecdot(held[1], self.dividends.index_select(0, self.day + 1))
            ex = ex._replace(cash=ex.cash + paid)
        day = self.day + 1
        next_prices = self.close_prices.index_select(0, day)  # (N, S) the mark
        position_value = ex.holdings * next_prices
        value = ex.cash + position_value.sum(1)
        rewards = ((value - self.value) * (self.reward_scale / self.initial_cash)).float()
        elapsed = self.elapsed + 1
        # Starts are drawn in [0, T-1-_max_steps], so this also ends every episode by the last day.
        truncated = elapsed >= self._max_steps
        terminated = torch.zeros_like(truncated)
        final_obs = self._observe(ex.cash, position_value, day)
        info = {"account_value": value, "cash": ex.cash, "holdings": ex.holdings, "trades": ex.trades,
                "costs": ex.costs, "traded_value": ex.traded_value,
                "turnover": ex.traded_value / self.value.clamp(min=self._tiny),
                "total_costs": self.total_costs + ex.costs, "day": day, "fill_prices": fill}
        if called is not None:
            info["margin_call"] = called
        if interest is not None:
            info["interest"] = interest
        if paid is not None:
            info["dividends"] = paid

        self.day, self.elapsed, self.cash, self.holdings, self.prices = day, elapsed, ex.cash, ex.holdings, next_prices
        self.value, self.total_costs = value, info["total_costs"]
        obs = self._autoreset(truncated, final_obs)
        info["final_obs"], info["_final_obs"] = final_obs, truncated
        info["account"] = self._account(first_bar=truncated)
        return obs, rewards, terminated, truncated, info

    def _shares(self, actions: torch.Tensor) -> torch.Tensor:
        """(N, S) signed whole shares the actions ask for, ``round(clip(a, -1, 1) * max_trade_shares)``
        in ``dtype``."""
        if actions.dtype in _HALF:  # float16 overflows above 65504 shares: scale in float32
            actions = actions.float()
        # clamp (not clamp_) first: ``actions`` is the caller's tensor.
        return actions.clamp(-1.0, 1.0).mul_(self.max_trade_shares).round_().to(self.dtype)

    def _turbulent(self) -> torch.Tensor:
        """(N, 1) bool: the turbulence switch fires today (switch on)."""
        return (self.turbulence.index_select(0, self.day) >= self.turbulence_threshold)[:, None]

    def _orders(self, actions: torch.Tensor) -> torch.Tensor:
        """``_shares``; on a turbulent day (switch on), ``-inf``: sell everything, buy nothing."""
        orders = self._shares(actions)
        if self.turbulence_threshold is not None:
            orders.masked_fill_(self._turbulent(), -torch.inf)
        return orders

    def _execute(self, actions: torch.Tensor, fill: torch.Tensor) -> tuple[Any, torch.Tensor | None, torch.Tensor]:
        """The general fill (``finance.execution.execute``), the margin calls, (N,) or None, and the
        fill prices (on the tick grid: each order's side, up for buys, down for sells).

        Where the turbulence switch fires or the account is below maintenance at today's close,
        the orders close every position instead."""
        orders, close_out, called = self._in_universe(self._shares(actions)), None, None
        if self.turbulence_threshold is not None:
            close_out = self._turbulent()
        if self.margin is not None:
            called = margin_call(self.cash, self.holdings, self.prices, self.margin.maintenance)
            if self.margin.liquidation == "all":
                close_out = called[:, None] if close_out is None else close_out | called[:, None]
        if self._lot is not None:  # whole lots (a position closed out is closed whole)
            orders = (orders / self._lot).round() * self._lot
        if self._limit is not None:  # |holdings after| <= max_position; a position above it is cut to it
            orders = (self.holdings + orders).clamp(-self._limit, self._limit) - self.holdings
        if close_out is not None:
            orders = torch.where(close_out, -self.holdings, orders)
        if self.margin is not None and self.margin.liquidation == "restore" and bool(called.any()):
            orders = self._restore_margin(orders, called, fill, close_out)
        max_shares = None
        if self.max_participation is not None:
            max_shares = (self._cap_volume.index_select(0, self.day) * self.max_participation).floor_()
            if self._lot is not None:
                max_shares = (max_shares / self._lot).floor() * self._lot
        if self._fill_up is not None:  # an order's sign is its side: caps and budgets only shrink it toward 0
            fill = torch.where(orders > 0, self._fill_up.index_select(0, self.day),
                               torch.where(orders < 0, self._fill_down.index_select(0, self.day), fill))
        m = self.margin
        ex = execute(self.cash, self.holdings, fill, orders, self.costs, self.day,
                     gross_limit=1.0 if m is None else m.gross_limit, shorts=m is not None and m.shorts,
                     max_shares=max_shares, lot=self._lot)
        return ex, called, fill

    def _restore_margin(self, orders: torch.Tensor, called: torch.Tensor, fill: torch.Tensor,
                        close_out: torch.Tensor | None) -> torch.Tensor:
        """``Margin(liquidation="restore")``: a called account's orders become the pro-rata sale that
        restores its maintenance margin at this step's fill prices (``restoring_fraction``); the
        turbulence switch, where it fires, still closes everything."""
        if self._fill_up is not None:  # a long is sold (down the grid), a short bought back (up)
            day_up, day_down = self._fill_up.index_select(0, self.day), self._fill_down.index_select(0, self.day)
            fill = torch.where(self.holdings > 0, day_down, torch.where(self.holdings < 0, day_up, fill))
        forced = restoring_fraction(self.cash, self.holdings, fill, self.costs, self.day, self.margin.maintenance,
                                    self._lot)
        replace = called[:, None] if close_out is None else called[:, None] & ~close_out
        return torch.where(replace, forced, orders)

    def _autoreset(self, done: torch.Tensor, final_obs: torch.Tensor) -> torch.Tensor:
        """Same-step autoreset: start a fresh episode in the accounts where ``done``; returns the
        observation of every account (``final_obs`` where no episode ended).

        One host sync (the action check has one anyway) lets the common step, where no episode
        ends, skip this work; where one does, the fresh starts drawn for all accounts are kept
        only where an episode ended."""
        if not bool(done.any()):
            return final_obs
        start, cash0 = self._draw_starts()
        self.day = torch.where(done, start, self.day)
        self.prices = self.close_prices.index_select(0, self.day)
        self.elapsed = self.elapsed.masked_fill(done, 0)
        self.cash = torch.where(done, cash0, self.cash)
        self.holdings = self.holdings.masked_fill(done[:, None], 0.0)
        self.value = torch.where(done, cash0, self.value)
        self.total_costs = self.total_costs.masked_fill(done, 0.0)
        # Holdings are 0 where done, and so is their value: the rows kept from this observation.
        return torch.where(done[:, None], self._observe(self.cash, self.holdings, self.day), final_obs)

    def _account(self, first_bar: torch.Tensor) -> dict[str, torch.Tensor]:
        """``info["account"]``: the accounts as the next action finds them (what ``obs`` shows, exact);
        ``prices`` is today's close (the fill price with ``execution="close"``)."""
        return {"cash": self.cash, "holdings": self.holdings, "prices": self.prices, "first_bar": first_bar}

    # -- helpers for policies, backtests and notebooks
    # ``prices`` (N, S) is today's close of every account: the execution price of the next step
    # with execution="close".
    # ``price`` was a second name for the same tensor; it still works, with a FutureWarning.
    price = deprecated_alias("prices")

    def evaluation_env(self, num_envs: int = 1, **changes: Any) -> "StockTradingVecEnv":
        """A deterministic copy on the same data: every episode starts on the first day with
        ``initial_cash`` and runs to the last day; costs, sizes, execution, margin, turbulence switch
        and ``price_scale`` unchanged, except the trading rules named in ``changes``
        (``execution="next_open"``, ``costs=...``, ``margin=...``, ``max_trade_shares=...``)."""
        rules = dict(max_trade_shares=self.max_trade_shares, costs=self.costs, execution=self.execution,
                     max_participation=self.max_participation, margin=self.margin, financing=self.financing,
                     lot_size=self.lot_size, max_position=self.max_position, universe=self.universe,
                     tick_size=self.tick_size,
                     turbulence_threshold=self.turbulence_threshold, reward_scale=self.reward_scale,
                     validate_actions=self.validate_actions)
        unknown = sorted(set(changes) - set(rules) - {"cost_pct"})
        if unknown:
            raise ValueError(f"evaluation_env changes trading rules only ({', '.join(sorted(rules))}, cost_pct), "
                             f"got {unknown}; build a new env for other data or settings")
        if "cost_pct" in changes:
            rules["costs"] = None
        rules.update(changes)
        features = None
        if self.feature_names:  # back to the (feature, ticker) frame, so the labels travel too
            T, S, F = self.features.shape
            features = pd.DataFrame(self.features.cpu().numpy().transpose(0, 2, 1).reshape(T, F * S), index=self.dates,
                                    columns=pd.MultiIndex.from_product([self.feature_names, self.tickers]))
        turbulence = None if self.turbulence is None else pd.Series(self.turbulence.cpu().numpy(), index=self.dates)
        frame = lambda x: None if x is None else pd.DataFrame(x.cpu().numpy(), index=self.dates,  # noqa: E731
                                                               columns=self.tickers)
        return StockTradingVecEnv(
            self.close_frame(), features, turbulence, num_envs=num_envs, device=self.device,
            initial_cash=self.initial_cash, price_scale=self.price_scale, dtype=self.dtype,
            open_prices=frame(self.open_prices), volume=frame(self.volume), dividends=frame(self.dividends), **rules)

    def close_frame(self) -> pd.DataFrame:
        """The closes as a dates x tickers DataFrame."""
        return pd.DataFrame(self.close_prices.cpu().numpy(), index=self.dates, columns=self.tickers)

    def __repr__(self) -> str:
        return (f"StockTradingVecEnv(num_envs={self.num_envs}, days={self.num_days}, stocks={self.num_stocks}, "
                f"features={len(self.feature_names)}, device={self.device})")
