"""Exercise checks, grading helpers and classroom tooling for the course notebooks.

Every lesson in ``notebooks/`` ends with exercises. The reader replaces a ``...`` with an answer
and runs the cell after it, which checks it. Three checks, one behaviour:

``check(exercise, answer, condition, hint="", success="", *, hints=(), strict=None)``
    The answer against a condition: a function of the answer that returns True when it is right
    (an exception inside it counts as wrong and is explained)::

        slope = ...  # your answer
        check("1", slope, lambda s: abs(s - 2.0) < 0.1,
              "the slope is the change in return per doubling of num_envs; fit it with np.polyfit")

``check_function(exercise, student_fn, reference_fn, make_inputs, n=20, atol=1e-6, rtol=1e-5, ...)``
    A function the reader wrote from scratch against the library's own, on ``n`` random inputs.
    ``make_inputs(generator)`` gets a seeded ``torch.Generator`` and returns the arguments: a
    tuple (positional), a dict (keywords) or one value. Outputs are compared element by element
    (tensors, arrays, numbers, and tuples, lists or dicts of them); a mismatch names the input, the
    output element, the shapes and the largest difference. A stub that still returns ``None`` (a
    body of ``...``) or raises ``NotImplementedError`` counts as not answered yet::

        def compute_gae(rewards, values, next_values, terminated, truncated, gamma, gae_lambda):
            ...  # your code

        check_function("2", compute_gae, ppo.compute_gae, make_rollout, hints=["...", "..."])

``check_value(exercise, answer, *, lesson, answers=None, text=False, ...)``
    A number (or a string, ``text=True``) whose expected value the notebook never holds. The
    course's lessons ship no expected values: there it checks the kind of answer (status
    ``"unchecked"``) and the autograder marks the value (:mod:`podracer.course.release`). For
    self-study material of your own, an answers file can hold, for ``"<lesson>/<exercise>"``, a
    salted, slow hash (PBKDF2-SHA256) of the value rounded to its ``digits`` decimals
    (:func:`record_answer`); a number is then right when it rounds to the expected value give or
    take one in the last decimal. Hashes keep a value out of sight, not secret: a value known to
    three decimals in a known range falls to trying them all. The file is found at ``answers=``,
    else ``$PODRACER_ANSWERS``, else the first ``answers.json`` in the working directory or its
    parents::

        check_value("1", v_star, lesson="00_foundations", hints=["run value iteration with gamma=0.5"])

The two specialised checks are ``check`` with a condition object, ``same_as(reference_fn,
make_inputs, ...)`` and ``hidden(key)``, so ``check("2", compute_gae, same_as(ppo.compute_gae,
make_rollout))`` is the same check as the ``check_function`` call above.

What every check does:

- **Never raises by default.** Not answered yet (``...``): it says so. Wrong: it prints ``✗``, the
  exercise, what was wrong and the hints revealed so far, in red, and Run All goes on. Right:
  ``✓`` and the ``success`` line, in green (``NO_COLOR=1`` turns colours off).
- **Returns a** :class:`CheckResult`: true when right (``if check(...)``, ``assert check(...)``),
  with ``.status`` ``"ok"``, ``"wrong"``, ``"unanswered"`` or ``"unchecked"`` (a value no file
  here can check); it displays nothing in a notebook, so no stray ``True``/``False`` appears under
  the check's message. :func:`results` gives the latest status of every exercise checked in the
  kernel, for the student's own overview: marks come from the autograder, never from it.
- **Tiered hints.** ``hint`` is shown on every wrong try; ``hints=[...]`` (or a list passed as
  ``hint``) are revealed one more per wrong try of the same exercise in this kernel.
- **Strict mode** raises :class:`ExerciseFailed` (an ``AssertionError``) on a wrong answer, for CI
  and graders: ``check(..., strict=True)``, ``set_strict(True)`` or ``PODRACER_STRICT_CHECKS=1``.
  ``set_strict(True, require_answers=True)``, which every lesson's source runs first (a cell the
  releases leave out), also fails an unanswered exercise: a wrong worked answer fails CI.

Converting an exercise: keep the answer cell (``name = ...  # your answer``); in the check cell,
call one of the three with the exercise's number as a string first (the course's tests match the
lesson's checks with its hidden tests by that string) and move a ``<details>`` hint into
``hints=[...]`` from the vaguest to the most explicit, the last still short of the answer line.

Each lesson's one source, ``notebooks/source/NN_name.ipynb``, holds the lesson with its worked
answers and, per exercise, hidden tests (:mod:`podracer.course.grading`); the release step builds
the students' notebooks, the autograders and a TA release from it (:mod:`podracer.course.release`,
``make course``). CI runs every source once, top to bottom, with its practice checks strict and its
hidden tests asserted, so every check is shown to pass on a real answer. (:func:`run_lesson`, which
runs a lesson's cells in the current kernel, stays for notebooks of your own that answer another.)

Also here: :func:`where` (the file and line that define a function, for "the library does the same
at ..." pointers that stay right when the file changes); :data:`COLAB_CELL`, the code cell that
installs the course on Google Colab and does nothing elsewhere, and :func:`add_colab_cell`, which
inserts it after a lesson's title cell (``docs/colab.md``)::

    import nbformat
    from podracer.course import add_colab_cell

    nb = nbformat.read(path, as_version=4)
    if add_colab_cell(nb):  # False when the lesson has one already
        nbformat.write(nb, path)

and ``python -m podracer.course slides NOTEBOOK...`` (``make slides``: reveal.js slides of the
lessons; ``docs/slides.md``). :func:`notebook_client` is nbclient's ``NotebookClient`` without the
Output-widget stall described there, for running a lesson with widgets from Python.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import json
import math
import os
import re
import secrets
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

__all__ = ["COLAB_CELL", "CheckResult", "ExerciseFailed", "add_colab_cell", "build_slides", "colab_cell", "check",
           "check_function", "check_value", "default_extras", "fetch_slide_assets", "hidden", "install_requirement",
           "is_unanswered", "notebook_client", "record_answer",
           "results", "run_lesson", "same_as", "set_strict", "where"]

GLOSSARY = "GLOSSARY.md"  # notebooks/GLOSSARY.md, linked from every notebook
STRICT_ENV = "PODRACER_STRICT_CHECKS"  # "1": a wrong answer raises ExerciseFailed
ANSWERS_ENV = "PODRACER_ANSWERS"  # path of the answers file for check_value
ANSWERS_FILE = "answers.json"
ANSWERS_FORMAT = "podracer-answers/1"
UNCHECKED = "unchecked"  # a check_value with no answers file: the kind of answer checked, not its value
HASH_ITERATIONS = 50_000  # PBKDF2 rounds per candidate: ~15 ms a check, minutes to try every 3-decimal value

# The first code cell of a lesson on Google Colab: installs the course there, does nothing elsewhere.
# Self-contained on purpose: on a fresh Colab runtime podracer is not importable until it has run.
# Which extras it installs is the course's data, not this tool's: ``extras`` in
# notebooks/source/hosted.yaml (the course tool names no domain; docs/architecture.md).
def default_extras() -> str:
    """The extras every lesson installs, ``extras`` in the course's settings
    (``notebooks/source/hosted.yaml``, in a checkout of the repository): the default of
    :func:`install_requirement`, :func:`colab_cell`, :data:`COLAB_CELL` and :func:`add_colab_cell`."""
    from podracer.course import release

    return release.hosted_settings(release.HOSTED)["extras"]


def install_requirement(extras: str | None = None, install: str = "podracer-rl") -> str:
    """What pip installs for a lesson: ``install`` with ``extras`` (None: :func:`default_extras`).
    ``install`` is a package name (``"podracer-rl"``: ``podracer-rl[EXTRAS]``) or where the package
    is, a wheel's URL or path or a ``git+`` URL
    (``podracer-rl[EXTRAS] @ https://.../podracer_rl-1.2-py3-none-any.whl``)."""
    extras = default_extras() if extras is None else extras
    install = install.strip()
    if not install or any(c in install for c in ' "\'[]'):
        raise ValueError(f"install={install!r}: give a package name, a wheel's URL or a git+ URL")
    if "/" in install or install.endswith(".whl"):
        return f"podracer-rl[{extras}] @ {install}"
    return f"{install}[{extras}]"


def colab_cell(extras: str | None = None, install: str = "podracer-rl") -> str:
    """The Colab install cell for ``podracer-rl[extras]`` (None: :func:`default_extras`; a lesson that
    starts Ray adds ``cluster``); ``install`` says where from (:func:`install_requirement`; the
    release fills it from ``notebooks/source/hosted.yaml``)."""
    return f'''\
# On Google Colab, install the course first (about a minute, once per session); elsewhere this does nothing.
import sys

if "google.colab" in sys.modules:
    %pip install --quiet "{install_requirement(extras, install)}"\
'''


def __getattr__(name: str) -> str:
    """``COLAB_PIP`` and ``COLAB_CELL``, with the course's default extras: read when first asked for
    (the settings file is in a checkout, and a student's ``import podracer.course`` needs none)."""
    if name == "COLAB_PIP":  # what the cell installs: podracer-rl[<default extras>]
        return install_requirement()
    if name == "COLAB_CELL":
        return colab_cell()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ExerciseFailed(AssertionError):
    """An exercise's answer did not pass its check (raised in strict mode only)."""


# ---------------------------------------------------------------------------- results and modes
@dataclass(frozen=True)
class CheckResult:
    """What a check found. True when right; shows nothing as a cell's value (the check printed it)."""

    exercise: str
    status: str  # "ok", "wrong", "unanswered" or "unchecked" (a value no file here can check)
    message: str

    def __bool__(self) -> bool:
        return self.status == "ok"

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def _ipython_display_(self) -> None:  # the message is already printed: no Out[] under the check
        pass


_state: dict[str, Any] = {"strict": None, "require_answers": False}
_attempts: dict[str, int] = {}  # wrong tries per exercise in this kernel, for tiered hints
_results: dict[str, str] = {}  # the latest status of each exercise checked in this kernel


def results() -> dict[str, str]:
    """The latest status of every exercise checked in this kernel, ``{"1": "ok", "2": "wrong", ...}``:
    a student's overview of their practice. Not a grade: any cell can change it. Marks come from the
    autograder, which reruns the notebook from the release (``docs/syllabus.md``, "A term, step by step")."""
    return dict(_results)


def set_strict(strict: bool | None = True, require_answers: bool = False) -> None:
    """Strict mode for every later check in this kernel: a wrong answer raises :class:`ExerciseFailed`.

    ``require_answers`` also fails an unanswered or uncheckable exercise (what a solutions notebook
    wants). ``set_strict(None)`` goes back to the default: ``$PODRACER_STRICT_CHECKS``, else lenient.
    """
    _state["strict"] = strict
    _state["require_answers"] = bool(require_answers)


def _is_strict(strict: bool | None) -> bool:
    if strict is not None:
        return strict
    if _state["strict"] is not None:
        return bool(_state["strict"])
    return os.environ.get(STRICT_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _paint(text: str, colour: str) -> str:
    if os.environ.get("NO_COLOR"):
        return text
    return {"red": "\x1b[31m", "green": "\x1b[32m", "yellow": "\x1b[33m"}[colour] + text + "\x1b[0m"


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
    text = _describe(answer) if _is_array(answer) else repr(answer)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------- check
def check(exercise: str, answer: Any, condition: Callable[[Any], Any], hint: str | Sequence[str] = "",
          success: str = "", *, hints: Sequence[str] = (), strict: bool | None = None) -> CheckResult:
    """Check one exercise's answer; print what it found; raise only in strict mode.

    Args:
        exercise: its name as the notebook numbers it, e.g. ``"2"`` or ``"3b"``.
        answer: what the reader computed; ``...`` means "not answered yet".
        condition: a function of the answer, true when it is right (an exception inside it counts
            as wrong and is reported), or a condition object from :func:`same_as` or :func:`hidden`.
        hint: shown on every wrong try. A list is taken as ``hints``.
        success: an optional line shown when it is right (what the answer means).
        hints: revealed one more per wrong try of this exercise, vaguest first.
        strict: raise :class:`ExerciseFailed` when wrong; None: :func:`set_strict`, else
            ``$PODRACER_STRICT_CHECKS``, else False.

    Returns:
        A :class:`CheckResult`, true when right.
    """
    if not callable(condition) and not hasattr(condition, "evaluate"):
        raise TypeError(f"check({exercise!r}, ...): condition must be a function of the answer, got {condition!r}")
    exercise = str(exercise)
    if isinstance(hint, (list, tuple)):
        hint, hints = "", [*hint, *hints]
    if is_unanswered(answer):
        return _unanswered(exercise, "Replace the `...` in the cell above with your answer, run it, "
                                     "then run this cell again.", strict)
    if hasattr(condition, "evaluate"):
        try:
            ok, detail = condition.evaluate(answer)
        except Exception as exc:  # an answer of the wrong kind, explained
            ok, detail = False, f"checking {_short(answer)} raised {type(exc).__name__}: {exc}"
        if ok is None:
            return _unanswered(exercise, detail, strict)
        if ok == UNCHECKED:  # a value with no expected value here: its format is all that is checked
            message = f"Exercise {exercise}: {detail}"
            print(_paint("• " + message, "yellow"))
            _results[exercise] = UNCHECKED
            return CheckResult(exercise, UNCHECKED, message)
    else:
        try:
            ok, detail = bool(condition(answer)), f"your answer: {_short(answer)}"
        except Exception as exc:  # a wrong type or shape is a wrong answer, explained
            ok, detail = False, f"checking {_short(answer)} raised {type(exc).__name__}: {exc}"
    if ok:
        extra = f", {detail}" if hasattr(condition, "evaluate") and detail else ""
        message = f"Exercise {exercise}: ok{extra}." + (f" {success}" if success else "")
        print(_paint("✓ " + message, "green"))
        _results[exercise] = "ok"
        return CheckResult(exercise, "ok", message)
    return _wrong(exercise, detail, hint, list(hints), strict)


def _unanswered(exercise: str, detail: str, strict: bool | None) -> CheckResult:
    message = f"Exercise {exercise}: not answered yet. {detail}"
    _results[exercise] = "unanswered"
    if _state["require_answers"] and strict is not False:
        raise ExerciseFailed(message + " (a solutions notebook must answer every exercise)")
    print(_paint("… " + message, "yellow"))
    return CheckResult(exercise, "unanswered", message)


def _wrong(exercise: str, detail: str, hint: str, hints: list[str], strict: bool | None) -> CheckResult:
    _attempts[exercise] = tries = _attempts.get(exercise, 0) + 1
    _results[exercise] = "wrong"
    if detail.startswith("your answer"):
        wording = f"not yet right ({detail})"
    elif detail.startswith("checking"):  # the condition raised: say so first
        wording = detail
    else:
        wording = f"not yet right: {detail}"
    message = f"Exercise {exercise}: {wording}."
    if hint:
        message += f" Hint: {hint}"
    shown = hints[:tries]
    for i, h in enumerate(shown, 1):
        message += f"\n  Hint {i} of {len(hints)}: {h}"
    if len(shown) < len(hints):
        message += "\n  (another hint appears after your next try)"
    if _is_strict(strict):
        raise ExerciseFailed(message)
    print(_paint("✗ " + message, "red"))
    return CheckResult(exercise, "wrong", message)


# ---------------------------------------------------------------------------- functions from scratch
def _is_array(x: Any) -> bool:
    return type(x).__module__.split(".")[0] in ("torch", "numpy") and hasattr(x, "shape") and getattr(x, "ndim", 0) > 0


def _describe(x: Any) -> str:
    if _is_array(x):
        kind = "tensor" if type(x).__module__.startswith("torch") else "array"
        return f"{kind} of shape {tuple(x.shape)}, {str(x.dtype).replace('torch.', '')}"
    return repr(x)


def _as_float_tensor(x: Any) -> Any:
    import torch

    t = x.detach().cpu() if isinstance(x, torch.Tensor) else torch.as_tensor(x)
    return t.to(torch.float64) if (t.is_floating_point() or t.dtype in (torch.int32, torch.int64)) else t


def _compare(got: Any, expected: Any, atol: float, rtol: float, where_: str = "the output") -> str | None:
    """None when ``got`` matches ``expected``; else what differs, in words."""
    import torch

    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            return f"{where_} should be a {type(expected).__name__} of {len(expected)}, got {_short(got, 80)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            diff = _compare(g, e, atol, rtol, f"{where_}[{i}]" if where_ != "the output" else f"output {i}")
            if diff:
                return diff
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict) or set(got) != set(expected):
            return f"{where_} should be a dict with keys {sorted(expected)}, got {_short(got, 80)}"
        for key in expected:
            diff = _compare(got[key], expected[key], atol, rtol, f"{where_}[{key!r}]")
            if diff:
                return diff
        return None
    if _is_array(expected) or isinstance(expected, torch.Tensor):
        try:
            g, e = _as_float_tensor(got), _as_float_tensor(expected)
        except Exception:
            return f"{where_} should be a {_describe(expected)}, got {_short(got, 80)}"
        if tuple(g.shape) != tuple(e.shape):
            return f"{where_} has shape {tuple(g.shape)}, expected {tuple(e.shape)}"
        if e.is_floating_point():
            close = torch.isclose(g.to(torch.float64), e, rtol=rtol, atol=atol, equal_nan=True)
        else:
            close = g == e
        if bool(close.all()):
            return None
        index = tuple(int(i) for i in (~close).nonzero()[0])
        worst = (g.to(torch.float64) - e.to(torch.float64)).abs().nan_to_num(nan=math.inf).max().item() \
            if e.is_floating_point() else None
        at = f" at index {index}" if index else ""
        text = f"{where_}{at} is {g[index].item():.6g}, expected {e[index].item():.6g}"
        return text + (f" (largest difference {worst:.3g})" if worst is not None else "")
    if isinstance(expected, (bool, str)) or expected is None:
        return None if got == expected else f"{where_} is {_short(got, 80)}, expected {expected!r}"
    try:  # a number, a numpy scalar, a 0-d tensor
        g, e = float(got), float(expected)
    except (TypeError, ValueError):
        return None if got == expected else f"{where_} is {_short(got, 80)}, expected {_short(expected, 80)}"
    if (math.isnan(g) and math.isnan(e)) or math.isclose(g, e, rel_tol=rtol, abs_tol=atol):
        return None
    return f"{where_} is {g:.6g}, expected {e:.6g} (difference {abs(g - e):.3g})"


def _call_args(inputs: Any) -> tuple[tuple, dict]:
    if isinstance(inputs, dict):
        return (), dict(inputs)
    if isinstance(inputs, tuple):
        return inputs, {}
    return (inputs,), {}


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def _quoted(fn: Any) -> str:
    name = _name(fn)
    return "the lambda" if "<lambda>" in name else f"`{name}`"


class same_as:  # noqa: N801 (used like a function: check("2", fn, same_as(ref, make_inputs)))
    """A condition for :func:`check`: the answer is a function that agrees with ``reference`` on
    ``n`` random inputs from ``make_inputs(generator)`` (see :func:`check_function`)."""

    def __init__(self, reference: Callable[..., Any], make_inputs: Callable[[Any], Any], n: int = 20,
                 atol: float = 1e-6, rtol: float = 1e-5, seed: int = 0):
        if not callable(reference) or not callable(make_inputs):
            raise TypeError("same_as(reference, make_inputs): both must be functions")
        self.reference, self.make_inputs, self.n, self.atol, self.rtol, self.seed = (
            reference, make_inputs, n, atol, rtol, seed)

    def _inputs_text(self, args: tuple, kwargs: dict) -> str:
        try:
            bound = inspect.signature(self.reference).bind(*args, **kwargs)
            items = bound.arguments.items()
        except (TypeError, ValueError):
            items = [(f"arg {i}", a) for i, a in enumerate(args)] + list(kwargs.items())
        return ", ".join(f"{k}={_describe(v) if _is_array(v) else _short(v, 40)}" for k, v in items)

    def evaluate(self, student: Any) -> tuple[bool | None, str]:
        import torch

        if not callable(student):
            return False, f"expected a function (its name, without calling it), got {_short(student, 80)}"
        for i in range(self.n):
            inputs = self.make_inputs(torch.Generator().manual_seed(self.seed + i))
            args, kwargs = _call_args(inputs)
            expected = self.reference(*copy.deepcopy(args), **copy.deepcopy(kwargs))
            try:
                got = student(*copy.deepcopy(args), **copy.deepcopy(kwargs))
            except NotImplementedError:
                return None, f"{_quoted(student)} raises NotImplementedError: write its body, then run this cell again."
            except Exception as exc:
                return False, (f"on random input {i + 1} of {self.n} ({self._inputs_text(args, kwargs)}) "
                               f"{_quoted(student)} raised {type(exc).__name__}: {exc}")
            if (got is None or got is Ellipsis) and expected is not None:
                return None, (f"{_quoted(student)} returns None: write its body (is the `return` missing?), "
                              f"then run this cell again.")
            diff = _compare(got, expected, self.atol, self.rtol)
            if diff:
                return False, f"on random input {i + 1} of {self.n} ({self._inputs_text(args, kwargs)}), {diff}"
        return True, f"same as {_quoted(self.reference)} on {self.n} random inputs"


def check_function(exercise: str, student_fn: Callable[..., Any], reference_fn: Callable[..., Any],
                   make_inputs: Callable[[Any], Any], n: int = 20, atol: float = 1e-6, rtol: float = 1e-5, *,
                   hint: str = "", hints: Sequence[str] = (), success: str = "", seed: int = 0,
                   strict: bool | None = None) -> CheckResult:
    """Check a function written from scratch against the reference, on ``n`` random inputs.

    ``make_inputs(generator)`` receives a ``torch.Generator`` seeded with ``seed + i`` (the same
    inputs on every run) and returns the arguments of one call: a tuple, a dict of keywords, or
    one value. Each function gets its own deep copy, so one that writes into its inputs cannot
    change what the other sees. Outputs match when every element is within ``atol + rtol * |expected|``
    (integers, booleans and strings exactly). To compare with a library function that returns
    more (``policy_loss`` returns the loss and a dict of metrics), pass a lambda that picks the part.
    """
    return check(exercise, student_fn, same_as(reference_fn, make_inputs, n=n, atol=atol, rtol=rtol, seed=seed),
                 hint, success, hints=hints, strict=strict)


# ---------------------------------------------------------------------------- hidden values
def _canonical(value: Any, digits: int) -> str | None:
    """The text that is hashed: a number rounded to ``digits`` decimals, or a stripped string."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool):
        return str(value)
    try:
        x = float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(x):
        return None
    text = f"{round(x, digits):.{digits}f}"
    return "0" if float(text) == 0 else text  # -0.000 and 0.000 alike


def _digest(text: str, salt: str, key: str, iterations: int) -> str:
    return hashlib.pbkdf2_hmac("sha256", text.encode(), f"{salt}/{key}".encode(), iterations).hex()


def _find_answers(path: str | os.PathLike | None) -> Path | None:
    if path is not None:
        return Path(path)
    if os.environ.get(ANSWERS_ENV):
        return Path(os.environ[ANSWERS_ENV])
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / ANSWERS_FILE).is_file():
            return folder / ANSWERS_FILE
    return None


def _read_answers(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    if data.get("format") != ANSWERS_FORMAT:
        raise ValueError(f"{path} is not an answers file ({ANSWERS_FORMAT}); record_answer writes one")
    return data


class hidden:  # noqa: N801 (used like a function: check("1", v, hidden("00_foundations/1")))
    """A condition for :func:`check`: the answer matches the value recorded for ``key`` in the
    answers file (see :func:`check_value`)."""

    def __init__(self, key: str, answers: str | os.PathLike | None = None, text: bool = False):
        self.key, self.answers, self.text = key, answers, text

    def evaluate(self, answer: Any) -> tuple[bool | None, str]:
        path = _find_answers(self.answers)
        if path is None and self.answers is None:
            # The course's releases hold no expected values: the format is checked here, the value
            # by the autograder's hidden tests (podracer.course.release).
            if self.text and not isinstance(answer, str):
                return False, f"expected text (a str), got {_short(answer, 80)}"
            if not self.text and (isinstance(answer, str) or _canonical(answer, 3) is None):
                return False, f"expected a number, got {_short(answer, 80)}"
            kind = "text" if self.text else "a number"
            return UNCHECKED, (f"your answer, {_short(answer, 40)}, is {kind}, as asked; its value is not checked "
                               f"here (this notebook holds no expected values): the course's autograder marks it.")
        if not path.is_file():
            return None, f"it cannot be checked here: the answers file {path} does not exist."
        data = _read_answers(path)
        entry = data["answers"].get(self.key)
        if entry is None:
            return None, f"it cannot be checked here: {path} has no answer for {self.key!r}."
        digits = int(entry["digits"])
        if isinstance(answer, str):
            candidates = [_canonical(answer, digits)]
        else:
            x = _canonical(answer, digits)
            if x is None:
                return False, f"expected a number, got {_short(answer, 80)}"
            step = 10.0 ** -digits  # give or take one in the last decimal (rounding at a boundary)
            candidates = [x] + [_canonical(float(x) + k * step, digits) for k in (-1, 1)]
        iterations = int(data.get("iterations", HASH_ITERATIONS))
        if any(_digest(c, data["salt"], self.key, iterations) == entry["sha256"] for c in candidates if c):
            return True, ""
        what = f"to {digits} decimals" if digits and not isinstance(answer, str) else "exactly"
        return False, f"your answer: {_short(answer)}, which is not the expected value {what}"


def check_value(exercise: str, answer: Any, *, lesson: str, answers: str | os.PathLike | None = None,
                hint: str = "", hints: Sequence[str] = (), success: str = "", text: bool = False,
                strict: bool | None = None) -> CheckResult:
    """Check a number (or, with ``text=True``, a string) against the value recorded for
    ``"<lesson>/<exercise>"`` in an answers file, which the notebook never shows. Without an
    answers file (the course's releases ship none: the autograder holds the values) only the kind
    of answer is checked, and the result's status is ``"unchecked"``. A file without the entry is
    reported as "cannot be checked here"."""
    condition = hidden(f"{lesson}/{exercise}", answers, text=text)
    return check(exercise, answer, condition, hint, success, hints=hints, strict=strict)


def record_answer(key: str, value: Any, digits: int = 3, path: str | os.PathLike = "notebooks/answers.json") -> None:
    """Record (or replace) the hidden answer ``key`` (``"<lesson>/<exercise>"``) in ``path``.

    A new file gets a fresh random salt; delete the file to start a term with new hashes.
    Numbers are rounded to ``digits`` decimals before hashing (``digits=0`` for integers);
    strings are compared exactly, after stripping spaces.
    """
    path = Path(path)
    if path.exists():
        data = _read_answers(path)
    else:
        data = {"format": ANSWERS_FORMAT, "salt": secrets.token_hex(16), "iterations": HASH_ITERATIONS, "answers": {}}
    text = _canonical(value, digits)
    if text is None:
        raise ValueError(f"record_answer({key!r}): {value!r} is not a finite number or a string")
    data["answers"][key] = {"digits": digits, "sha256": _digest(text, data["salt"], key, int(data["iterations"]))}
    data["answers"] = dict(sorted(data["answers"].items()))
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written beside and renamed over: a lecturer's Ctrl-C mid-write leaves the old file, never half of one.
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(partial, path)


# ---------------------------------------------------------------------------- pointers into the library
def where(obj: Any) -> str:
    """``"podracer/agents/ppo.py:185 compute_gae"``: the file, relative to its package's folder,
    and the line that define ``obj`` (a function, class or method), read from the installed source
    so a notebook's pointer stays right when the file changes."""
    obj = inspect.unwrap(obj)
    target = obj.__func__ if inspect.ismethod(obj) else obj
    path = Path(inspect.getsourcefile(target) or inspect.getfile(target)).resolve()
    _, line = inspect.getsourcelines(target)
    top = sys.modules.get((getattr(target, "__module__", "") or "").split(".")[0])
    root = Path(top.__file__).resolve().parent.parent if top is not None and getattr(top, "__file__", None) else None
    shown = path.relative_to(root).as_posix() if root is not None and path.is_relative_to(root) else str(path)
    return f"{shown}:{line} {_name(target)}"


# ---------------------------------------------------------------------------- running lessons
def run_lesson(path: str, strict: bool = True) -> None:
    """Run every code cell of a lesson notebook in this kernel, as if typed here, outputs included.

    Solutions notebooks start with it, so the lesson's variables are theirs. Then, with ``strict``
    (the default), every later check in this kernel raises on a wrong, unanswered or uncheckable
    answer: a solutions notebook is the reference, so CI fails when one of its answers is wrong.
    The lesson's own cells run in the current mode (their ``...`` answers are "not answered yet").

    Why not IPython's ``%run lesson.ipynb``: it sets ``__main__.__file__`` to the notebook, and pods
    started with ``spawn`` (notebooks 10-12) then try to re-import the notebook as a script and fail.
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
    if strict:
        set_strict(True, require_answers=True)


# ---------------------------------------------------------------------------- executing notebooks
def notebook_client(notebook: Any, **options: Any) -> Any:
    """nbclient's ``NotebookClient(notebook, **options)`` (``timeout``, ``kernel_name``, ``resources``,
    ...), whose stand-in for the Output widget cannot stall a cell until its timeout.

    nbclient stands in for the front end's Output widget (``backtest_view`` and the interactive
    backtest draw into one): each output the kernel sends into it is echoed back to the kernel as a
    ``comm_msg`` on the shell socket, while the client is awaiting that cell's ``execute_reply`` on
    the same socket. nbclient sends it through ``Session.send``, which sends through a blocking
    shadow of the asyncio socket; the send handles the socket's pending I/O, so when the reply has
    just come in, the socket's file descriptor is never signalled, the asyncio poll for the reply
    sleeps until the cell's ``timeout``, then finds the reply there and goes on as if nothing had
    happened (jupyter/nbclient#312). Sent through the asyncio socket itself, pyzmq looks for a
    waiting message after each send and wakes the poll.
    """
    from nbclient import NotebookClient

    client = NotebookClient(notebook, **options)
    # Set after __init__, which assigns the registry (it is not a trait that options could set).
    client.widget_registry = {**client.widget_registry, "@jupyter-widgets/output": {"OutputModel": _output_widget()}}
    return client


@functools.cache
def _output_widget() -> type:
    """nbclient's Output-widget stand-in, sending its messages through the asyncio shell socket."""
    from nbclient.jsonutil import json_clean
    from nbclient.output_widget import OutputWidget

    class AsyncSafeOutputWidget(OutputWidget):
        def _publish_msg(self, msg_type: str, data: dict | None = None, metadata: dict | None = None,
                         buffers: list | None = None, **keys: Any) -> None:
            client = self.kernel_client
            content = json_clean(dict(data=data or {}, comm_id=self.comm_id, **keys))
            msg = client.session.msg(msg_type, content=content, parent=self.parent_header, metadata=metadata or {})
            # not client.shell_channel.send(msg): Session.send sends through a blocking shadow socket
            client.shell_channel.socket.send_multipart(client.session.serialize(msg))

    return AsyncSafeOutputWidget


# ---------------------------------------------------------------------------- Colab
def add_colab_cell(notebook: Any, extras: str | None = None) -> bool:
    """Insert :data:`COLAB_CELL` as the first code cell of an ``nbformat`` notebook (after the title
    cell), unless a cell already installs the course on Colab. Returns True when it inserted one.
    ``extras`` are the install's (None: :func:`default_extras`; a lesson that starts Ray adds
    ``cluster``). The cell is left out of the slides (``slide_type: skip``). Do this to lessons
    only: a solutions notebook's first code cell must be ``run_lesson``."""
    import nbformat

    if any(c.cell_type == "code" and "google.colab" in c.source for c in notebook.cells):
        return False
    at = 1 if notebook.cells and notebook.cells[0].cell_type == "markdown" else 0
    notebook.cells.insert(at, nbformat.v4.new_code_cell(
        colab_cell(extras), metadata={"slideshow": {"slide_type": "skip"}, "tags": ["colab"]}))
    return True


# ---------------------------------------------------------------------------- slides
def tag_slides(notebook: Any) -> Any:
    """Give every cell without a ``slideshow`` tag a default one: a ``## `` heading starts a slide,
    a ``### `` heading a sub-slide (reveal.js: down), anything else continues the slide. Cells a
    lecturer tagged keep their tag (View > Cell Toolbar > Slideshow in Jupyter, or
    ``metadata.slideshow.slide_type``: ``slide``, ``subslide``, ``fragment``, ``skip``, ``notes``, ``-``)."""
    for i, cell in enumerate(notebook.cells):
        if "slideshow" in cell.metadata:
            continue
        first = cell.source.lstrip().splitlines()[0] if cell.source.strip() else ""
        if i == 0 or (cell.cell_type == "markdown" and first.startswith("## ")):
            kind = "slide"
        elif cell.cell_type == "markdown" and first.startswith("### "):
            kind = "subslide"
        else:
            kind = "-"
        cell.metadata["slideshow"] = {"slide_type": kind}
    return notebook


SLIDE_CHARACTERS = 3_500  # what a slide holds at most, source text (reveal.js scrolls; a lecturer should not)


def split_long_slides(notebook: Any, limit: int = SLIDE_CHARACTERS) -> Any:
    """Start a sub-slide (reveal.js: down) at the cell that would take a slide past ``limit``
    characters of source, so no slide holds a wall of text; cells a lecturer tagged ``slide`` or
    ``subslide`` keep their tag, and a slide's first cell is never moved. Call after :func:`tag_slides`."""
    held = 0
    for cell in notebook.cells:
        kind = cell.metadata.get("slideshow", {}).get("slide_type", "-")
        if kind in ("skip", "notes"):
            continue
        if kind in ("slide", "subslide"):
            held = 0
        elif held and held + len(cell.source) > limit:
            cell.metadata["slideshow"] = {"slide_type": "subslide"}
            held = 0
        held += len(cell.source)
    return notebook


# What nbconvert's reveal.js template loads, as packages of the npm registry: reveal.js at nbconvert's
# own default version (its template expects 4.x's dist/ layout), require.js (the template loads
# reveal.js through it) and jQuery. MathJax comes from a pip package instead (jupyter-server-mathjax).
SLIDE_ASSETS = {"reveal.js": "4.0.2", "requirejs": "2.3.7", "jquery": "2.2.4"}
SLIDE_ASSETS_DIR = Path("build/slides-assets")
# The reveal template as nbconvert ships it, with two changes for a room without a network: no
# Mermaid module (only a CDN serves it, and the lessons draw no Mermaid diagrams), and MathJax told
# to typeset with the STIX-Web fonts, the ones jupyter-server-mathjax ships (it leaves out the TeX
# fonts MathJax would try first, and a formula then shows "Math Processing Error").
COLAB_BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)\n*")
_OFFLINE_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block html_head_js_mathjax -%}
<script type="text/x-mathjax-config">
MathJax.Hub.Config({"HTML-CSS": {availableFonts: [], preferredFont: null, webFont: "STIX-Web", imageFont: null}});
</script>
{{ super() }}
{%- endblock html_head_js_mathjax -%}
"""


def fetch_slide_assets(folder: str | os.PathLike = SLIDE_ASSETS_DIR) -> Path:
    """Download reveal.js, require.js and jQuery (``SLIDE_ASSETS``) from the npm registry with
    ``npm pack`` into ``folder``, once, so that :func:`build_slides` can write slides that present
    without a network (``make slides-assets``; needs ``npm`` and the registry this one time).
    Returns ``folder``."""
    import subprocess
    import tarfile
    import tempfile

    folder = Path(folder)
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("fetching the slides' reveal.js needs npm (Node.js): install it (apt-get install npm), "
                           "or build slides that load reveal.js from a CDN with --cdn")
    with tempfile.TemporaryDirectory() as tmp:
        for name, version in SLIDE_ASSETS.items():
            done = subprocess.run([npm, "pack", f"{name}@{version}", "--pack-destination", tmp],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"npm pack {name}@{version} failed (is the npm registry reachable?):\n"
                                   f"{done.stderr[-1500:]}")
            (tarball,) = Path(tmp).glob(f"{name}-{version}.tgz")
            target = folder / name
            shutil.rmtree(target, ignore_errors=True)
            with tarfile.open(tarball) as archive:
                archive.extractall(tmp, filter="data")  # npm packs everything under package/
            shutil.move(str(Path(tmp) / "package"), str(target))
    (folder / "VERSIONS").write_text("".join(f"{k} {v}\n" for k, v in SLIDE_ASSETS.items()))
    return folder


def _copy_slide_assets(assets: Path, out: Path) -> dict[str, str]:
    """reveal.js, require.js, jQuery (from ``assets``, :func:`fetch_slide_assets`) and MathJax (from
    jupyter-server-mathjax) copied into ``out/_static/``; returns the exporter's settings pointing
    at them, relative to the slides, so the folder can be moved or copied as a whole."""
    needed = {"reveal.js": assets / "reveal.js" / "dist" / "reveal.js",
              "require.js": assets / "requirejs" / "require.js",
              "jquery": assets / "jquery" / "dist" / "jquery.min.js"}
    missing = [name for name, path in needed.items() if not path.is_file()]
    if missing:
        raise FileNotFoundError(f"{assets} lacks {', '.join(missing)}: fetch them once with `make slides-assets` "
                                f"(python -m podracer.course slides-assets; needs npm and the npm registry), "
                                f"or build slides that load them from a CDN with --cdn")
    try:
        import jupyter_server_mathjax
    except ImportError as exc:
        raise ImportError("offline slides take MathJax from jupyter-server-mathjax: pip install "
                          "'podracer-rl[teach]' (make install has it), or build with --cdn") from exc
    static = out / "_static"
    for source, target in ((assets / "reveal.js" / "dist", static / "reveal.js" / "dist"),
                           (assets / "reveal.js" / "plugin", static / "reveal.js" / "plugin"),
                           (Path(jupyter_server_mathjax.__file__).parent / "static", static / "mathjax")):
        if not target.exists():  # MathJax is 12 MB: copied once per output folder
            shutil.copytree(source, target)
    shutil.copy(needed["require.js"], static / "require.js")
    shutil.copy(needed["jquery"], static / "jquery.min.js")
    # reveal.js's "white" theme: its fonts ship in dist/theme/fonts ("simple", nbconvert's default, imports
    # Google Fonts)
    return {"reveal_url_prefix": "_static/reveal.js", "reveal_theme": "white", "require_js_url": "_static/require.js",
            "jquery_url": "_static/jquery.min.js",
            "mathjax_url": "_static/mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"}


def build_slides(paths: Iterable[str | os.PathLike], out: str | os.PathLike = "build/slides",
                 execute: bool = False, reveal_prefix: str | None = None, offline: bool = True,
                 assets: str | os.PathLike = SLIDE_ASSETS_DIR) -> list[Path]:
    """reveal.js slides (one HTML file per notebook) in ``out``; ``execute`` runs each notebook
    first, so figures and tables appear (at ``$PODRACER_SIZE``). ``offline`` (the default) copies
    reveal.js, require.js, jQuery and MathJax into ``out/_static/`` and points the slides at them,
    so they present without a network (``assets``: what :func:`fetch_slide_assets` fetched once);
    ``offline=False`` loads them from CDNs when the slides are opened. ``reveal_prefix`` points at
    a reveal.js of your own instead. Returns the files written."""
    import jinja2
    import nbformat
    from nbconvert import SlidesExporter

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    settings = _copy_slide_assets(Path(assets), out) if offline else {}
    if reveal_prefix:
        settings["reveal_url_prefix"] = reveal_prefix
    written = []
    for path in map(Path, paths):
        notebook = split_long_slides(tag_slides(nbformat.read(path, as_version=4)))
        if offline:  # the "Open in Colab" badge is an image from the network, and no use on a slide
            for cell in notebook.cells:
                if cell.cell_type == "markdown":
                    cell.source = COLAB_BADGE.sub("", cell.source)
        if execute:
            # nbconvert's ExecutePreprocessor is this client, with nbclient's Output widget (notebook_client)
            notebook_client(notebook, timeout=1800, resources={"metadata": {"path": str(path.parent)}}).execute()
        exporter = SlidesExporter(reveal_scroll=True, **settings)  # long slides scroll instead of being cut off
        if offline:
            exporter.extra_loaders = [jinja2.DictLoader({"offline_slides.html.j2": _OFFLINE_TEMPLATE})]
            exporter.template_file = "offline_slides.html.j2"
        body, _ = exporter.from_notebook_node(notebook)
        target = out / f"{path.stem}.slides.html"
        target.write_text(body, encoding="utf-8")
        written.append(target)
        print(target)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m podracer.course slides|release|grade|times ...`` (``make slides``, ``make course``)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m podracer.course", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    slides = sub.add_parser("slides", help="reveal.js slides of lesson notebooks (make slides)")
    slides.add_argument("notebooks", nargs="+")
    slides.add_argument("--out", default="build/slides")
    slides.add_argument("--execute", action="store_true", help="run each notebook first, for its figures")
    slides.add_argument("--reveal-prefix", default=None, help="load reveal.js from this URL or folder instead")
    slides.add_argument("--cdn", action="store_true",
                        help="load reveal.js and MathJax from CDNs when opened (default: copies in OUT/_static/)")
    slides.add_argument("--assets", default=str(SLIDE_ASSETS_DIR),
                        help="where slides-assets put reveal.js, require.js and jQuery (default: %(default)s)")
    assets = sub.add_parser("slides-assets", help="fetch reveal.js, require.js and jQuery once from the npm registry, "
                                                  "for slides that present offline (make slides-assets)")
    assets.add_argument("--out", default=str(SLIDE_ASSETS_DIR))
    release = sub.add_parser("release", help="the student, autograder and TA releases from notebooks/source/ "
                                             "(make course)")
    release.add_argument("sources", nargs="*", help="lesson sources (default: every notebooks/source/NN_*.ipynb)")
    release.add_argument("--out", default="build/course")
    release.add_argument("--update-lessons", action="store_true",
                         help="also write the student notebooks over notebooks/NN_*.ipynb (after editing a source)")
    release.add_argument("--bundle", action="store_true", help="also build the wheel into OUT/bundle/ (for Colab)")
    for name, what in (("repository", "GitHub owner/name the Colab badges open"), ("ref", "branch or tag they open"),
                       ("install", "what the first cell installs: a package name, a wheel URL or a git+ URL")):
        release.add_argument(f"--{name}", default=None, help=f"{what} (default: notebooks/source/hosted.yaml)")
    grade = sub.add_parser("grade", help="grade submitted notebooks with a lesson's autograder (otter run, no Docker)")
    grade.add_argument("autograder", help="build/course/autograder/NN_name.zip")
    grade.add_argument("submissions", nargs="+", help="the students' .ipynb files")
    grade.add_argument("--out", default="build/grades", help="folder for grades.csv and otter's results")
    times = sub.add_parser("times", help="run each lesson at a size and record its time in notebooks/source/times.yaml")
    times.add_argument("sources", nargs="*", help="lesson sources (default: every notebooks/source/NN_*.ipynb)")
    times.add_argument("--size", default="full", choices=("smoke", "full"))
    args = parser.parse_args(argv)
    if args.command == "times":
        from podracer.course.release import measure_times

        measure_times(args.sources or None, size=args.size)
    elif args.command == "slides":
        try:
            build_slides(args.notebooks, args.out, execute=args.execute, reveal_prefix=args.reveal_prefix,
                         offline=not args.cdn, assets=args.assets)
        except (FileNotFoundError, ImportError) as exc:
            parser.error(str(exc))
    elif args.command == "slides-assets":
        try:
            print(f"slide assets: {fetch_slide_assets(args.out)}")
        except RuntimeError as exc:
            parser.error(str(exc))
    elif args.command == "release":
        from podracer.course.release import build_release

        from podracer.course.release import hosted_settings

        try:
            hosted = hosted_settings(repository=args.repository, ref=args.ref, install=args.install)
        except ValueError as exc:
            parser.error(str(exc))
        out = build_release(args.out, args.sources or None, update_lessons=args.update_lessons, hosted=hosted,
                            bundle=args.bundle)
        print(f"student notebooks: {out / 'student'}\nautograders: {out / 'autograder'}\n"
              f"TA release (solutions, RUBRIC.md): {out / 'ta'}")
    else:
        from podracer.course.release import grade as grade_submissions

        missing = [s for s in [args.autograder, *args.submissions] if not Path(s).is_file()]
        if missing:
            parser.error(f"no such file: {missing[0]}")
        rows = grade_submissions(args.autograder, args.submissions, args.out)
        for row in rows:
            print(f"{row['submission']}: {row['total']:g} / {row['possible']:g}  {row['notes']}")
        print(f"grades: {Path(args.out) / 'grades.csv'}")
    return 0
