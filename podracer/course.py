"""Exercise checks for the course notebooks.

Every notebook in ``notebooks/`` ends with exercises. The reader replaces a ``...`` with an answer
and runs the cell after it, which calls :func:`check`::

    slope = ...  # your answer
    check("1", slope, lambda s: abs(s - 2.0) < 0.1,
          "the slope is the change in return per doubling of num_envs; fit it with np.polyfit")

- The answer is still ``...``: the check says so and returns ``False`` without failing, so a
  notebook runs top to bottom before the reader has done anything (CI runs them that way).
- The condition holds: ``ok`` and ``True``.
- It does not (or raises): :class:`ExerciseFailed`, an ``AssertionError`` whose message names the
  exercise, what the answer was and the hint.

The worked answers live in ``notebooks/solutions/``, one notebook per lesson, which starts with
``run_lesson("../NN_name.ipynb")`` and then answers each exercise. CI runs the solutions, and
through them every lesson, once (the repository's conftest.py leaves out a lesson its solution
runs), so every lesson runs top to bottom and every check is shown to pass on a real answer.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["ExerciseFailed", "check", "is_unanswered", "run_lesson"]

GLOSSARY = "GLOSSARY.md"  # notebooks/GLOSSARY.md, linked from every notebook


class ExerciseFailed(AssertionError):
    """An exercise's answer did not pass its check."""


def is_unanswered(answer: Any) -> bool:
    """True for the placeholder ``...``, also inside a tuple, list or dict of answers."""
    if answer is Ellipsis:
        return True
    if isinstance(answer, (tuple, list)):
        return any(is_unanswered(a) for a in answer)
    if isinstance(answer, dict):
        return any(is_unanswered(a) for a in answer.values())
    return False


def _short(answer: Any, limit: int = 120) -> str:
    text = repr(answer)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check(exercise: str, answer: Any, condition: Callable[[Any], bool], hint: str, success: str = "") -> bool:
    """Check one exercise's answer.

    Args:
        exercise: its name as the notebook numbers it, e.g. ``"2"`` or ``"3b"``.
        answer: what the reader computed; ``...`` means "not answered yet".
        condition: returns True when the answer is right. An exception inside it counts as wrong
            (a tensor of the wrong shape, a string where a number belongs) and is reported.
        hint: what to look at when it is wrong, shown in the error.
        success: an optional line shown when it is right (what the answer means).

    Returns:
        True when right, False when not answered yet. Raises :class:`ExerciseFailed` when wrong.
    """
    if not callable(condition):
        raise TypeError(f"check({exercise!r}, ...): condition must be a function of the answer, got {condition!r}")
    if is_unanswered(answer):
        print(f"Exercise {exercise}: not answered yet. Replace the `...` in the cell above with your answer, "
              f"run it, then run this cell again.")
        return False
    try:
        ok = bool(condition(answer))
    except Exception as exc:  # a wrong type or shape is a wrong answer, explained
        raise ExerciseFailed(f"Exercise {exercise}: checking {_short(answer)} raised {type(exc).__name__}: {exc}. "
                             f"Hint: {hint}") from None
    if not ok:
        raise ExerciseFailed(f"Exercise {exercise}: not yet right (your answer: {_short(answer)}). Hint: {hint}")
    print(f"Exercise {exercise}: ok." + (f" {success}" if success else ""))
    return True


def run_lesson(path: str) -> None:
    """Run every code cell of a lesson notebook in this kernel, as if typed here, outputs included.

    Solutions notebooks start with it, so the lesson's variables are theirs. Why not IPython's
    ``%run lesson.ipynb``: it sets ``__main__.__file__`` to the notebook, and pods started with
    ``spawn`` (notebooks 09-11) then try to re-import the notebook as a script and fail.
    """
    import nbformat
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("run_lesson runs a notebook's cells in Jupyter or IPython; from a terminal use "
                           "`jupyter nbconvert --to notebook --execute NOTEBOOK`")
    notebook = nbformat.read(path, as_version=4)
    for number, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        source = cell.source.rstrip()
        if source.endswith(";") and not source.startswith("%%"):  # a cell magic's body is not Python
            # IPython looks for the `;` that hides a cell's value in the history's last cell, which
            # here is the cell calling run_lesson: end with a statement so nothing is echoed.
            source += "\npass"
        result = shell.run_cell(source, store_history=False)
        if not result.success:
            error = result.error_in_exec or result.error_before_exec
            raise RuntimeError(f"{path}: cell {number} failed with {type(error).__name__}: {error}") from error
