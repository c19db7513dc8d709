"""A small ipywidgets view of backtests: pick a strategy and a date window, see its metrics
table against the baselines and its plot. Needs the ``notebooks`` extra (ipywidgets)."""

from __future__ import annotations

from finance.backtest import BacktestResult, compare


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
            display(compare(part).style.format("{:.3f}"))
            display(part.plot())

    choose.observe(redraw, names="value")
    window.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox([choose, window]), out])
