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
2. the orders execute at ``close[t]``, sells first, then buys;
3. the env moves to day t+1 and marks the account at ``close[t+1]``;
   ``reward(t) = reward_scale * (value(t+1) - value(t)) / initial_cash``.

So ``obs(t)`` never depends on a row after t; ``reward(t)`` depends on row t+1 only through the
mark. ``tests/test_stock_env.py`` checks this by perturbing all data after a day.

Episodes
--------
An episode starts on day ``t0`` (0, or uniform in ``[0, T-1-episode_length]`` with
``random_start``) with all-cash ``initial_cash`` (or uniform in ``cash_range``) and runs
``episode_length`` steps, or to the last day when ``episode_length`` is None. The end is a
*truncation* (the account would go on; learners bootstrap with ``V(final_obs)``): ``terminated``
is always False (cash and holdings never go negative, so the account cannot go bust).
``reset(options={"cash": c, "holdings": h})`` starts that one reset's episodes from a given
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

Turbulence switch (FinRL): with ``turbulence_threshold`` set, on a day with
``turbulence[t] >= turbulence_threshold`` every account sells all holdings (paying costs) and
all buys are blocked, whatever the action.

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
Observations and rewards are float32.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
import torch

from finance.data.checks import check_dates, check_int, check_number, check_prices
from finance.execution import execute_orders
from podracer.agents.common import deprecated_alias
from podracer.envs import TensorVecEnv

ArrayLike = pd.DataFrame | pd.Series | np.ndarray | torch.Tensor


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


def _check_flag(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


# ---------------------------------------------------------------------------- the env
class StockTradingVecEnv(TensorVecEnv):
    """``num_envs`` long-only trading accounts over one history of daily closes (see module doc).

    Args:
        close: daily closes, a dates x tickers DataFrame (``prices["close"]``) or a (T, S)
            array/tensor. Dates strictly increasing (oldest first); prices finite and > 0.
        features: per-stock indicators known at each close: a DataFrame with MultiIndex columns
            (feature, ticker) on the same dates, or a (T, S, F) array/tensor. Used as given.
        turbulence: a (T,) Series/array for the turbulence switch (``finance.features.turbulence``).
        num_envs: accounts stepped together.
        device: torch device of every tensor.
        initial_cash: starting cash, and the money unit of observations and rewards.
        max_trade_shares: whole shares traded per stock for an action of +-1 (FinRL's ``hmax``), >= 1.
        cost_pct: transaction cost as a fraction of traded value, on buys and sells.
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

    Sizes (``num_envs``, ``max_trade_shares``, ``episode_length``, ``seed``) take any integer type
    (``np.int64`` too), never a float or a bool; amounts must be finite. A bad value is a
    ``ValueError`` that names it.

    Data attributes (read-only by convention): ``close_prices`` (T, S) in ``dtype``,
    ``features`` (T, S, F) float32, ``turbulence`` (T,) or None, ``obs_table`` (T, obs_dim),
    ``dates``, ``tickers``, ``feature_names``, ``obs_names``, ``price_scale`` (S,); per account
    ``cash`` (N,), ``holdings`` (N, S), ``value`` (N,), ``day`` (N,), ``prices`` (N, S) today's
    close. ``close()`` is the protocol's (nothing to release); ``close_frame()`` gives the closes
    as a DataFrame.
    """

    task = "stock_trading"  # make_agent("ppo", env) picks the "stock_trading" preset (finance/presets.py)

    def __init__(self, close: ArrayLike, features: ArrayLike | None = None, turbulence: ArrayLike | None = None,
                 num_envs: int = 1, device: str | torch.device = "cpu", initial_cash: float = 1e6,
                 max_trade_shares: int = 100, cost_pct: float = 1e-3, episode_length: int | None = None,
                 random_start: bool = False, cash_range: tuple[float, float] | None = None,
                 turbulence_threshold: float | None = None, reward_scale: float = 100.0, seed: int | None = None,
                 price_scale: ArrayLike | None = None, dtype: torch.dtype = torch.float64,
                 validate_actions: bool = True):
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
        self._set_data(close_np, features, turbulence, price_scale, close_is_frame)
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
        cost_pct = check_number(cost_pct, "cost_pct")
        if not 0 <= cost_pct < 1:
            raise ValueError(f"cost_pct must be in [0, 1), got {cost_pct}")
        # Whole shares: an action of +-1 must be able to trade at least one (0.5 rounds every order to 0).
        max_trade_shares = check_int(max_trade_shares, "max_trade_shares", low=1)
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
        all cash: ``c`` a number or (N,), ``h`` shares per stock, (S,) or (N, S), all >= 0."""
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
        out = []
        for key, default, shape in (("cash", drawn_cash, (N,)), ("holdings", torch.zeros(S), (N, S))):
            given = options.get(key)
            x = torch.as_tensor(_to_numpy(default if given is None else given), dtype=self.dtype, device=self.device)
            if tuple(x.shape) not in (shape, shape[1:], ()):
                raise ValueError(f"reset option {key!r} must have shape {shape} or {shape[1:]}, got {tuple(x.shape)}")
            if not (torch.isfinite(x).all() and (x >= 0).all()):
                raise ValueError(f"reset option {key!r} must be finite and >= 0 (no short positions), got {x}")
            out.append(x.expand(shape).clone())
        return out[0], out[1]

    def step(self, actions: torch.Tensor):
        """Trade at today's close, move to the next day, mark the account there (module doc).

        ``info`` describes the step just taken, before any autoreset: ``account_value``,
        ``cash`` (N,) and ``holdings`` (N, S) after trading, marked on the new day;
        ``trades`` (N, S) signed shares executed; ``costs`` and ``traded_value`` (N,) of this
        step; ``turnover`` = traded value / account value before trading; ``total_costs``
        paid this episode; ``day`` (N,) the new day's row; plus ``final_obs`` / ``_final_obs``
        and ``account``, the accounts the next action trades (after any autoreset; see ``reset``).
        """
        self._check(actions)
        # Orders execute at today's close; only the mark below reads day t+1's data.
        ex = execute_orders(self.cash, self.holdings, self.prices, self._orders(actions), self.cost_pct)
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
                "total_costs": self.total_costs + ex.costs, "day": day}

        self.day, self.elapsed, self.cash, self.holdings, self.prices = day, elapsed, ex.cash, ex.holdings, next_prices
        self.value, self.total_costs = value, info["total_costs"]
        obs = self._autoreset(truncated, final_obs)
        info["final_obs"], info["_final_obs"] = final_obs, truncated
        info["account"] = self._account(first_bar=truncated)
        return obs, rewards, terminated, truncated, info

    def _orders(self, actions: torch.Tensor) -> torch.Tensor:
        """(N, S) signed whole shares the actions ask for, ``round(clip(a, -1, 1) * max_trade_shares)``
        in ``dtype``; on a turbulent day (switch on), ``-inf``: sell everything, buy nothing."""
        # clamp (not clamp_) first: ``actions`` is the caller's tensor.
        orders = actions.clamp(-1.0, 1.0).mul_(self.max_trade_shares).round_().to(self.dtype)
        if self.turbulence_threshold is not None:
            risky = (self.turbulence.index_select(0, self.day) >= self.turbulence_threshold)[:, None]  # (N, 1)
            orders.masked_fill_(risky, -torch.inf)
        return orders

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
        """``info["account"]``: the accounts as the next action finds them (what ``obs`` shows, exact)."""
        return {"cash": self.cash, "holdings": self.holdings, "prices": self.prices, "first_bar": first_bar}

    # -- helpers for policies, backtests and notebooks
    # ``prices`` (N, S) is today's close of every account: the execution price of the next step.
    # ``price`` was a second name for the same tensor; it still works, with a FutureWarning.
    price = deprecated_alias("prices")

    def evaluation_env(self, num_envs: int = 1) -> "StockTradingVecEnv":
        """A deterministic copy on the same data: every episode starts on the first day with
        ``initial_cash`` and runs to the last day; costs, sizes, turbulence switch and
        ``price_scale`` unchanged."""
        features = None
        if self.feature_names:  # back to the (feature, ticker) frame, so the labels travel too
            T, S, F = self.features.shape
            features = pd.DataFrame(self.features.cpu().numpy().transpose(0, 2, 1).reshape(T, F * S), index=self.dates,
                                    columns=pd.MultiIndex.from_product([self.feature_names, self.tickers]))
        turbulence = None if self.turbulence is None else pd.Series(self.turbulence.cpu().numpy(), index=self.dates)
        return StockTradingVecEnv(
            self.close_frame(), features, turbulence, num_envs=num_envs, device=self.device,
            initial_cash=self.initial_cash, max_trade_shares=self.max_trade_shares, cost_pct=self.cost_pct,
            turbulence_threshold=self.turbulence_threshold, reward_scale=self.reward_scale,
            price_scale=self.price_scale, dtype=self.dtype, validate_actions=self.validate_actions)

    def close_frame(self) -> pd.DataFrame:
        """The closes as a dates x tickers DataFrame."""
        return pd.DataFrame(self.close_prices.cpu().numpy(), index=self.dates, columns=self.tickers)

    def __repr__(self) -> str:
        return (f"StockTradingVecEnv(num_envs={self.num_envs}, days={self.num_days}, stocks={self.num_stocks}, "
                f"features={len(self.feature_names)}, device={self.device})")
