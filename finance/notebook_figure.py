"""``NotebookFigure``: a matplotlib ``Figure`` built without pyplot (no global figure state: a script
or a test can make hundreds) that a Jupyter kernel shows **once, whatever the cell ends with**: as
the cell's value (``result.plot()``), or at the end of the cell that made it when it is not the
value (``result.plot();``, ``fig = result.plot()``), as the inline backend does for pyplot figures.
The same holds for a lesson's cells run one by one inside a solution notebook
(``podracer.course.run_lesson``: each of them ends as a cell). Outside a kernel it is a plain
``Figure``: ``fig.savefig(path)``.

A leaf module (matplotlib and IPython only): ``finance.backtest`` draws on it and
``finance.widgets`` re-exports it, so neither imports the other for it.
"""

from __future__ import annotations

import io
from typing import Any

from matplotlib.figure import Figure

__all__ = ["NotebookFigure"]

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
