"""Backtests in a notebook: the figure ``BacktestResult.plot`` returns, the one number format of
the metrics, and a small ipywidgets view (``backtest_view``, needs the ``notebooks`` extra).

``NotebookFigure`` (defined in the leaf module ``finance.notebook_figure``, importable from here
too) is a matplotlib ``Figure`` that a Jupyter kernel shows once, whatever the cell ends with, and
that is a plain ``Figure`` outside a kernel.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from finance.backtest import BacktestResult, compare
from finance.notebook_figure import NotebookFigure  # noqa: F401 (re-exported: a public name here)

# ---------------------------------------------------------------------------- the numbers
# One format per metric, for every table and line the panels show.
METRIC_FORMATS = {
    "cumulative_return": "{:.1%}", "annual_return": "{:.1%}", "annual_volatility": "{:.1%}", "sharpe": "{:.2f}",
    "sortino": "{:.2f}", "max_drawdown": "{:.1%}", "calmar": "{:.2f}", "turnover": "{:.2f}", "costs": "{:.2%}",
}
OTHER_FORMAT = "{:.3f}"  # a metric without its own
NOT_A_NUMBER = "n/a"  # e.g. the costs of an index, which is not traded


def format_metric(name: str, value: float) -> str:
    """``value`` as the tables show metric ``name`` (``"sharpe"``: 1.23; ``"cumulative_return"``: 98.9%)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NOT_A_NUMBER
    return METRIC_FORMATS.get(name, OTHER_FORMAT).format(value)


def styled_metrics(table: pd.DataFrame):
    """A metrics table (``compare``'s, one row per strategy) as a pandas ``Styler`` in those formats;
    ``.data`` is the numbers."""
    return table.style.format({c: (lambda v, c=c: format_metric(c, v)) for c in table.columns})


# ---------------------------------------------------------------------------- the view
def backtest_view(*results: BacktestResult):
    """``VBox([HBox([strategy dropdown, date-window slider]), Output])``; the output shows
    ``compare(result.between(start, end))`` and ``result.between(start, end).plot()`` and is
    redrawn when either control changes. All results must share their dates."""
    import ipywidgets as widgets
    from IPython.display import display

    if not results:
        raise ValueError("backtest_view needs at least one BacktestResult")
    by_name = {r.name: r for r in results}
    dates = results[0].account_value.index
    choose = widgets.Dropdown(options=list(by_name), description="strategy")
    labels = [(str(d.date()) if hasattr(d, "date") else str(d), d) for d in dates]
    window = widgets.SelectionRangeSlider(options=labels, index=(0, len(dates) - 1), description="window",
                                          layout=widgets.Layout(width="60%"))
    out = widgets.Output()

    def redraw(*_):
        start, end = window.value
        part = by_name[choose.value].between(start, end)
        out.clear_output(wait=True)
        with out:
            display(styled_metrics(compare(part)))
            display(part.plot())

    choose.observe(redraw, names="value")
    window.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox([choose, window]), out])
