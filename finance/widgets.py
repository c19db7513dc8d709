"""Backtests in a notebook: the figure ``BacktestResult.plot`` returns, the one number format of
the metrics, and a small ipywidgets view (``backtest_view``, needs the ``notebooks`` extra).

``NotebookFigure`` is a matplotlib ``Figure`` built without pyplot (no global figure state: a
script or a test can make hundreds) that a Jupyter kernel shows **once, whatever the cell ends
with**: as the cell's value (``result.plot()``), or at the end of the cell that made it when it is
not the value (``result.plot();``, ``fig = result.plot()``), as the inline backend does for pyplot
figures. The same holds for a lesson's cells run one by one inside a solution notebook
(``podracer.course.run_lesson``: each of them ends as a cell). Outside a kernel it is a plain
``Figure``: ``fig.savefig(path)``.
"""

from __future__ import annotations

import io
import math
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from finance.backtest import BacktestResult, compare

# ---------------------------------------------------------------------------- the figure
# Figures made since the last cell ended and not shown yet: shown when it ends. Held here until then
# (`result.plot();` keeps no other reference); one that is shown before leaves the list.
_PENDING: list["NotebookFigure"] = []


class NotebookFigure(Figure):
    """A ``Figure`` that a Jupyter kernel shows once: as the cell's value, or when the cell ends.

    ``display(fig)`` shows it again (you asked for it); its PNG is ``fig._repr_png_()``.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._shown = False
        _show_when_the_cell_ends(self)

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png")
        return buffer.getvalue()

    def _ipython_display_(self) -> None:
        from IPython.display import display

        self._shown = True
        _PENDING[:] = [fig for fig in _PENDING if fig is not self]
        display({"image/png": self._repr_png_(), "text/plain": repr(self)}, raw=True)


def _show_when_the_cell_ends(fig: NotebookFigure) -> None:
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:  # a script, a test, a terminal: nothing to show
        return
    if _show_pending not in shell.events.callbacks["post_run_cell"]:
        shell.events.register("post_run_cell", _show_pending)
    _PENDING.append(fig)


def _show_pending(result: Any = None) -> None:
    """IPython's ``post_run_cell`` event: show the cell's figures that were not its value."""
    from IPython.display import display

    pending = list(_PENDING)
    _PENDING.clear()
    for fig in pending:
        if not fig._shown:
            display(fig)


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
