"""The otter-grader plugin that grades a submission's answers and nothing else.

otter-grader executes a submitted notebook and then runs the hidden tests in the same kernel, so a
cell the student added (``podracer.course._results.update(...)``, a patched check) or a lesson cell
the student edited would run before the tests. Like nbgrader, which overwrites its locked cells
from the release before it grades, this plugin rebuilds the notebook before otter executes it:

- every cell comes from the released student notebook, as released (the release step stores that
  notebook in the autograder's ``otter_config.json``, under this plugin's name);
- only the *answer cells* (those otter tags ``otter_answer_cell``) come from the submission, by
  cell id, else by their order among the submission's answer cells; a missing one stays as
  released (unanswered);
- an answer cell that reaches into the grader or the interpreter (otter, ``podracer.course``,
  ``__code__``, ``sys.modules``, builtins, ``exec``) is not run: it stays as released, and the
  report names it, for the lecturer to look at.

Cells a student added are therefore not run: the lessons say so ("work in the answer cells").
"""

from __future__ import annotations

import copy
import re
from typing import Any

from otter.plugins import AbstractOtterPlugin

ANSWER_TAG = "otter_answer_cell"
# What an answer to an exercise has no reason to touch: the grader, the checks, the interpreter's machinery.
SUSPICIOUS = re.compile(
    r"\botter\b|podracer\s*\.\s*course|from\s+podracer\s+import\s+course|\b_results\b|__code__|__globals__"
    r"|\bsys\s*\.\s*modules\b|\bbuiltins\b|__builtins__|\bimportlib\b|(?<![\w.])(?:exec|eval|compile)\s*\("
    r"|\bgc\s*\.\s*get_referr|\bctypes\b")


def _is_answer(cell: dict[str, Any]) -> bool:
    return ANSWER_TAG in cell.get("metadata", {}).get("tags", [])


def _source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return source if isinstance(source, str) else "".join(source)


def rebuild(released: dict[str, Any], submission: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The released notebook with the submission's answer cells in it, and what was noticed on the way."""
    notebook = copy.deepcopy(released)
    submitted = [c for c in submission.get("cells", []) if _is_answer(c)]
    by_id = {c.get("id"): c for c in submitted if c.get("id")}
    notes: list[str] = []
    order = 0
    for cell in notebook["cells"]:
        if not _is_answer(cell):
            continue
        answer = by_id.get(cell.get("id"))
        if answer is None and order < len(submitted):
            answer = submitted[order]
        order += 1
        if answer is None:
            notes.append(f"answer cell {order} is missing from the submission: graded as unanswered")
            continue
        text = _source(answer)
        found = SUSPICIOUS.search(text) if cell.get("cell_type") == "code" else None
        if found:
            notes.append(f"answer cell {order} was not run: it refers to {found.group(0)!r}, which an answer has "
                         f"no reason to touch (look at it: {text.strip().splitlines()[0][:80]!r})")
            continue
        cell["source"] = text
    return notebook, notes


class LockedCells(AbstractOtterPlugin):
    """``before_execution``: the submission rebuilt by :func:`rebuild`; ``generate_report``: its notes."""

    def __init__(self, submission_path: str, submission_metadata: dict, plugin_config: dict):
        self.submission_path, self.submission_metadata, self.plugin_config = (
            submission_path, submission_metadata, plugin_config or {})
        self.notes: list[str] = []

    def before_execution(self, submission: Any) -> Any:
        released = self.plugin_config.get("notebook")
        if not released:
            raise ValueError("podracer.course.otter_plugin.LockedCells needs the released notebook in its config "
                             "(the course's release step writes it): rebuild the autograder with `make course`")
        if isinstance(submission, str):
            raise ValueError("this autograder grades notebooks (.ipynb), not scripts")
        notebook, self.notes = rebuild(released, dict(submission))
        import json

        import nbformat

        # through JSON: nbformat's reader joins the stored lists of lines into the strings nbclient runs
        return nbformat.reads(json.dumps(notebook), as_version=4)

    def generate_report(self) -> str:
        return "\n".join(self.notes) if self.notes else "every answer cell was run"
