"""The interactive backtest: one function that re-runs a backtest from a few controls, and the
ipywidgets panel that calls it.

``run_backtest`` is the logic, testable without a browser: pick a policy (your agents, an
ensemble, or a baseline), a date window inside a split, the cost, the turbulence threshold and
the initial cash; it builds the env for exactly those settings and returns a ``BacktestResult``
with the baselines traded on the same days at the same cost. ``interactive_backtest`` lays the
controls out and redraws the metrics table and the figure when one changes. Sliders send their
value when released (``continuous_update=False``), and results are cached per setting, so a
redraw never queues one backtest per pixel and going back to a setting is instant. The table and
the status line print each metric in one format (``finance.widgets.METRIC_FORMATS``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import pandas as pd
import torch

from finance.backtest import BacktestResult, BuyAndHoldPolicy, backtest, compare, min_variance_weights
from finance.env import StockTradingVecEnv
from finance.market import MarketData
from finance.walk_forward import RebalancePolicy

# Baselines offered next to the user's policies. The first two are policies traded in the same env
# (so they pay the same costs and obey the same turbulence switch); "index" is the market's benchmark
# (the S&P 500 for the bundled sample), which is not traded: costs and the switch leave it unchanged.
BASELINE_POLICIES = ("buy_and_hold", "min_variance", "index")


@dataclasses.dataclass(frozen=True)
class Controls:
    """One setting of the panel: what ``run_backtest`` needs besides the market and the policies."""

    policy: str
    start: pd.Timestamp | None = None  # None: the split's first day
    end: pd.Timestamp | None = None  # None: the split's last day
    cost_pct: float = 1e-3
    turbulence_threshold: float | None = None  # None: the switch is off
    initial_cash: float = 1e6


def policy_names(policies: Mapping[str, Any] | None = None) -> list[str]:
    """The names the panel offers: the user's policies first, then the baselines."""
    names = list(policies or {})
    clash = [n for n in names if n in BASELINE_POLICIES]
    if clash:
        raise ValueError(f"policy names {clash} are taken by the baselines; rename yours (e.g. 'my {clash[0]}')")
    return names + list(BASELINE_POLICIES)


def _window(market: MarketData, split: str, start: Any, end: Any) -> tuple[pd.Timestamp, pd.Timestamp]:
    if split not in market.close:
        raise ValueError(f"unknown split {split!r}; this market has {sorted(market.close)}")
    dates = market.close[split].index
    first, last = dates[0], dates[-1]
    start = first if start is None else pd.Timestamp(start)
    end = last if end is None else pd.Timestamp(end)
    if start > end:
        raise ValueError(f"start {start.date()} is after end {end.date()}: swap them")
    inside = dates[(dates >= start) & (dates <= end)]
    if len(inside) < 2:
        raise ValueError(f"the window {start.date()} .. {end.date()} holds {len(inside)} trading day(s) of the "
                         f"{split!r} split, which runs {first.date()} .. {last.date()}: choose at least two days "
                         f"inside it")
    return inside[0], inside[-1]


def run_backtest(market: MarketData, policies: Mapping[str, Any] | None, controls: Controls,
                 split: str = "test") -> BacktestResult:
    """Backtest ``policies[controls.policy]`` (or a baseline) under ``controls`` on ``split``.

    Args:
        market: from ``finance.prepare_market``; its features and price scale are what the agents
            were trained on.
        policies: name -> policy (an agent, an ``Ensemble``, any ``obs -> actions`` callable).
        controls: the policy's name (a key of ``policies``, or a baseline: ``"buy_and_hold"`` and
            ``"min_variance"`` traded in the same env, ``"index"`` the market's benchmark), the date
            window (inside ``split``), ``cost_pct``,
            ``turbulence_threshold`` (None: off) and ``initial_cash``.
        split: the market split the window lies in.

    Returns:
        The ``BacktestResult`` with the equal-weight, minimum-variance and index baselines over
        the same days, traded with the same cost. For ``"index"`` the index is the result and the
        other two its baselines.
    """
    names = policy_names(policies)
    if controls.policy not in names:
        raise ValueError(f"unknown policy {controls.policy!r}; choose one of {names}")
    # cost_pct, initial_cash and turbulence_threshold are checked where they are used, by the env.
    start, end = _window(market, split, controls.start, controls.end)
    cut = slice(start, end)
    benchmark = market.benchmark[split].loc[cut] if market.benchmark.get(split) is not None else None
    if controls.policy == "index" and benchmark is None:
        raise ValueError(f"this market has no benchmark for the {split!r} split, so no 'index' to show; choose "
                         "another policy, or prepare the market from source='sample' or 'yfinance'")
    env = StockTradingVecEnv(market.close[split].loc[cut], market.features[split].loc[cut],
                             market.turbulence[split].loc[cut], initial_cash=controls.initial_cash,
                             cost_pct=controls.cost_pct, turbulence_threshold=controls.turbulence_threshold,
                             price_scale=market.price_scale, dtype=torch.float32)
    if controls.policy in ("buy_and_hold", "index"):
        policy = BuyAndHoldPolicy(env)
    elif controls.policy == "min_variance":
        policy = RebalancePolicy(env, min_variance_weights(market.close["train"]))
    else:
        policy = policies[controls.policy]
    result = backtest(policy, env, name=controls.policy, benchmark=benchmark, train_close=market.close["train"])
    if controls.policy == "index":  # the index in front, the other baselines beside it
        others = {k: v for k, v in result.baselines.items() if k != "index"}
        return dataclasses.replace(result.baselines["index"], baselines=others)
    return result


def metrics_table(result: BacktestResult):
    """The panel's table: the policy and its baselines, one row each, as a pandas ``Styler`` in the
    formats of the status line (returns, drawdown and costs in %, ratios to two decimals;
    ``finance.widgets.METRIC_FORMATS``). ``.data`` is the numbers."""
    from finance.widgets import styled_metrics  # matplotlib: imported when a notebook needs it

    return styled_metrics(compare(result))


def window_readout(start: Any, end: Any, dates: pd.Index) -> str:
    """The dates slider's readout: its window and how many trading days (rows of ``dates``) it holds."""
    start, end = pd.Timestamp(start), pd.Timestamp(end)
    days = int(((dates >= start) & (dates <= end)).sum())
    return f"{start.date()} .. {end.date()} ({days:,} day{'s' if days != 1 else ''})"


class InteractiveBacktest:
    """The ipywidgets panel. ``display(panel)`` shows it; ``panel.controls()`` is the current
    setting, ``panel.result`` the backtest on screen, ``panel.widgets`` the controls by name,
    ``panel.window_readout`` the label that reads the dates slider. The quantile slider is
    disabled while the turbulence switch is off."""

    def __init__(self, market: MarketData, policies: Mapping[str, Any] | None = None, split: str = "test",
                 cache_size: int = 32):
        try:
            import ipywidgets as widgets
        except ImportError as exc:  # the notebooks extra
            raise ImportError("the interactive backtest needs ipywidgets: pip install \"podracer-rl[notebooks]\"") from exc
        self.market, self.policies, self.split, self.cache_size = market, dict(policies or {}), split, cache_size
        self._cache: dict[Controls, BacktestResult] = {}
        dates = market.close[split].index
        # "index" only where the market has a benchmark to show
        names = [n for n in policy_names(self.policies) if n != "index" or market.benchmark.get(split) is not None]
        self.widgets = {
            "policy": widgets.Dropdown(options=names, value=names[0], description="policy"),
            "window": widgets.SelectionRangeSlider(options=[(str(d.date()), d) for d in dates],
                                                   index=(0, len(dates) - 1), description="dates",
                                                   # its own readout box cuts two dates short: the label
                                                   # beside it (window_readout) reads the window instead
                                                   readout=False, continuous_update=False,
                                                   layout=widgets.Layout(width="65%")),
            "cost_pct": widgets.FloatSlider(value=1e-3, min=0.0, max=0.01, step=5e-4, description="cost",
                                            readout_format=".2%", continuous_update=False),
            "turbulence_on": widgets.Checkbox(value=False, description="turbulence switch"),
            # The threshold in quantiles of the training years' turbulence: 0.99 = FinRL's usual setting.
            "turbulence_quantile": widgets.FloatSlider(value=0.99, min=0.5, max=1.0, step=0.005,
                                                       description="at quantile", readout_format=".3f",
                                                       continuous_update=False, disabled=True),  # switch off
            "initial_cash": widgets.FloatLogSlider(value=1e6, base=10, min=4, max=8, step=0.25,
                                                   description="cash", readout_format=",.0f",
                                                   continuous_update=False),
        }
        self._turbulence_train = market.turbulence["train"]
        self._dates = dates
        self.window_readout = widgets.Label(window_readout(dates[0], dates[-1], dates))
        self.status = widgets.HTML()
        self.table = widgets.Output()
        self.figure = widgets.Output()
        for w in self.widgets.values():
            w.observe(self._on_change, names="value")
        w = self.widgets
        self.panel = widgets.VBox([
            widgets.HBox([w["policy"], w["cost_pct"], w["initial_cash"]]),
            widgets.HBox([w["turbulence_on"], w["turbulence_quantile"]]),
            widgets.HBox([w["window"], self.window_readout]), self.status, self.table, self.figure])
        self.result: BacktestResult | None = None
        self.update()

    def controls(self) -> Controls:
        w = self.widgets
        start, end = w["window"].value
        threshold = (float(self._turbulence_train.quantile(w["turbulence_quantile"].value))
                     if w["turbulence_on"].value else None)
        return Controls(policy=w["policy"].value, start=pd.Timestamp(start), end=pd.Timestamp(end),
                        cost_pct=float(w["cost_pct"].value), turbulence_threshold=threshold,
                        initial_cash=float(w["initial_cash"].value))

    def backtest(self, controls: Controls) -> BacktestResult:
        """``run_backtest`` with a small cache: a setting seen before is not run again."""
        if controls not in self._cache:
            if len(self._cache) >= self.cache_size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[controls] = run_backtest(self.market, self.policies, controls, self.split)
        return self._cache[controls]

    def update(self) -> None:
        """Re-run for the current controls and redraw the table and the figure."""
        from IPython.display import display

        from finance.widgets import format_metric

        controls = self.controls()
        try:
            self.result = self.backtest(controls)
        except ValueError as err:  # a window of one day, say: say so and keep the last drawing
            self.status.value = f"<b>cannot backtest this setting:</b> {err}"
            return
        m = self.result.metrics()
        days = self.result.account_value.index
        costs = ("not traded" if pd.isna(m["costs"])  # the index
                 else f"costs {format_metric('costs', m['costs'])} of the cash")
        self.status.value = (f"<b>{controls.policy}</b>, {days[0].date()} .. {days[-1].date()}: Sharpe "
                             f"{format_metric('sharpe', m['sharpe'])}, return "
                             f"{format_metric('cumulative_return', m['cumulative_return'])}, {costs}")
        self.table.clear_output(wait=True)
        with self.table:
            display(metrics_table(self.result))
        self.figure.clear_output(wait=True)
        with self.figure:
            display(self.result.plot())

    def _on_change(self, change: dict) -> None:
        w = self.widgets
        if change["owner"] is w["turbulence_on"]:
            w["turbulence_quantile"].disabled = not change["new"]  # a threshold only counts with the switch on
        if change["owner"] is w["window"]:
            self.window_readout.value = window_readout(*change["new"], self._dates)
        if change["owner"] is w["turbulence_quantile"] and not w["turbulence_on"].value:
            return  # the threshold moved while the switch is off: nothing to re-run
        self.update()

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.panel)


def interactive_backtest(market: MarketData, policies: Mapping[str, Any] | None = None,
                         split: str = "test") -> InteractiveBacktest:
    """The interactive panel over ``run_backtest``: policy, dates, cost, turbulence switch and
    initial cash; the table and the figure follow. ``policies`` maps names to agents, ensembles
    or callables; the baselines are always offered."""
    return InteractiveBacktest(market, policies, split)
