"""Walk-forward evaluation: refit on a moving training window, trade the next window out of sample,
carry the account across, and stitch the out-of-sample windows into one backtest.

One split (train 2005-2016, test 2019-2022) is one draw of luck; a walk-forward asks the same
question many times, each time with only the past (Pardo, *The Evaluation and Optimization of
Trading Strategies*, 2008, ch. 11; López de Prado, *Advances in Financial Machine Learning*, 2018,
sec. 12.2)::

    rolling:   [ train 0 ][ test 0 ]
                   [ train 1 ][ test 1 ]
                       [ train 2 ][ test 2 ]
    expanding: [ train 0 ][ test 0 ]
               [ train 1     ][ test 1 ]
               [ train 2         ][ test 2 ]

Windows. ``train_window`` and ``test_window`` are an ``int``, a number of bars (rows: trading
days for daily prices), or a calendar span: a string ``"<n>D|W|M|Y"`` (``"2Y"``, ``"6M"``) or a
``pd.DateOffset``. The first ``warmup`` bars only warm up the indicators; training window 0
starts after them and test window 0 on the first bar after it. Test windows follow each other
without gap or overlap to the end of the data (the last may be shorter; a last bar left alone
joins the window before, as its mark). A calendar test window k starts on the first bar on or
after ``test_start_0 + k * test_window``. Window k trains on the ``train_window`` just before its
test window (``mode="rolling"``: the last n bars, or the bars of the calendar span) or on every
bar since training window 0 began (``mode="expanding"``).

No look-ahead. The indicators are causal (``finance.features``), so computing them once on the
whole history is the same as computing them per window; the ``FeatureScaler`` and the
observation's ``price_scale`` are fitted on each training window alone. ``fit`` sees a
``MarketData`` holding only the training window (split ``"train"``).

Carry-over. Test window k trades from its first bar through its last, and is marked on the next
window's first bar, where window k+1 starts from the same cash and shares (``StockTradingVecEnv.
reset(options=...)``), not a fresh account: rebalancing at a boundary is an ordinary trade and
pays its costs. The stitched curve follows ``finance.backtest``'s conventions (value before the
day's trades; no trade on the last bar), so ``.metrics()``, ``.plot()`` and ``compare()`` work.

Policies. ``fit(train)`` (``fit(train, previous)`` with ``warm_start=True``, ``previous`` the last
window's policy, a copy, or None on window 0) returns anything ``backtest`` runs: an agent, an
ensemble, a callable ``obs -> actions``, or a ``BuyAndHoldPolicy`` (re-made for each test env,
like ``backtest`` does). ``RebalancePolicy`` below trades to fixed weights at the start of each
test window: the walk-forward form of a fitted portfolio (e.g. ``min_variance_weights`` of the
training closes).
"""

from __future__ import annotations

import copy
import dataclasses
import numbers
import re
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
import torch

from finance.backtest import BacktestResult, BuyAndHoldPolicy, backtest, buy_and_hold, index_baseline, play_episode
from finance.data.checks import check_int
from finance.env import StockTradingVecEnv
from finance.features import DEFAULT_INDICATORS, FeatureScaler, add_features, turbulence, warmup_days
from finance.market import MarketData, relative_features

Length = int | str | pd.DateOffset
_UNITS = {"D": "days", "W": "weeks", "M": "months", "Y": "years"}
WINDOW_COLUMNS = ("train_start", "train_end", "train_days", "test_start", "test_end", "test_days", "return",
                  "sharpe", "max_drawdown", "boundary_turnover", "costs")


# ---------------------------------------------------------------------------- the result
@dataclasses.dataclass(repr=False)
class WalkForwardResult(BacktestResult):
    """The stitched out-of-sample ``BacktestResult`` (every field of it), plus:

    Attributes:
        windows: one row per window: ``train_start``, ``train_end``, ``train_days``,
            ``test_start``, ``test_end`` (last bar owned), ``test_days``; ``return`` (value on the
            next window's first bar / value on this one's, minus 1: the windows' returns compound
            to the whole), ``sharpe``, ``max_drawdown`` over the same bars; ``boundary_turnover``
            (value traded on the first bar / account value: the rebalancing at the boundary);
            ``costs`` paid in the window (money).
        policies: the policy each window traded, with ``keep_policies=True``; else empty.
    """

    windows: pd.DataFrame = dataclasses.field(default_factory=pd.DataFrame)
    policies: list = dataclasses.field(default_factory=list)

    def plot(self, baselines: bool = True, max_tickers: int = 40, sharpe_window: int = 63):
        """``BacktestResult.plot`` with a dotted line at each window boundary (a refit); shown once
        in a notebook, whatever the cell ends with."""
        fig = super().plot(baselines, max_tickers, sharpe_window)
        for ax in fig.axes[:3]:  # equity, drawdown, rolling Sharpe
            for start in self.windows["test_start"].iloc[1:]:
                ax.axvline(start, color="grey", lw=0.8, ls=":")
        return fig

    def __repr__(self) -> str:
        return super().__repr__().replace("BacktestResult(", f"WalkForwardResult({len(self.windows)} windows, ", 1)


# ---------------------------------------------------------------------------- policies
class RebalancePolicy(BuyAndHoldPolicy):
    """``BuyAndHoldPolicy`` with ``rebalance=True``: trade to target weights of the account value
    on the first bar of every episode, then hold.

    Whole shares ``floor(w * value / (price * (1 + cost_pct)))``; orders above
    ``max_trade_shares`` are spread over the first bars; if the sells' costs leave too little
    cash for every buy, the env scales the buys down. From all cash it trades as
    ``BuyAndHoldPolicy``; in a walk-forward it rebalances the carried account at each boundary.
    Like it, it is called ``policy(obs, info)`` and reads only the env's ``info["account"]``;
    ``env`` is any env on the same tickers (the training env will do).
    """

    def __init__(self, env: StockTradingVecEnv, weights: Any = None, rebalance: bool = True):
        super().__init__(env, weights, rebalance)


# ---------------------------------------------------------------------------- windows
def _as_length(x: Any, name: str, min_bars: int) -> int | pd.DateOffset:
    """A window length: bars (int >= min_bars) or a calendar span (pd.DateOffset)."""
    fix = 'a number of bars (e.g. 252) or a calendar span ("2Y", "6M", "4W", "30D", or a pd.DateOffset)'
    if isinstance(x, numbers.Integral) and not isinstance(x, bool):
        if x < min_bars:
            raise ValueError(f"{name} must be at least {min_bars} bar(s), got {x}; pass {fix}")
        return int(x)
    if isinstance(x, str):
        match = re.fullmatch(r"\s*(\d+)\s*([DWMY])\s*", x.upper())
        if match is None or int(match[1]) == 0:
            raise ValueError(f"{name}={x!r} is not a positive span; pass {fix}")
        return pd.DateOffset(**{_UNITS[match[2]]: int(match[1])})
    if isinstance(x, pd.DateOffset):
        day = pd.Timestamp("2000-01-03")
        if day + x <= day:
            raise ValueError(f"{name}={x!r} must be a positive span; pass {fix}")
        return x
    raise ValueError(f"{name} must be {fix}, got {x!r} ({type(x).__name__})")


def _after(dates: pd.DatetimeIndex, i: int, length: int | pd.DateOffset, sign: int = 1) -> int:
    """Row ``i`` moved by ``length``: ``i +- bars``, or the first row on or after ``date[i] +- span``."""
    if isinstance(length, int):
        return i + sign * length
    return int(dates.searchsorted(dates[i] + length if sign > 0 else dates[i] - length, side="left"))


def _windows(dates: pd.DatetimeIndex, first: int, train: int | pd.DateOffset, test: int | pd.DateOffset,
             mode: str) -> list[tuple[int, int, int, int]]:
    """(train_start, test_start, test_end, mark) rows per window: trains on rows [train_start,
    test_start), owns rows [test_start, test_end), is marked on row ``mark`` (the next window's
    first row, or the last row of the data)."""
    T = len(dates)
    s0 = _after(dates, first, train)
    left = f"the data has {T - first} bars after the {first} warm-up bars ({dates[first].date()} .. {dates[-1].date()})"
    if s0 >= T - 1:  # a test window needs a bar to trade on and one to be marked on
        raise ValueError(f"train_window={_show(train)} leaves no bar to test: {left}; shorten train_window or "
                         "pass more data")
    if s0 - first < 2:
        raise ValueError(f"train_window={_show(train)} spans {s0 - first} bar(s) here; training needs at least 2")
    end0 = _after(dates, s0, test)
    too_long = end0 > T if isinstance(test, int) else dates[s0] + test > dates[-1] + pd.Timedelta(days=1)
    if too_long:
        raise ValueError(f"train_window={_show(train)} + test_window={_show(test)} is longer than the data: {left}; "
                         "no test window fits after the first training window. Shorten the windows or pass more data")
    starts, k = [s0], 1
    while True:
        nxt = s0 + k * test if isinstance(test, int) else int(dates.searchsorted(dates[s0] + k * test))
        if nxt >= T - 1:  # the last bar alone cannot trade: it joins the window before, as its mark
            break
        if nxt > starts[-1]:  # a calendar span with no bar in it (a weekend) is no window
            starts.append(nxt)
        k += 1
    out = []
    for k, s in enumerate(starts):
        a = first if mode == "expanding" else max(first, _after(dates, s, train, sign=-1))
        nxt = starts[k + 1] if k + 1 < len(starts) else T
        out.append((a, s, nxt, min(nxt, T - 1)))
    return out


def _show(length: int | pd.DateOffset) -> str:
    return str(length) if isinstance(length, int) else repr(length)


# ---------------------------------------------------------------------------- inputs
def _panel(prices: Any, indicators: Sequence[str], relative: bool,
           turbulence_window: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series, dict[str, pd.DataFrame]]:
    """(close, causal features, turbulence, extras) on the whole history; extras holds the env's
    ``open_prices`` and ``volume`` where the prices have them (OHLCV data)."""
    if isinstance(prices, MarketData):
        raise TypeError("walk_forward needs the raw prices, not a MarketData: its features are scaled with statistics "
                        "of one fixed training split, which would leak into earlier windows. Pass "
                        "finance.load_prices(...) (or its ['close']); walk_forward fits a scaler per window")
    if not isinstance(prices, pd.DataFrame):
        raise TypeError(f"prices must be finance.load_prices output or a dates x tickers frame of closes, got "
                        f"{type(prices).__name__}")
    close = prices["close"] if isinstance(prices.columns, pd.MultiIndex) else prices
    feats = add_features(prices, indicators)  # checks dates and prices, with clear errors
    if relative:
        feats = relative_features(feats, close)
    extras = {}
    if isinstance(prices.columns, pd.MultiIndex):
        have = set(prices.columns.get_level_values(0))
        extras = {key: prices[f] for key, f in (("open_prices", "open"), ("volume", "volume")) if f in have}
    return close.astype("float64"), feats, turbulence(close, window=turbulence_window), extras


def _fit_call(fit: Callable, train: MarketData, previous: Any, warm_start: bool) -> Any:
    policy = fit(train, previous) if warm_start else fit(train)
    if policy is None:
        raise TypeError("fit returned None; it must return a policy (an agent, an ensemble, a callable obs -> "
                        "actions or a BuyAndHoldPolicy). Is a `return` missing?")
    return policy


@torch.no_grad()
def _run_window(policy: Any, env: StockTradingVecEnv, cash: torch.Tensor | None,
                holdings: torch.Tensor | None) -> dict[str, Any]:
    """One test window from the given account (all cash when None), as ``backtest`` runs one:
    values (D,), holdings / trades (D-1, S), costs (D-1,), the first bar's turnover, the end state."""
    run = play_episode(policy, env, None if cash is None else {"cash": cash, "holdings": holdings})
    info = run.pop("info")
    return dict(run, boundary_turnover=float(run["turnover"][0]), cash=info["cash"], end_holdings=info["holdings"])


# ---------------------------------------------------------------------------- walk_forward
def walk_forward(fit: Callable[..., Any], prices: pd.DataFrame, train_window: Length, test_window: Length, *,
                 mode: str = "rolling", warm_start: bool = False, initial_cash: float = 1e6,
                 cost_pct: float | None = None,
                 indicators: Sequence[str] = DEFAULT_INDICATORS, relative: bool = True, warmup: int | None = None,
                 turbulence_window: int = 252, benchmark: pd.Series | None = None, baselines: bool = True,
                 keep_policies: bool = False, name: str = "walk_forward", **env_kwargs: Any) -> WalkForwardResult:
    """Refit ``fit`` on each training window, trade the next test window, carry the account on.

    Args:
        fit: ``fit(train: MarketData) -> policy`` (``fit(train, previous)`` with ``warm_start``);
            ``train`` holds the training window only, as split ``"train"``: ``train.env("train",
            num_envs, random_start=True, episode_length=...)`` trains on it, ``train.close["train"]``
            fits a portfolio. Pass the training env the same ``cost_pct`` (or ``costs``,
            ``execution``) as here. With OHLCV prices, ``train.env`` gets the opens and volume.
        prices: ``finance.load_prices`` output, or a dates x tickers frame of closes.
        train_window, test_window: bars (int) or a calendar span (``"2Y"``, ``"6M"``,
            ``pd.DateOffset``); see the module docstring.
        mode: ``"rolling"`` (fixed-length training windows) or ``"expanding"`` (all the past).
        warm_start: pass ``fit`` a deep copy of the previous window's policy (None on window 0) to
            fine-tune instead of starting afresh; the copy keeps the one that traded unchanged.
        initial_cash, cost_pct: the account window 0 starts with, and the proportional cost of
            every trade (default 1e-3; or ``costs=`` a ``finance.costs`` model in ``env_kwargs``).
        indicators, relative, turbulence_window: the features, as in ``prepare_market``.
        warmup: leading bars used only to warm up the indicators; default
            ``warmup_days(indicators)`` (60 for the defaults), and at least ``turbulence_window + 1``
            with ``turbulence_threshold`` set (the turbulence index is 0 until then).
        benchmark: a close series: the ``index`` baseline, and ``train.benchmark["train"]``.
        baselines: add equal-weight buy-and-hold over the out-of-sample bars (and ``index``).
        keep_policies: keep each window's policy in ``result.policies``.
        env_kwargs: other ``StockTradingVecEnv`` settings of the test envs (``max_trade_shares``,
            ``turbulence_threshold``, ``dtype``, ``execution``, ``costs``, ``max_participation``,
            ``margin``); ``"next_open"``, volume costs and caps need OHLCV ``prices``.

    Returns:
        ``WalkForwardResult``: the stitched out-of-sample ``BacktestResult`` plus ``windows``
        (one row per window) and ``policies``.
    """
    if mode not in ("rolling", "expanding"):
        raise ValueError(f"mode must be 'rolling' or 'expanding', got {mode!r}")
    clash = sorted(set(env_kwargs) & {"num_envs", "episode_length", "random_start", "price_scale", "initial_cash"})
    if clash:
        raise ValueError(f"walk_forward sets {clash} of its test envs itself (one account over each whole window); "
                         "leave them out")
    train_len = _as_length(train_window, "train_window", 2)
    test_len = _as_length(test_window, "test_window", 1)
    close, features, turb, extras = _panel(prices, indicators, relative, turbulence_window)
    if warmup is None:
        # With the turbulence switch on, also skip the turbulence window: its first turbulence_window + 1 rows
        # are 0 ("calm"), so the switch could not fire there (found by review).
        on = env_kwargs.get("turbulence_threshold") is not None
        first = max(warmup_days(indicators), turbulence_window + 1 if on else 0)
    else:
        first = check_int(warmup, "warmup", low=0, high=len(close) - 1)
    spans = _windows(close.index, first, train_len, test_len, mode)

    runs, policies = [], []
    cash = holdings = previous = None
    for a, s, e, mark in spans:
        scaler = FeatureScaler().fit(features.iloc[a:s])  # this training window only
        train_close = close.iloc[a:s]
        train = MarketData(close={"train": train_close}, features={"train": scaler.transform(features.iloc[a:s])},
                           turbulence={"train": turb.iloc[a:s]}, price_scale=train_close.iloc[0].to_numpy(),
                           open={"train": extras["open_prices"].iloc[a:s]} if "open_prices" in extras else {},
                           volume={"train": extras["volume"].iloc[a:s]} if "volume" in extras else {})
        if benchmark is not None:
            train.benchmark["train"] = benchmark.reindex(train_close.index).ffill()
        policy = _fit_call(fit, train, copy.deepcopy(previous) if warm_start else None, warm_start)
        test = slice(s, mark + 1)  # the window's bars and its mark
        env = StockTradingVecEnv(close.iloc[test], scaler.transform(features.iloc[test]), turb.iloc[test], num_envs=1,
                                 initial_cash=initial_cash, cost_pct=cost_pct, price_scale=train.price_scale,
                                 **{key: x.iloc[test] for key, x in extras.items()}, **env_kwargs)
        run = _run_window(policy, env, cash, holdings)
        cash, holdings, previous = run["cash"], run["end_holdings"], policy
        runs.append(run)
        if keep_policies:
            policies.append(policy)
    result = _stitch(runs, spans, close, name)
    rows = [_window_row(close.index, span, run, result.bars_per_year) for span, run in zip(spans, runs)]
    result.windows = pd.DataFrame(rows, columns=list(WINDOW_COLUMNS)).rename_axis("window")
    result.policies = policies
    if baselines:
        oos, b = result.close, result.bars_per_year
        equal = np.full(oos.shape[1], 1.0 / oos.shape[1])
        if env.plain_market:  # the closed form, as before
            result.baselines["equal_weight"] = buy_and_hold(oos, equal, initial_cash, env.cost_pct, "equal_weight", b)
        else:  # the same market model, through one env over the out-of-sample bars
            rules = {k: v for k, v in env_kwargs.items() if k not in ("max_trade_shares", "turbulence_threshold")}
            whole = StockTradingVecEnv(oos, initial_cash=initial_cash, cost_pct=cost_pct, max_trade_shares=2**24,
                                       **{key: x.loc[oos.index] for key, x in extras.items()}, **rules)
            result.baselines["equal_weight"] = backtest(BuyAndHoldPolicy(whole), whole, name="equal_weight",
                                                        bars_per_year=b, baselines=False)
        if benchmark is not None:
            result.baselines["index"] = index_baseline(benchmark, oos.index, initial_cash, "index", b)
    if env.financing is not None:  # the metrics' risk-free rate is the cash rate the account earned
        for r in (result, *result.baselines.values()):
            r.risk_free = env.financing.risk_free(result.account_value.index)
    return result


def _window_row(dates: pd.DatetimeIndex, span: tuple[int, int, int, int], run: dict[str, Any],
                bars_per_year: int) -> dict[str, Any]:
    """The ``windows`` row of one window; its returns run from its first bar to its mark."""
    a, s, e, mark = span
    v = run["values"]  # (mark - s + 1,)
    m = BacktestResult("window", pd.Series(v, index=dates[s:mark + 1]), bars_per_year=bars_per_year).metrics()
    return {"train_start": dates[a], "train_end": dates[s - 1], "train_days": s - a, "test_start": dates[s],
            "test_end": dates[e - 1], "test_days": e - s, "return": v[-1] / v[0] - 1.0, "sharpe": m["sharpe"],
            "max_drawdown": m["max_drawdown"], "boundary_turnover": run["boundary_turnover"],
            "costs": float(run["costs"].sum())}


def _stitch(runs: list[dict[str, Any]], spans: list[tuple[int, int, int, int]], close: pd.DataFrame,
            name: str) -> WalkForwardResult:
    """One result from the windows: each keeps the bars it owns; its mark is the next one's start."""
    keep = [(run, e - s) for run, (_, s, e, _) in zip(runs, spans)]
    values = np.concatenate([run["values"][:n] for run, n in keep])
    held = np.concatenate([run["holdings"][:n] for run, n in keep])  # the last bar has no step
    trades = np.concatenate([run["trades"][:n] for run, n in keep])
    costs = np.concatenate([run["costs"][:n] for run, n in keep])
    oos = close.iloc[spans[0][1]:]
    dates, S = oos.index, oos.shape[1]
    positions = pd.DataFrame(np.vstack([held, held[-1:]]), index=dates, columns=oos.columns)  # held to the end
    trades = pd.DataFrame(np.vstack([trades, np.zeros((1, S))]), index=dates, columns=oos.columns)
    costs = pd.Series(np.append(costs, 0.0), index=dates, name="costs")
    return WalkForwardResult(name, pd.Series(values, index=dates, name=name), positions, trades, costs, oos)
