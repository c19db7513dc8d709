"""Progress of a running tournament: a tqdm bar in a terminal; in a notebook, a leaderboard table
and a score-vs-time plot refreshed in place (at most every ``every_s`` seconds)."""

from __future__ import annotations

import time
from typing import Any

from tqdm.auto import tqdm

from podracer.tournament.leaderboard import Leaderboard


def in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and "IPKernelApp" in shell.config


class Progress:
    def __init__(self, board: Leaderboard, total: int | None, mode: str | None = "auto", every_s: float = 2.0):
        if mode not in ("auto", "bar", "notebook", None):
            raise ValueError(f"progress must be 'auto', 'bar', 'notebook' or None, got {mode!r}")
        self.board, self.total, self.every_s = board, total, every_s
        self.mode = ("notebook" if in_notebook() else "bar") if mode == "auto" else mode
        self.seen, self.last = -1, 0.0
        self.bar = tqdm(total=total, initial=len(board), unit="gen", dynamic_ncols=True) if self.mode == "bar" else None
        self.handles: list[Any] = []

    def update(self, pods: int, force: bool = False) -> None:
        if self.mode is None:
            return
        n = len(self.board)
        if not force and (n == self.seen or time.monotonic() - self.last < self.every_s):
            return
        self.seen, self.last = n, time.monotonic()
        if self.bar is not None:
            best = self.board.top(1)
            self.bar.update(n - self.bar.n)
            self.bar.set_postfix(best=f"{best[0].score:.1f}" if best else "-", pods=pods)
        elif self.mode == "notebook":
            self._show_notebook(pods)

    def _show_notebook(self, pods: int) -> None:
        import matplotlib.pyplot as plt
        from IPython.display import display

        frame = self.board.to_frame()
        if not len(frame):
            return
        table = frame[["score", "generation", "parent_id", "pod", "global_step", "changes"]].head(5)
        t = (frame["created_at"] - frame["created_at"].min()).dt.total_seconds()
        fig, ax = plt.subplots(figsize=(5, 2.6))
        ax.scatter(t, frame["score"], c=frame["pod"], cmap="tab10", s=14)
        order = t.sort_values().index
        ax.plot(t[order], frame["score"][order].cummax(), color="k", lw=1, drawstyle="steps-post", label="best so far")
        ax.set(xlabel="seconds since the first entry", ylabel="validation score",
               title=f"{len(frame)}/{self.total or '?'} entries, {pods} pods")
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        if not self.handles:
            self.handles = [display(table, display_id=True), display(fig, display_id=True)]
        else:
            self.handles[0].update(table)
            self.handles[1].update(fig)
        plt.close(fig)  # shown through the handle only, not again at the end of the cell

    def close(self, pods: int = 0) -> None:
        self.update(pods, force=True)
        if self.bar is not None:
            self.bar.close()
