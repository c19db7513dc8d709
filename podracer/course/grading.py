"""The hidden tests' side of the course: what an autograder asserts about a student's answer.

The graded release (:mod:`podracer.course.release`) turns every exercise of a lesson's source
notebook into an otter-grader question whose hidden tests call these three functions. Each
raises ``AssertionError`` with a sentence a student can act on, and returns nothing when the
answer is right, so a test cell is one line::

    expect_function(compute_gae, ppo.compute_gae, random_rollout, blocked=["podracer.agents.ppo:compute_gae"])
    expect_value(steps, 1536)                    # an int: exact
    expect_value(v_star_halfway, 0.842, digits=3)  # a float: within half a unit of the last decimal
    expect(most_harmful, lambda a: a in final.index and final.loc[a, "mean"] == final["mean"].min())

What makes them hidden tests and not the practice checks of :mod:`podracer.course`:

- **From-scratch functions are tested without the library.** :func:`expect_function` computes the
  reference's outputs first, then *disables* every function named in ``blocked`` (each raises
  while the student's function runs, whatever name it was imported under: the function object's
  code is swapped, not a module attribute) and runs the student's function on the same inputs. An
  answer that calls ``ppo.compute_gae`` fails with "calls the library's compute_gae".
- **Other inputs.** The random inputs come from another seed than the practice check's (``seed``),
  and more of them.
- **Stated tolerances.** An integer is compared exactly; a float within ``atol`` (by default half a
  unit of its ``digits``-th decimal, what "to 3 decimals" means), nothing looser.

These functions run in the grading kernel, after the student's answer cells; what keeps a student
cell from changing them is the grader (see :mod:`podracer.course.otter_plugin`): it rebuilds the
notebook from the release, runs only the answer cells from the submission, and flags an answer
that reaches into the grader.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import inspect
import math
from typing import Any, Callable, Iterator, Sequence

from podracer.course import _call_args, _compare, _quoted, is_unanswered

__all__ = ["LibraryCallForbidden", "blocked_functions", "expect", "expect_function", "expect_value"]


class LibraryCallForbidden(RuntimeError):
    """Raised by a library function that a from-scratch exercise must not call."""


def _resolve(target: str | Callable[..., Any]) -> Callable[..., Any]:
    """``"package.module:function"`` (or ``"module:Class.method"``), or the function itself."""
    if callable(target) and not isinstance(target, str):
        return target
    module, _, attr = str(target).partition(":")
    if not attr:
        raise ValueError(f"blocked={target!r}: name a function as 'package.module:function'")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@contextlib.contextmanager
def blocked_functions(targets: Sequence[str | Callable[..., Any]]) -> Iterator[None]:
    """Within the block, each function in ``targets`` raises :class:`LibraryCallForbidden` when
    called, by every name it is known under (its code object is swapped, then restored)."""
    swapped = []
    try:
        for target in targets:
            fn = inspect.unwrap(_resolve(target))
            fn = getattr(fn, "__func__", fn)  # a method: its function
            if not hasattr(fn, "__code__"):
                raise TypeError(f"blocked={target!r} is not a Python function")
            name = getattr(fn, "__qualname__", repr(fn))
            message = (f"this exercise is to be written from scratch: the answer calls the library's {name}, "
                       f"which the grader switches off while it runs the answer")
            namespace: dict[str, Any] = {}
            # A fresh function per target, so the message is a constant of its own code; the names it
            # needs are builtins, which resolve in any module's globals.
            exec(f"def _blocked(*args, **kwargs):\n    raise RuntimeError({message!r})", namespace)
            if fn.__code__.co_freevars:  # a closure's code cannot be swapped for one without its cells
                raise TypeError(f"blocked={target!r} is a closure; block the module-level function it wraps")
            swapped.append((fn, fn.__code__))
            fn.__code__ = namespace["_blocked"].__code__
        yield
    finally:
        for fn, code in reversed(swapped):
            fn.__code__ = code


def _fail(message: str) -> None:
    raise AssertionError(message)


def expect_function(student: Any, reference: Callable[..., Any], make_inputs: Callable[[Any], Any], *,
                    blocked: Sequence[str | Callable[..., Any]] = (), n: int = 50, seed: int = 10_000,
                    atol: float = 1e-6, rtol: float = 1e-5) -> None:
    """Assert that ``student`` agrees with ``reference`` on ``n`` random inputs (``make_inputs(g)``
    with ``g`` a ``torch.Generator`` seeded ``seed + i``) while the ``blocked`` library functions raise.

    Outputs are compared as in :func:`podracer.course.check_function` (element by element within
    ``atol + rtol * |expected|``; integers, booleans and strings exactly).
    """
    import torch

    if is_unanswered(student) or not callable(student):
        _fail(f"expected a function, got {student!r}" if not is_unanswered(student) else "not answered")
    cases = []
    for i in range(n):  # the references first, with the library intact
        args, kwargs = _call_args(make_inputs(torch.Generator().manual_seed(seed + i)))
        cases.append((args, kwargs, reference(*copy.deepcopy(args), **copy.deepcopy(kwargs))))
    with blocked_functions(blocked):
        for i, (args, kwargs, expected) in enumerate(cases):
            try:
                got = student(*copy.deepcopy(args), **copy.deepcopy(kwargs))
            except RuntimeError as exc:
                if "written from scratch" in str(exc):
                    _fail(f"{_quoted(student)}: {exc}")
                _fail(f"on hidden input {i + 1} of {n}, {_quoted(student)} raised RuntimeError: {exc}")
            except Exception as exc:
                _fail(f"on hidden input {i + 1} of {n}, {_quoted(student)} raised {type(exc).__name__}: {exc}")
            if got is None and expected is not None:
                _fail(f"{_quoted(student)} returns None: is the `return` missing?")
            diff = _compare(got, expected, atol, rtol)
            if diff:
                _fail(f"on hidden input {i + 1} of {n}, {diff}")


def expect_value(answer: Any, expected: int | float | str, *, digits: int | None = None,
                 atol: float | None = None) -> None:
    """Assert that ``answer`` is ``expected``: an integer (or a string, or ``digits=0``) exactly, a
    float within ``atol`` (default: half a unit of the ``digits``-th decimal)."""
    if is_unanswered(answer):
        _fail("not answered")
    if isinstance(expected, str):
        if not isinstance(answer, str) or answer.strip() != expected.strip():
            _fail(f"your answer: {answer!r}, which is not the expected text")
        return
    try:
        x = float(answer.item() if hasattr(answer, "item") else answer)
    except (TypeError, ValueError):
        _fail(f"expected a number, got {answer!r}")
    if not math.isfinite(x):
        _fail(f"expected a finite number, got {x}")
    if isinstance(expected, int) or digits == 0:
        if x != float(expected):
            _fail(f"your answer: {x:g}, which is not the expected whole number")
        return
    if atol is None:
        if digits is None:
            raise ValueError("expect_value of a float needs digits= or atol=")
        atol = 0.5 * 10.0 ** -digits
    if not abs(x - float(expected)) <= atol:
        _fail(f"your answer: {x:.6g}, which is not within {atol:g} of the expected value")


def expect(answer: Any, condition: Callable[[Any], Any]) -> None:
    """Assert that ``condition(answer)`` is true (an exception inside it counts as false)."""
    if is_unanswered(answer):
        _fail("not answered")
    detail = ""
    try:
        if hasattr(condition, "evaluate"):  # a condition object of podracer.course (same_as, hidden)
            ok, detail = condition.evaluate(answer)
        else:
            ok = bool(condition(answer))
    except Exception as exc:
        _fail(f"checking your answer raised {type(exc).__name__}: {exc}")
    if not ok:
        _fail("your answer does not meet the exercise's condition" + (f": {detail}" if detail else ""))
