"""Backtests: drive a policy through a test period deterministically, measure it, and set it
beside baselines traded on the same dates with the same costs.

``backtest(policy, env_or_close, ...)`` runs any policy (an agent with ``.act``, an ensemble, or
a callable ``obs -> actions``) through a one-account evaluation ``StockTradingVecEnv`` from the
first day to the last and returns a ``BacktestResult``: the account value per day, the positions,
trades and costs, and the baselines:

- ``equal_weight``: buy ``1/S`` of the cash in every stock on the first day (whole shares,
  rounded down, paying ``cost_pct``) and hold;
- ``min_variance``: the same, with the long-only minimum-variance weights fitted on the
  training window's daily returns (needs ``train_close``);
- ``index``: a benchmark close series (e.g. the S&P 500) rescaled to the initial cash.

``backtest(policy, portfolio_env)`` runs a ``PortfolioVecEnv`` policy the same way, in units of
the env's initial value 1.0, beside the baselines that env trades: ``rebalanced`` to equal (and
minimum-variance) weights at every close, with the env's costs and execution.

Conventions shared by every series here: ``account_value[d]`` is the account marked at the
close of day ``d`` *before* that day's trades (so day 0 is the initial cash and costs paid on
day d show from day d+1); ``positions[d]`` are the shares held after day d's trades;
``trades[d]`` the signed shares traded at day d's close (none on the last day, the end). Under a
stock env's next-bar execution (``"next_close"``, ``"next_open"``) the rows of ``trades``,
``positions`` and ``costs`` stay on the day the order was decided, one bar before its fill
(``PortfolioVecEnv`` backtests put them on the fill day): ``weights()`` and ``traded_value()`` are
then a bar early and priced at the decision day's close; ``account_value``, and every return
metric, is marked at the fills.

``result.metrics()`` uses empyrical (``import empyrical``, the empyrical-reloaded package) on the
per-bar simple returns, annualised with ``bars_per_year``: by default inferred from the dates by
``finance.trading_calendar.bars_per_year`` (252 for daily NYSE bars, 1764 hourly, 365 daily 24/7),
252 for data without dates; an explicit number is used as given, and a calendar name
(``bars_per_year="24/7"``) counts the dates on that calendar. ``metrics(risk_free=..., benchmark=...,
risk=True)`` adds excess-return Sharpe and Sortino ratios, the benchmark-relative columns (excess
return, alpha, beta, information ratio, tracking error) and the tail and drawdown columns (historical
VaR and CVaR, longest drawdown, time to recover); ``docs/statistics.md`` defines each.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd
import torch

from finance.data.checks import check_dates, check_number, check_numeric, check_prices
from finance.trading_calendar import CalendarWarning, resolve_bars_per_year
from finance.env import StockTradingVecEnv
from finance.portfolio_env import PortfolioVecEnv, rebalance_remainder
from podracer import as_policy

METRICS = ("cumulative_return", "annual_return", "annual_volatility", "sharpe", "sortino", "max_drawdown",
           "calmar", "turnover", "costs")
"""The columns of ``BacktestResult.metrics()``, in order."""
# metrics(benchmark=...) adds these; metrics(risk=True) adds risk_metric_names(var_level).
BENCHMARK_METRICS = ("excess_return", "alpha", "beta", "information_ratio", "tracking_error")
"""The columns ``metrics(benchmark=...)`` adds."""
VAR_LEVEL = 0.95  # historical VaR and CVaR: the worst 5% of bars
MIN_BARS_TO_ANNUALISE = 20  # fewer returns than this (a month of days) make annual figures an extrapolation


def risk_metric_names(var_level: float = VAR_LEVEL) -> tuple[str, ...]:
    """The columns ``metrics(risk=True)`` adds: ``("var_95", "cvar_95", "longest_drawdown_bars",
    "recovery_bars")`` at the default 95% level."""
    pct = f"{var_level * 100:g}"
    return f"var_{pct}", f"cvar_{pct}", "longest_drawdown_bars", "recovery_bars"


# ---------------------------------------------------------------------------- the result
@dataclasses.dataclass
class BacktestResult:
    """One strategy over one period. Every frame and series is indexed by date.

    Attributes:
        name: label in tables and plots.
        account_value: (D,) account value at each close, before that day's trades.
        positions: (D, S) shares held after each day's trades; None for a plain series.
        trades: (D, S) signed shares traded at each day's close; None for a plain series.
        costs: (D,) transaction costs paid at each day's close; None for a plain series.
        close: (D, S) closes of the period (for weights and traded value).
        baselines: other strategies on the same dates, by name.
        execution: the fill timing it traded under (``"next_close"``, ``"next_open"``, ``"close"``),
            None for a plain series; ``"close"`` is optimistic, and ``optimistic`` and the plot say so.
        risk_free: ``metrics()``'s default risk-free rate: a backtest of an env with
            ``financing=`` sets it to that cash rate per bar (one setting for both); else 0.
        bars_per_year: bars per year for annualisation; None (the default) infers it from
            ``account_value``'s dates (``finance.trading_calendar.bars_per_year``: 252 daily,
            1764 hourly NYSE bars), 252 without dates; a calendar name (``"24/7"``, ``"XLON"``)
            counts the dates on that calendar. Holds the number used after construction.
    """

    name: str
    account_value: pd.Series
    positions: pd.DataFrame | None = None
    trades: pd.DataFrame | None = None
    costs: pd.Series | None = None
    close: pd.DataFrame | None = None
    baselines: dict[str, "BacktestResult"] = dataclasses.field(default_factory=dict)
    bars_per_year: int | None = None
    execution: str | None = None
    risk_free: float | pd.Series = 0.0

    @property
    def optimistic(self) -> bool:
        """True when it filled at the close its policy had just observed (``execution="close"``):
        an upper bound no trader can get; the default ``"next_close"`` fills a bar later."""
        return self.execution == "close"

    def __post_init__(self) -> None:
        if not isinstance(self.account_value, pd.Series):
            raise TypeError(f"{self.name!r}: account_value must be a pd.Series of values indexed by date, got "
                            f"{type(self.account_value).__name__}")
        check_numeric(self.account_value, f"{self.name!r}'s account_value")
        self.bars_per_year = resolve_bars_per_year(self.bars_per_year, self.account_value.index)

    def returns(self) -> pd.Series:
        """Per-bar simple returns of the account value (first bar dropped)."""
        return self.account_value.pct_change().iloc[1:]

    def weights(self) -> pd.DataFrame:
        """(D, S) fraction of the account held in each stock after each day's trades."""
        if self.positions is None or self.close is None:
            raise ValueError(f"{self.name!r} has no positions (a plain value series)")
        after_trade = self.account_value - self.costs  # costs leave the account at the trade
        return (self.positions * self.close).div(after_trade, axis=0)

    def traded_value(self) -> pd.Series:
        """(D,) value traded each day, buys plus sells, at the day's close."""
        if self.trades is None or self.close is None:
            raise ValueError(f"{self.name!r} has no trades (a plain value series)")
        return (self.trades.abs() * self.close).sum(axis=1)

    def metrics(self, risk_free: float | pd.Series | None = None,
                benchmark: "BacktestResult | pd.Series | str | None" = None,
                *, risk: bool = False, var_level: float = VAR_LEVEL) -> pd.Series:
        """Performance of the account value, via empyrical, annualised with ``bars_per_year``.

        Always (``METRICS``): ``cumulative_return``, ``annual_return`` (CAGR), ``annual_volatility``,
        ``sharpe`` and ``sortino`` of the returns in excess of ``risk_free``, ``max_drawdown``
        (negative), ``calmar``; ``turnover``: mean per-bar traded value / account value, times
        ``bars_per_year`` (buy-and-hold: about 1 / years); ``costs``: costs paid / initial value.
        The last two are NaN for plain series. With the defaults these are today's numbers.

        Args:
            risk_free: r_f, a constant annual rate (0.04 for 4%, compounded to a per-bar
                (1 + r_f)^(1/bars_per_year) - 1), or a Series of per-bar risk-free returns on the
                result's dates (each bar's return of a T-bill). Enters the Sharpe, Sortino and alpha.
                None: the result's ``risk_free`` (the env's ``financing`` cash rate, or 0).
            benchmark: adds ``BENCHMARK_METRICS``. A ``BacktestResult``, the name of one of this
                result's baselines (``"index"``, ``"equal_weight"``), or a Series: prices or
                values (every value > 0; the last one on or before each date is used) or per-bar
                returns (any value <= 0; one on each of the result's return dates). With b the
                benchmark's and r the strategy's per-bar returns, a = r - b:
                ``excess_return`` = CAGR(r) - CAGR(b); ``alpha``, ``beta``: Jensen's regression
                r - r_f = α + β (b - r_f) + ε (empyrical.alpha_beta; α annualised as
                (1 + α)^bars_per_year - 1); ``tracking_error`` = std(a) sqrt(bars_per_year);
                ``information_ratio`` = mean(a) / std(a) sqrt(bars_per_year).
            risk: adds ``risk_metric_names(var_level)``: historical ``var_95``, the (1 - level)
                quantile of per-bar returns, and ``cvar_95``, the mean of the returns at or below
                it (empyrical; per bar, negative is a loss); ``longest_drawdown_bars``, the most
                consecutive bars below a previous peak; ``recovery_bars``, bars from the maximum
                drawdown's trough back to its peak's value (NaN if never regained).
            var_level: the VaR and CVaR confidence level, in (0, 1).

        Fewer than ``MIN_BARS_TO_ANNUALISE`` returns warn (``CalendarWarning``): annual figures of a
        few bars are an extrapolation (a 2-bar series compounds one return a year's worth of times).
        """
        import empyrical  # the empyrical-reloaded package

        r, b = self.returns(), self.bars_per_year
        if len(r) < MIN_BARS_TO_ANNUALISE:
            warnings.warn(f"{self.name!r} has {len(r)} return(s); its annual return, volatility, Sharpe, Sortino and "
                          f"Calmar extrapolate them to {b:g} bars a year and say little below "
                          f"{MIN_BARS_TO_ANNUALISE}. Use cumulative_return, or a longer period", CalendarWarning,
                          stacklevel=2)
        excess = r - self._risk_free(self.risk_free if risk_free is None else risk_free, r.index)
        turnover = costs = float("nan")
        if self.trades is not None:
            turnover = float((self.traded_value() / self.account_value).mean() * b)
            costs = float(self.costs.sum() / self.account_value.iloc[0])
        out = {
            "cumulative_return": float(empyrical.cum_returns_final(r)),
            "annual_return": float(empyrical.annual_return(r, annualization=b)),
            "annual_volatility": float(empyrical.annual_volatility(r, annualization=b)),
            "sharpe": float(empyrical.sharpe_ratio(excess, annualization=b)),
            "sortino": float(empyrical.sortino_ratio(excess, annualization=b)),
            "max_drawdown": float(empyrical.max_drawdown(r)),
            "calmar": float(empyrical.calmar_ratio(r, annualization=b)),
            "turnover": turnover,
            "costs": costs,
        }
        if benchmark is not None:
            out.update(self._relative_metrics(r, excess, self._benchmark_returns(benchmark, r.index)))
        if risk:
            out.update(self._risk_metrics(r, var_level))
        return pd.Series(out, name=self.name)

    def _risk_free(self, risk_free: float | pd.Series, dates: pd.Index) -> float | pd.Series:
        """r_f per bar on ``dates``: a constant annual rate compounded down, or a Series aligned."""
        if isinstance(risk_free, pd.Series):
            rf = pd.Series(check_numeric(risk_free, "risk_free"), index=risk_free.index).reindex(dates)
            if rf.isna().any():
                raise ValueError(f"risk_free has no per-bar return on {int(rf.isna().sum())} of {self.name!r}'s "
                                 f"{len(dates)} return dates (the first is {rf.index[rf.isna()][0]}); pass a Series "
                                 "of per-bar risk-free returns on the same dates, or a constant annual rate")
            return rf
        rate = check_number(risk_free, "risk_free (a constant annual rate, 0.04 for 4%, or a per-bar Series)")
        if not -1.0 < rate < 1.0:
            raise ValueError(f"risk_free is an annual rate as a fraction, 0.04 for 4%, got {rate}; pass "
                             f"{rate / 100:g} for {rate:g}%")
        return 0.0 if rate == 0.0 else (1.0 + rate) ** (1.0 / self.bars_per_year) - 1.0

    def _benchmark_returns(self, benchmark: "BacktestResult | pd.Series | str", dates: pd.Index) -> pd.Series:
        """The benchmark's per-bar returns on this result's return ``dates``."""
        if isinstance(benchmark, str):
            if benchmark not in self.baselines:
                raise ValueError(f"{self.name!r} has no baseline {benchmark!r}; its baselines are "
                                 f"{list(self.baselines)}: pass one of those names, a BacktestResult or a Series of "
                                 "prices or returns")
            benchmark = self.baselines[benchmark]
        if isinstance(benchmark, BacktestResult):
            benchmark = benchmark.account_value
        if not isinstance(benchmark, pd.Series):
            raise TypeError(f"benchmark must be a BacktestResult, a baseline's name or a pd.Series of prices or "
                            f"returns indexed by date, got {type(benchmark).__name__}")
        values = pd.Series(check_numeric(benchmark, "benchmark"), index=benchmark.index).dropna()
        if (values > 0).all():  # levels: the last value on or before each of the result's dates
            if values.index.has_duplicates or not values.index.is_monotonic_increasing:
                check_dates(values.index, "benchmark")
            levels = values.reindex(values.index.union(self.account_value.index)).ffill()
            returns = levels.reindex(self.account_value.index).pct_change().reindex(dates)
            missing = "no price on or before"
        else:
            returns = values.reindex(dates)
            missing = "no return on"
        if returns.isna().any():
            first = returns.index[returns.isna()][0]
            raise ValueError(f"benchmark has {missing} {int(returns.isna().sum())} of {self.name!r}'s {len(dates)} "
                             f"return dates (the first is {first}); pass a benchmark covering "
                             f"{self.account_value.index[0]} .. {self.account_value.index[-1]}")
        return returns

    def _relative_metrics(self, r: pd.Series, excess: pd.Series, bench: pd.Series) -> dict[str, float]:
        import empyrical

        b = self.bars_per_year
        bench_excess = bench - (r - excess)  # b - r_f
        alpha, beta = empyrical.alpha_beta_aligned(excess.to_numpy(), bench_excess.to_numpy(), annualization=b)
        active = r - bench
        return {
            "excess_return": float(empyrical.annual_return(r, annualization=b) -
                                   empyrical.annual_return(bench, annualization=b)),
            "alpha": float(alpha),
            "beta": float(beta),
            "information_ratio": float(empyrical.excess_sharpe(r, bench) * math.sqrt(b)),
            "tracking_error": float(empyrical.annual_volatility(active, annualization=b)),
        }

    def _risk_metrics(self, r: pd.Series, var_level: float) -> dict[str, float]:
        import empyrical

        level = check_number(var_level, "var_level")
        if not 0.0 < level < 1.0:
            raise ValueError(f"var_level is a confidence level in (0, 1), 0.95 for the worst 5% of bars, got {level}")
        var, cvar, longest, recovery = risk_metric_names(level)
        under, recovery_bars = drawdown_durations(self.account_value)
        return {var: float(empyrical.value_at_risk(r, cutoff=1.0 - level)),
                cvar: float(empyrical.conditional_value_at_risk(r, cutoff=1.0 - level)),
                longest: float(under), recovery: recovery_bars}

    def between(self, start: Any = None, end: Any = None) -> "BacktestResult":
        """The same result, and its baselines, restricted to dates in [start, end]."""
        def cut(x: Any) -> Any:
            return None if x is None else x.loc[start:end]
        return dataclasses.replace(
            self, account_value=cut(self.account_value), positions=cut(self.positions), trades=cut(self.trades),
            costs=cut(self.costs), close=cut(self.close),
            baselines={k: v.between(start, end) for k, v in self.baselines.items()})

    def rolling_sharpe(self, window: int = 63) -> pd.Series:
        """The Sharpe ratio of the last ``window`` per-bar returns at each bar, annualised with
        ``bars_per_year``: ``mean / std (ddof=1) * sqrt(bars_per_year)``, risk-free 0 (``metrics()``'s
        default). Indexed like ``returns()``; NaN until ``window`` returns exist, and where
        they do not vary (an account all in cash). 63 bars: a quarter of daily bars."""
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 2:
            raise ValueError(f"window must be an int of at least 2 bars (63: a quarter of daily bars), got {window!r}")
        r = self.returns()
        mean, std = r.rolling(window).mean(), r.rolling(window).std(ddof=1)
        flat = std <= 1e-12 * r.abs().rolling(window).max()  # no move, or only round-off: no risk to divide by
        return (mean / std.mask(flat) * np.sqrt(self.bars_per_year)).rename(self.name)

    def plot(self, baselines: bool = True, max_tickers: int = 40, sharpe_window: int = 63):
        """A matplotlib ``Figure``: growth of 1 vs the baselines, drawdown, rolling Sharpe
        (``rolling_sharpe(sharpe_window)``) and the positions heatmap (a diverging colour scale
        centred on 0 when a weight is negative: a short position).

        Built without pyplot (no global figure state). In a Jupyter kernel it shows once, whatever
        the cell ends with (``finance.notebook_figure.NotebookFigure``); elsewhere ``fig.savefig(path)``.
        """
        from finance.notebook_figure import NotebookFigure

        others = list(self.baselines.values()) if baselines else []
        has_pos = self.positions is not None and self.close is not None
        height = 10.0 if has_pos else 7.5  # inches; fixed margins (a layout engine would draw it twice)
        fig = NotebookFigure(figsize=(10, height))
        axes = fig.subplots(4 if has_pos else 3, 1, sharex=False, gridspec_kw={
            "height_ratios": [3, 1.3, 1.3, 2.2] if has_pos else [3, 1.3, 1.3], "hspace": 0.3,
            "left": 0.08, "right": 0.92, "bottom": 0.4 / height, "top": 1 - 0.35 / height})
        ax_eq, ax_dd, ax_rs = axes[0], axes[1], axes[2]
        for res, style in [(self, {"lw": 2.0, "color": "black"})] + [(o, {"lw": 1.2, "alpha": 0.85}) for o in others]:
            v = res.account_value
            ax_eq.plot(v.index, v / v.iloc[0], label=res.name, **style)
            ax_dd.plot(v.index, v / v.cummax() - 1.0, label=res.name, **style)
            rs = res.rolling_sharpe(sharpe_window)
            ax_rs.plot(rs.index, rs.to_numpy(), label=res.name, **style)
        ax_eq.set_ylabel("growth of 1")
        caveat = " [execution='close': optimistic fills]" if self.optimistic else ""
        ax_eq.set_title(f"{self.name}: account value vs baselines (same dates, same costs){caveat}")
        ax_eq.legend(loc="upper left", fontsize="small")
        ax_eq.grid(alpha=0.3)
        ax_dd.set_ylabel("drawdown")
        ax_dd.grid(alpha=0.3)
        ax_rs.axhline(0.0, color="grey", lw=0.8)
        ax_rs.set_ylabel(f"Sharpe, last {sharpe_window}")
        ax_rs.set_title(f"rolling Sharpe ratio (annualised, over the last {sharpe_window} bars)")
        ax_rs.grid(alpha=0.3)
        if has_pos:
            import matplotlib.dates as mdates

            w = self.weights()
            if w.shape[1] > max_tickers:  # the largest positions, in the data's ticker order
                keep = set(w.abs().max().nlargest(max_tickers).index)
                w = w[[t for t in w.columns if t in keep]]
            x = self.account_value.index
            numeric = isinstance(x, pd.DatetimeIndex)
            x0, x1 = (mdates.date2num(x[0]), mdates.date2num(x[-1])) if numeric else (x[0], x[-1])
            values = w.to_numpy(dtype=np.float64)
            short = bool((values < 0).any())
            if short:  # diverging, centred on 0: red short, blue long
                top = float(np.nanmax(np.abs(values)))
                scale = {"cmap": "RdBu", "vmin": -top, "vmax": top}
            else:
                scale = {"cmap": "viridis", "vmin": 0.0}
            im = axes[3].imshow(values.T, aspect="auto", interpolation="nearest",
                                extent=(x0, x1, len(w.columns) - 0.5, -0.5), **scale)
            if numeric:
                axes[3].xaxis_date()
            axes[3].set_yticks(range(len(w.columns)), w.columns, fontsize="x-small")
            axes[3].set_title("portfolio weights (fraction of account per stock" + ("; red: short)" if short else ")"))
            # in the margin, so that every panel has the same width and the dates line up
            fig.colorbar(im, cax=axes[3].inset_axes((1.01, 0.0, 0.015, 1.0)))
        if isinstance(self.account_value.index, pd.DatetimeIndex):  # one time axis, its dates at the bottom
            for ax in axes[:-1]:
                ax.sharex(axes[-1])
                ax.tick_params(labelbottom=False)
        return fig

    def __repr__(self) -> str:
        v = self.account_value
        return (f"BacktestResult({self.name!r}, {v.index[0]} .. {v.index[-1]}, {len(v)} bars, "
                f"final value {v.iloc[-1]:,.2f}, baselines {list(self.baselines)}"
                f"{', execution=close (optimistic)' if self.optimistic else ''})")


def drawdown_durations(values: pd.Series) -> tuple[int, float]:
    """(longest drawdown, time to recover) of a value series, in bars.

    Longest drawdown: the most consecutive bars with v_t < max_{s<=t} v_s (under water), whether
    or not the stretch has ended. Time to recover: bars from the trough of the maximum drawdown
    (the bar of the lowest v_t / max_{s<=t} v_s) to the first later bar with v back at that peak's
    value; NaN if it never got back, 0 without a drawdown.
    """
    v = check_numeric(values, "values")
    peak = np.maximum.accumulate(v)
    under = v < peak
    runs = np.diff(np.flatnonzero(np.diff(np.r_[False, under, False])))[::2]  # lengths of the True runs
    trough = int(np.argmin(v / peak))
    if not under[trough]:
        return int(runs.max(initial=0)), 0.0
    back = np.flatnonzero(v[trough:] >= peak[trough])
    return int(runs.max(initial=0)), float(back[0]) if len(back) else float("nan")


# ---------------------------------------------------------------------------- baselines
def _check_close(close: pd.DataFrame, what: str) -> np.ndarray:
    """The (D, S) prices of a dates x tickers frame, after the checks the env makes too."""
    if not isinstance(close, pd.DataFrame) or isinstance(close.columns, pd.MultiIndex):
        got = "MultiIndex columns" if isinstance(close, pd.DataFrame) else type(close).__name__
        hint = ("; pass the env's prices, e.g. market.close['test'] (or run a policy on the env: "
                "finance.backtest(finance.BuyAndHoldPolicy(env, weights), env))" if hasattr(close, "step") else "")
        raise ValueError(f"{what} must be a dates x tickers DataFrame of closes (prices['close']), got {got}{hint}")
    check_dates(close.index, what)
    values = check_numeric(close, what)
    check_prices(values, close.index, list(close.columns), what)
    return values


def _check_weights(weights: Iterable[float] | np.ndarray, n: int) -> np.ndarray:
    w = np.asarray(list(weights) if not isinstance(weights, np.ndarray) else weights, dtype=np.float64)
    # 1e-6: weights that passed through a float32 env (twenty 0.05s sum to 1.0000001 there) are still fine
    if w.shape != (n,) or not np.isfinite(w).all() or (w < 0).any() or w.sum() > 1 + 1e-6:
        raise ValueError(f"weights must be {n} finite non-negative numbers summing to <= 1, got {w}")
    return w


def _check_cash_and_costs(initial_cash: float, cost_pct: float) -> tuple[float, float]:
    initial_cash, cost_pct = check_number(initial_cash, "initial_cash"), check_number(cost_pct, "cost_pct")
    if initial_cash <= 0 or not 0 <= cost_pct < 1:
        raise ValueError(f"need initial_cash > 0 and cost_pct in [0, 1), got {initial_cash} and {cost_pct}")
    return initial_cash, cost_pct


def buy_and_hold(close: pd.DataFrame, weights: Iterable[float] | np.ndarray, initial_cash: float = 1e6,
                 cost_pct: float = 1e-3, name: str = "buy_and_hold",
                 bars_per_year: int | None = None) -> BacktestResult:
    """Spend ``weights[s] * initial_cash`` on stock s at the first close, hold to the end.

    Whole shares, rounded down: ``floor(w * cash / (price * (1 + cost_pct)))``, so the cost is
    inside the budget; the rounding remainder stays cash. The same arithmetic as the env fed
    ``BuyAndHoldPolicy``, which is how ``tests/test_backtest.py`` cross-checks the env.
    """
    p = _check_close(close, "close")  # first: a wrong first argument is named, not read for its .shape
    w = _check_weights(weights, close.shape[1])
    initial_cash, cost_pct = _check_cash_and_costs(initial_cash, cost_pct)
    shares = np.floor(w * initial_cash / (p[0] * (1.0 + cost_pct)))
    spent = float(shares @ p[0])
    cash = initial_cash - spent * (1.0 + cost_pct)
    value = cash + p @ shares
    value[0] = initial_cash  # before the first trade
    positions = pd.DataFrame(np.broadcast_to(shares, p.shape), index=close.index, columns=close.columns)
    trades = pd.DataFrame(0.0, index=close.index, columns=close.columns)
    trades.iloc[0] = shares
    costs = pd.Series(0.0, index=close.index)
    costs.iloc[0] = spent * cost_pct
    return BacktestResult(name, pd.Series(value, index=close.index, name=name), positions, trades, costs, close,
                          bars_per_year=bars_per_year)


def min_variance_weights(train_close: pd.DataFrame) -> np.ndarray:
    """Long-only minimum-variance weights (sum 1) from the daily returns of ``train_close``.

    Solves ``min w' C w  s.t.  sum w = 1, w >= 0`` with scipy's SLSQP on the sample covariance.
    """
    from scipy.optimize import minimize

    prices = _check_close(train_close, "train_close")
    rets = prices[1:] / prices[:-1] - 1.0
    if len(rets) < 2 * train_close.shape[1]:
        raise ValueError(f"min-variance needs at least {2 * train_close.shape[1]} training days for "
                         f"{train_close.shape[1]} stocks, got {len(rets)}; pass a longer train_close")
    cov = np.cov(rets, rowvar=False) * 1e4  # per-cent^2 units: better conditioned for SLSQP
    n = cov.shape[0]
    res = minimize(lambda w: w @ cov @ w, np.full(n, 1.0 / n), jac=lambda w: 2 * cov @ w, method="SLSQP",
                   bounds=[(0.0, 1.0)] * n, constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1.0}],
                   options={"ftol": 1e-12, "maxiter": 500})
    if not res.success:
        raise RuntimeError(f"min-variance optimisation failed: {res.message}")
    w = np.clip(res.x, 0.0, None)
    return w / w.sum()


def index_baseline(benchmark: pd.Series, dates: pd.Index, initial_cash: float = 1e6, name: str = "index",
                   bars_per_year: int | None = None) -> BacktestResult:
    """A benchmark close series on ``dates`` (last known close on each date), rescaled to start at
    ``initial_cash``. No costs: an index is not traded."""
    check_numeric(benchmark, "benchmark")
    b = benchmark.sort_index()
    if b.index.has_duplicates:
        check_dates(b.index, "benchmark")
    b = b.reindex(b.index.union(dates)).ffill().reindex(dates)
    if b.isna().any():
        raise ValueError(f"benchmark has no value on or before {dates[0]}; pass a benchmark covering the test dates")
    check_prices(b.to_numpy(dtype=np.float64)[:, None], dates, [b.name or "benchmark"], "benchmark")
    return BacktestResult(name, (b / b.iloc[0] * initial_cash).rename(name), bars_per_year=bars_per_year)


# ---------------------------------------------------------------------------- policies
class BuyAndHoldPolicy:
    """Trade each account to target weights (equal by default) on the first bar of its episode,
    then hold.

    Targets are whole shares ``floor(w * budget / (price * (1 + cost_pct)))``, as in
    ``buy_and_hold``. The budget is the account's cash by default: buy with the starting cash,
    never sell. With ``rebalance=True`` (``finance.walk_forward.RebalancePolicy``) it is the
    account's value, and positions above target are sold down: the walk-forward form, which
    rebalances a carried account at each window's start. From all cash the two are the same.
    Orders above ``max_trade_shares`` are spread over the first bars; after a turbulence
    liquidation it buys back toward the same targets.

    A policy sees only what the env shows: it is called ``policy(obs, info)`` with the info of
    the env's latest ``reset`` or ``step``, and reads the exact account there
    (``info["account"]``: cash, holdings, prices, first_bar); ``backtest`` and ``walk_forward``
    pass it. ``env`` gives only the sizes and rules (``num_envs``, ``num_stocks``, ``cost_pct``,
    ``max_trade_shares``, dtype, device); ``backtest`` and ``walk_forward`` re-make the policy
    for the env they run (``for_env``), so the training env will do.
    """

    def __init__(self, env: StockTradingVecEnv, weights: Iterable[float] | None = None, rebalance: bool = False):
        S = env.num_stocks
        w = np.full(S, 1.0 / S) if weights is None else _check_weights(weights, S)
        self.weights = torch.as_tensor(w, dtype=env.dtype, device=env.device)  # (S,)
        self.rebalance = bool(rebalance)
        self.cost_pct, self.max_trade_shares = env.cost_pct, env.max_trade_shares
        self.target = torch.zeros(env.num_envs, S, dtype=env.dtype, device=env.device)  # (N, S) shares

    def for_env(self, env: StockTradingVecEnv) -> "BuyAndHoldPolicy":
        """The same policy (type, weights, budget) for ``env``, with no targets yet."""
        return type(self)(env, self.weights.cpu().numpy(), rebalance=self.rebalance)

    def __call__(self, obs: torch.Tensor, info: dict[str, Any] | None = None) -> torch.Tensor:
        account = None if info is None else info.get("account")
        if account is None:
            raise TypeError(f"{type(self).__name__} trades exact share counts, so it needs the env's info as well "
                            "as the observation: call policy(obs, info) with the info of the env's latest reset or "
                            "step (backtest and walk_forward do)")
        cash, holdings, prices = account["cash"], account["holdings"], account["prices"]
        budget = cash + torch.linalg.vecdot(holdings, prices) if self.rebalance else cash  # (N,)
        fresh = torch.floor(self.weights * budget[:, None] / (prices * (1.0 + self.cost_pct)))
        self.target = torch.where(account["first_bar"][:, None], fresh, self.target)
        low = -1.0 if self.rebalance else 0.0  # buy-and-hold never sells
        return ((self.target - holdings) / self.max_trade_shares).clamp(low, 1.0).float()


# ---------------------------------------------------------------------------- the backtest
def _as_action(a: Any, env: StockTradingVecEnv | PortfolioVecEnv) -> torch.Tensor:
    """The policy's output as a float32 (1, A) tensor, or an error saying what it returned."""
    S = env.single_action_space.shape[0]  # the stocks; the stocks and cash for a long-only PortfolioVecEnv
    expected = (f"actions of shape (1, {S}) in [-1, 1], a tensor or an array (({S},) is accepted), for obs "
                f"of shape (1, {env.single_observation_space.shape[0]})")
    if a is None:
        raise TypeError(f"the policy returned None; it must return {expected}. Is a `return` missing?")
    if not isinstance(a, torch.Tensor):
        try:
            a = torch.as_tensor(np.asarray(a, dtype=np.float32), device=env.device)
        except (TypeError, ValueError):
            raise TypeError(f"the policy returned {type(a).__name__} {str(a)[:80]!r}, not numbers; it must return "
                            f"{expected}") from None
    if a.dim() == 1:
        a = a.unsqueeze(0)  # a single-account callable may return (S,)
    if tuple(a.shape) != (1, S):
        raise ValueError(f"the policy returned actions of shape {tuple(a.shape)}; expected {expected}")
    return a.float() if a.dtype != torch.float32 else a


def _policy_on(policy: Any, env: StockTradingVecEnv) -> Callable[[torch.Tensor, dict[str, Any]], Any]:
    """``policy`` as a function of (obs, info) on ``env``: a ``BuyAndHoldPolicy``, re-made for
    ``env``, reads the info; anything else (an agent's deterministic ``act``, a callable) sees the
    observation only."""
    if isinstance(policy, BuyAndHoldPolicy):
        return policy.for_env(env)
    act = as_policy(policy)
    return lambda obs, info: act(obs)


def play_episode(policy: Any, env: StockTradingVecEnv, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """One episode of ``policy`` (anything ``backtest`` runs) on a one-account ``env`` from its first
    bar to its last, as every backtest runs it (``backtest``; ``walk_forward`` per window, from a
    carried account via ``options``): numpy arrays ``values`` (D,), ``holdings``, ``trades``
    (D-1, S), ``costs``, ``turnover`` (D-1,), and the last step's ``info``."""
    act = _policy_on(policy, env)
    obs, info = env.reset(options=options)
    values, rows = [info["account_value"]], {k: [] for k in ("holdings", "trades", "costs", "turnover")}
    for _ in range(env.num_days - 1):
        obs, _, _, truncated, info = env.step(_as_action(act(obs, info), env))
        values.append(info["account_value"])
        for key, row in rows.items():
            row.append(info[key])
    if not bool(truncated.all()):
        raise RuntimeError("the episode did not end on its last bar; this is a bug in the env")
    out = {key: torch.cat(row).cpu().numpy() for key, row in rows.items()}
    return {**out, "values": torch.cat(values).cpu().numpy(), "info": info}


def _check_train_close(train_close: pd.DataFrame, tickers: list[str]) -> None:
    """The minimum-variance baseline is fitted on ``train_close``: it must hold every ticker traded."""
    missing = [t for t in tickers if t not in getattr(train_close, "columns", ())]
    if missing:
        raise ValueError(f"train_close lacks tickers {missing[:8]} of the backtest; pass the training window's "
                         "closes of the same tickers (market.close['train'])")


@torch.no_grad()
def backtest(policy: Any, env_or_close: StockTradingVecEnv | pd.DataFrame, features: pd.DataFrame | None = None,
             turbulence: pd.Series | None = None, *, benchmark: pd.Series | None = None,
             train_close: pd.DataFrame | None = None, name: str = "policy", bars_per_year: int | None = None,
             baselines: bool = True, execution: str | None = None, costs: Any = None,
             **env_kwargs: Any) -> BacktestResult:
    """Run ``policy`` deterministically from the first day to the last; return a ``BacktestResult``.

    Args:
        policy: an agent (its deterministic ``act`` is used), an ensemble, or any callable
            ``obs (1, obs_dim) -> actions (1, S)`` (a tensor, or an array; ``(S,)`` is accepted).
            A ``BuyAndHoldPolicy`` is re-made for the evaluation env and reads its info.
        env_or_close: a ``StockTradingVecEnv`` (its data and trading rules are reused in a
            deterministic one-account copy, ``env.evaluation_env()``), or the test period's
            closes (dates x tickers), with ``features``/``turbulence``/``env_kwargs`` for the env.
            A ``PortfolioVecEnv`` runs ``backtest_portfolio`` (its baselines are rebalanced).
        benchmark: a close series for the ``index`` baseline (e.g. ``finance.data.load_benchmark``).
        train_close: the training window's closes for the ``min_variance`` baseline.
        baselines: False skips all baselines.
        bars_per_year: for annualising the metrics; None infers it from the env's dates (hourly
            bars: 1764), and the baselines use the same number.
        execution, costs: the env's fill timing (``"close"``, ``"next_close"``, ``"next_open"``)
            and cost model (a ``finance.costs`` model, or a number: a proportional rate) for this
            backtest; None keeps the env's (or the env's default). The baselines trade under the
            same rules: with anything but the original model (fills at the observed close,
            proportional costs, cash account) they run as ``BuyAndHoldPolicy`` through the same env.
    """
    if isinstance(env_or_close, PortfolioVecEnv):
        if any(x is not None for x in (features, turbulence, costs)) or env_kwargs:
            raise ValueError("backtest(policy, portfolio_env) takes the env's own data and rules: pass features and "
                             "costs (cost_pct) when building the PortfolioVecEnv (execution= is the exception)")
        return backtest_portfolio(policy, env_or_close, benchmark=benchmark, train_close=train_close, name=name,
                                  bars_per_year=bars_per_year, baselines=baselines, execution=execution)
    rules = {key: value for key, value in (("execution", execution), ("costs", costs)) if value is not None}
    if isinstance(env_or_close, StockTradingVecEnv):
        if features is not None or turbulence is not None or env_kwargs:
            raise ValueError("pass features, turbulence and env settings when building the env, not to "
                             "backtest(env, ...) (execution= and costs= are the exceptions)")
        env = env_or_close.evaluation_env(**rules)
    else:
        env = StockTradingVecEnv(env_or_close, features, turbulence, num_envs=1, **rules, **env_kwargs)
    if baselines and train_close is not None:  # before the run, not after it
        _check_train_close(train_close, env.tickers)
    run = play_episode(policy, env)
    dates, tickers = env.dates, env.tickers
    S = env.num_stocks
    h = run["holdings"]  # (D-1, S)
    positions = pd.DataFrame(np.vstack([h, h[-1:]]), index=dates, columns=tickers)  # held through the last day
    tr = pd.DataFrame(np.vstack([run["trades"], np.zeros((1, S))]), index=dates, columns=tickers)
    co = pd.Series(np.append(run["costs"], 0.0), index=dates, name="costs")
    value = pd.Series(run["values"], index=dates, name=name)
    close = env.close_frame()
    result = BacktestResult(name, value, positions, tr, co, close, bars_per_year=bars_per_year,
                            execution=env.execution)
    bars_per_year = result.bars_per_year  # inferred once, shared by the baselines
    if baselines:
        ic, c = env.initial_cash, env.cost_pct

        def hold(weights: np.ndarray, label: str) -> BacktestResult:
            if env.plain_market:  # the closed form, as before
                return buy_and_hold(close, weights, ic, c, label, bars_per_year)
            # Through the env, in one order (2**24: float32 actions carry every share count below it).
            same_rules = env.evaluation_env(max_trade_shares=2**24, turbulence_threshold=None)
            return backtest(BuyAndHoldPolicy(same_rules, weights), same_rules, name=label,
                            bars_per_year=bars_per_year, baselines=False)

        result.baselines["equal_weight"] = hold(np.full(S, 1.0 / S), "equal_weight")
        if train_close is not None:
            result.baselines["min_variance"] = hold(min_variance_weights(train_close[tickers]), "min_variance")
        if benchmark is not None:
            result.baselines["index"] = index_baseline(benchmark, dates, ic, "index", bars_per_year)
    if env.financing is not None:  # the metrics' risk-free rate is the cash rate the account earned
        rf = env.financing.risk_free(dates)
        for r in (result, *result.baselines.values()):
            r.risk_free = rf
    return result


# ---------------------------------------------------------------------------- target-weight portfolios
def rebalanced(close: pd.DataFrame, weights: Iterable[float] | np.ndarray, cost_pct: float = 1e-3,
               execution: str = "next_close", name: str = "rebalanced",
               bars_per_year: int | None = None) -> BacktestResult:
    """Rebalance to the constant ``weights`` (one per stock, the rest in cash) at every close, paying
    ``cost_pct`` of the traded value, from 1.0 in cash: the constant-mix portfolio as ``PortfolioVecEnv``
    trades it (``execution="next_close"``, the default: the first trade is at day 1's close, as a
    one-bar delay puts it; ``"close"``: from day 0's, optimistic).

    Closed form, with ``g_d = close[d+1] / close[d]`` and ``G_d = w . g_d + w_cash`` the mix's growth
    over day d: before the trade at close d the prices have drifted the stock weights to
    ``w' = w * g_{d-1} / G_{d-1}`` (all cash before the first trade); the fraction of the account left
    after costs, ``mu_d``, solves ``mu = 1 - c * sum_i |mu * w_i - w'_i|`` (Jiang et al. 2017;
    ``finance.portfolio_env.rebalance_remainder``), and ``V_{d+1} = V_d * mu_d * G_d``. Positions
    are shares of the unit account, not rounded; no trade on the last day.
    """
    p = _check_close(close, "close")  # first: a wrong first argument is named, not read for its .shape
    w = _check_weights(weights, close.shape[1])
    _, cost_pct = _check_cash_and_costs(1.0, cost_pct)
    if execution not in ("close", "next_close"):
        raise ValueError(f"execution must be 'close' or 'next_close' (PortfolioVecEnv's), got {execution!r}")
    D, S = p.shape
    first = 0 if execution == "close" else 1  # the first trade day
    g = p[1:] / p[:-1]  # (D-1, S)
    growth = g @ w + (1.0 - w.sum())  # (D-1,) the rebalanced mix over day d
    drifted = np.zeros((D - 1, S))  # stock weights before the trade at close d
    drifted[first + 1:] = (w * g / growth[:, None])[first:D - 2]
    mu = np.ones(D - 1)
    mu[first:] = rebalance_remainder(torch.as_tensor(np.broadcast_to(w, (D - 1 - first, S)).copy()),
                                     torch.as_tensor(drifted[first:]), cost_pct, float(w.sum())).numpy()
    factor = np.where(np.arange(D - 1) >= first, mu * growth, 1.0)  # all cash before the first trade
    value = np.r_[1.0, np.cumprod(factor)]
    traded = np.arange(D - 1) >= first
    costs = np.r_[np.where(traded, value[:-1] * (1.0 - mu), 0.0), 0.0]
    positions = np.zeros((D, S))
    positions[:-1][traded] = ((value[:-1] * mu)[:, None] * w / p[:-1])[traded]
    positions[-1] = positions[-2]
    held = pd.DataFrame(positions, index=close.index, columns=close.columns)
    return BacktestResult(name, pd.Series(value, index=close.index, name=name), held, held.diff().fillna(held),
                          pd.Series(costs, index=close.index, name="costs"), close, bars_per_year=bars_per_year,
                          execution=execution)


def play_portfolio(policy: Any, env: PortfolioVecEnv) -> dict[str, np.ndarray]:
    """One episode of ``policy`` on a one-account ``PortfolioVecEnv`` from its first day to its last,
    arranged by the day each trade fills (``BacktestResult``'s conventions): ``values`` (D,) at each
    close before its trade, ``holdings`` (D, S) shares after it, ``costs`` (D,). With
    ``execution="next_close"`` step k trades at close k + 1, and the last step's trade, at the last
    close, is left out: the backtest ends before it. A long-short account that goes bust stays at
    its value, with no positions, to the end."""
    act = as_policy(policy)
    D, S = env.num_days, env.num_stocks
    lag = int(env.execution == "next_close")
    values, holdings, costs = np.ones(D), np.zeros((D, S)), np.zeros(D)
    obs, _ = env.reset()
    for k in range(D - 1):
        obs, _, terminated, _, info = env.step(_as_action(act(obs), env))
        cost = info["costs"].item()
        values[k + 1] = info["account_value"].item() + lag * cost  # before the trade at close k + 1
        if k + lag < D - 1:
            costs[k + lag], holdings[k + lag] = cost, info["holdings"][0].cpu().numpy()
        if bool(terminated.any()):
            values[k + 1:], holdings[k + 1:], costs[k + 1:] = values[k + 1], 0.0, 0.0
            break
    else:
        holdings[-1] = holdings[-2]  # held through the last day
    return {"values": values, "holdings": holdings, "costs": costs}


@torch.no_grad()
def backtest_portfolio(policy: Any, env: PortfolioVecEnv, *, benchmark: pd.Series | None = None,
                       train_close: pd.DataFrame | None = None, name: str = "policy",
                       bars_per_year: int | None = None, baselines: bool = True,
                       execution: str | None = None) -> BacktestResult:
    """``backtest`` for a ``PortfolioVecEnv``: ``policy`` (an agent or a callable ``obs -> actions``)
    through ``env.evaluation_env()`` from the first day to the last, in units of the initial value 1.0.

    The result is a ``BacktestResult`` like the stock env's (``metrics``, ``compare``, ``plot``):
    ``positions`` in shares of value 1.0, ``trades`` their changes, ``costs`` the env's; ``weights()``
    are the target weights of each trade. Each step's borrow fee (long-short) is in the account
    value, not in ``costs``. Baselines, under the env's ``cost_pct`` and execution:
    ``equal_weight`` (``rebalanced`` to 1/S in each stock), ``min_variance`` (rebalanced to
    ``min_variance_weights(train_close)``, with ``train_close``), ``index`` (with ``benchmark``).
    ``execution`` (``"close"``, ``"next_close"``) overrides the env's.
    """
    if not isinstance(env, PortfolioVecEnv):
        raise TypeError(f"backtest_portfolio runs a PortfolioVecEnv, got {type(env).__name__}; use backtest for "
                        "a StockTradingVecEnv")
    env = env.evaluation_env(**({} if execution is None else {"execution": execution}))
    if baselines and train_close is not None:  # before the run, not after it
        _check_train_close(train_close, env.tickers)
    run = play_portfolio(policy, env)
    close, dates = env.close_frame(), env.dates
    positions = pd.DataFrame(run["holdings"], index=dates, columns=env.tickers)
    result = BacktestResult(name, pd.Series(run["values"], index=dates, name=name), positions,
                            positions.diff().fillna(positions), pd.Series(run["costs"], index=dates, name="costs"),
                            close, bars_per_year=bars_per_year, execution=env.execution)
    if baselines:
        rules = dict(cost_pct=env.cost_pct, execution=env.execution, bars_per_year=result.bars_per_year)
        S = env.num_stocks
        result.baselines["equal_weight"] = rebalanced(close, np.full(S, 1.0 / S), name="equal_weight", **rules)
        if train_close is not None:
            w = min_variance_weights(train_close[list(env.tickers)])
            result.baselines["min_variance"] = rebalanced(close, w, name="min_variance", **rules)
        if benchmark is not None:
            result.baselines["index"] = index_baseline(benchmark, dates, 1.0, "index", result.bars_per_year)
    return result


def compare(*items: BacktestResult | pd.Series | dict, include_baselines: bool = True,
            bars_per_year: int | None = None, risk_free: float | pd.Series | None = None,
            benchmark: BacktestResult | pd.Series | str | None = None, risk: bool = False,
            var_level: float = VAR_LEVEL) -> pd.DataFrame:
    """A metrics table, one row per strategy.

    ``items``: ``BacktestResult`` objects (with their baselines unless ``include_baselines`` is
    False), account-value or price series (named by ``series.name``), or dicts name -> either.
    Rows with the same name keep the first. ``bars_per_year`` applies to the series; None infers
    it from each series' dates. A ``BacktestResult`` keeps its own.

    ``risk_free``, ``benchmark``, ``risk`` and ``var_level`` are those of
    ``BacktestResult.metrics``, the same for every row; a baseline's name as ``benchmark``
    (``"equal_weight"``) is the first item's baseline of that name, and its own row reads beta 1.
    """
    rows: dict[str, pd.Series] = {}
    if isinstance(benchmark, str):
        owners = [i for i in items if isinstance(i, BacktestResult) and benchmark in i.baselines]
        if not owners:
            raise ValueError(f"no item has a baseline {benchmark!r}; pass a BacktestResult or a Series as benchmark")
        benchmark = owners[0].baselines[benchmark]
    options = dict(risk_free=risk_free, benchmark=benchmark, risk=risk, var_level=var_level)

    def add(name: str | None, item: Any) -> None:
        if isinstance(item, BacktestResult):
            rows.setdefault(name or item.name, item.metrics(**options))
            if include_baselines:
                for b in item.baselines.values():
                    rows.setdefault(b.name, b.metrics(**options))
        elif isinstance(item, pd.Series):
            label = name or (str(item.name) if item.name is not None else f"series_{len(rows)}")
            values = pd.Series(check_numeric(item, f"series {label!r}"), index=item.index, name=item.name)
            rows.setdefault(label, BacktestResult(label, values, bars_per_year=bars_per_year).metrics(**options))
        else:
            raise TypeError(f"compare takes BacktestResult, pd.Series or dict, got {type(item).__name__}")

    for item in items:
        if isinstance(item, dict):
            for k, v in item.items():
                add(str(k), v)
        else:
            add(None, item)
    if not rows:  # compare() or compare({}): an empty table would fail below on its missing columns
        raise ValueError("compare needs at least one strategy: BacktestResult objects, account-value series, or a "
                         "dict name -> either, e.g. compare(result) or compare({'ppo': result, 'index': prices})")
    table = pd.DataFrame(rows).T
    table.index.name = "strategy"
    columns = list(METRICS) + (list(BENCHMARK_METRICS) if benchmark is not None else []) + \
        (list(risk_metric_names(var_level)) if risk else [])
    return table[columns]
