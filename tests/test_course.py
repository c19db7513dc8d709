"""The course's rules (issue 13), checked on the committed notebooks, and the exercise checker."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from podracer.course import ExerciseFailed, check, is_unanswered

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
LESSONS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
SOLUTIONS = NOTEBOOKS / "solutions"
SOLVED = sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))
GLOSSARY = NOTEBOOKS / "GLOSSARY.md"
# The standard market: prepare_market's defaults (train, valid, test) and the history before them.
STANDARD_DATES = {"2000-01-01", "2005-01-01", "2016-12-31", "2017-01-01", "2018-12-31", "2019-01-01",
                  "2022-12-31"}


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def code(path: Path) -> list[str]:
    return ["".join(c["source"]) for c in cells(path) if c["cell_type"] == "code"]


# ---------------------------------------------------------------------------- the checker
def test_check_unanswered_does_not_fail(capsys):
    assert check("1", ..., lambda a: a > 0, "hint") is False
    assert "not answered yet" in capsys.readouterr().out
    assert is_unanswered((1.0, ...)) and is_unanswered({"a": ...}) and not is_unanswered(0)


def test_check_right_and_wrong_answers(capsys):
    assert check("2", 3, lambda a: a == 3, "hint", success="three") is True
    assert "Exercise 2: ok. three" in capsys.readouterr().out
    with pytest.raises(ExerciseFailed, match=r"Exercise 3: not yet right \(your answer: 4\)\. Hint: add one"):
        check("3", 4, lambda a: a == 3, "add one")


def test_check_reports_an_answer_of_the_wrong_kind():
    with pytest.raises(ExerciseFailed, match="Exercise 4: checking 'abc' raised TypeError.*Hint: a number"):
        check("4", "abc", lambda a: a + 1 > 0, "a number")
    with pytest.raises(TypeError, match="condition must be a function"):
        check("5", 1, True, "hint")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- the notebooks
def test_the_sequence_is_numbered_without_gaps():
    numbers = [int(p.name[:2]) for p in LESSONS]
    assert numbers == list(range(1, len(numbers) + 1)), [p.name for p in LESSONS]
    assert len(LESSONS) >= 12


@pytest.mark.parametrize("path", LESSONS + sorted(SOLUTIONS.glob("*.ipynb")), ids=lambda p: p.parent.name + "/" + p.name)
def test_committed_without_outputs(path):
    for i, cell in enumerate(cells(path)):
        if cell["cell_type"] == "code":
            assert not cell["outputs"] and cell["execution_count"] is None, (
                f"{path.name} cell {i} has outputs: strip them with "
                f"`.venv/bin/jupyter nbconvert --clear-output --inplace {path.relative_to(NOTEBOOKS.parent)}`")


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_lesson_follows_the_rules(path):
    first = "".join(cells(path)[0]["source"])
    number = path.name[:2]
    assert first.startswith(f"# {number} · "), f"{path.name}: the title should start '# {number} · '"
    for part in ("You will learn", "Time", "GLOSSARY.md"):
        assert part in first, f"{path.name}: the opening cell should name '{part}'"
    sources = code(path)
    size_lines = [line for src in sources for line in src.splitlines() if re.match(r"\s*SIZE\s*=", line)]
    assert len(size_lines) == 1 and 'os.environ.get("PODRACER_SIZE", "full")' in size_lines[0], (
        f"{path.name}: one size setting defaulting to the learning size, got {size_lines}")
    checks = sum(len(re.findall(r"\bcheck\(\s*\"", src)) for src in sources)
    assert 2 <= checks <= 4, f"{path.name}: 2-3 exercises with a check cell each, found {checks} check() calls"


@pytest.mark.parametrize("path", LESSONS + sorted(SOLUTIONS.glob("*.ipynb")), ids=lambda p: p.parent.name + "/" + p.name)
def test_no_figure_is_drawn_twice(path):
    # A cell whose value is a Figure (BacktestResult.plot() returns one) shows it twice in Jupyter:
    # as the cell's result and again from the inline backend. A trailing `;` drops the result.
    for src in code(path):
        last = src.rstrip().splitlines()[-1] if src.strip() else ""
        assert not re.fullmatch(r"[\w.\[\]\"']+\.plot\(.*\)", last.strip()), (
            f"{path.name}: end `{last.strip()}` with `;`, or Jupyter draws its figure twice")


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_every_lesson_has_a_solution_that_runs_it(path):
    solution = SOLUTIONS / path.name
    assert solution.exists(), f"no solutions/{path.name}"
    sources = code(solution)
    assert f'run_lesson("../{path.name}")' in sources[0], f'solutions/{path.name} should start with run_lesson("../{path.name}")'
    calls = re.findall(r"\brun_lesson\(", "\n".join(sources))
    assert len(calls) == 1, f"solutions/{path.name} should run its lesson once, calls run_lesson {len(calls)} times"
    lesson_checks = re.findall(r"\bcheck\(\s*\"([^\"]+)\"", "\n".join(code(path)))
    solved = re.findall(r"\bcheck\(\s*\"([^\"]+)\"", "\n".join(sources[1:]))
    assert sorted(lesson_checks) == sorted(solved), f"solutions/{path.name} should answer {lesson_checks}, has {solved}"
    for src in sources[1:]:
        assert not re.search(r"=\s*\.\.\.(\s|#|$)", src), f"solutions/{path.name} leaves a `...` answer:\n{src}"


# ---------------------------------------------------------------------------- each lesson runs once
def _root_conftest():
    """The repository's conftest.py, loaded by path (``import conftest`` names tests/conftest.py)."""
    spec = importlib.util.spec_from_file_location("_podracer_root_conftest", NOTEBOOKS.parent / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_lesson_runs_once_through_its_solution():
    """CI executes each lesson once: its solution runs it, so collection leaves the lesson out."""
    assert _root_conftest().lessons_run_by_solutions(NOTEBOOKS) == set(LESSONS)


@pytest.mark.slow
def test_nbmake_collects_the_solutions_and_not_the_lessons():
    res = subprocess.run([sys.executable, "-m", "pytest", "notebooks", "--nbmake", "--collect-only", "-q",
                          "-p", "no:cacheprovider"], cwd=NOTEBOOKS.parent, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    collected = sorted(line.split("::")[0] for line in res.stdout.splitlines() if ".ipynb::" in line)
    assert collected == [p.relative_to(NOTEBOOKS.parent).as_posix() for p in SOLVED], res.stdout


def test_glossary_defines_the_terms_the_course_links():
    text = GLOSSARY.read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).strip().replace(" ", "-")
               for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}
    for term in ("pod", "generation", "rollout", "truncation-versus-termination", "autoreset", "gae", "sharpe",
                 "sortino", "calmar", "turnover", "look-ahead", "pbo"):
        assert term in anchors, f"GLOSSARY.md has no entry '{term}'"
    for path in LESSONS:
        for anchor in re.findall(r"GLOSSARY\.md#([a-z0-9-]+)", "".join("".join(c["source"]) for c in cells(path))):
            assert anchor in anchors, f"{path.name} links GLOSSARY.md#{anchor}, which does not exist"


def dates_in(path: Path) -> set[str]:
    return set(re.findall(r"\b(?:19|20)\d\d-\d\d-\d\d\b", "\n".join(code(path))))


# Every notebook trades the same market on the same dates; 05 (data), 07 (a date control) and 08
# (walk-forward) are about changing them. Most notebooks hold no date at all (01-04, 09, 11, 12 are
# not about markets), so the check runs on the ones that do, and the lessons that trade the
# standard market must be among them.
CHANGE_THE_DATES = ("05_market_data", "07_interactive_backtest", "08_overfitting")
TRADE_THE_MARKET = ("06_trading_env.ipynb", "10_trading_tournament.ipynb")
DATED = [p for p in LESSONS + SOLVED if dates_in(p) and not p.name.startswith(CHANGE_THE_DATES)]


@pytest.mark.parametrize("path", DATED, ids=lambda p: p.parent.name + "/" + p.name)
def test_same_dates_everywhere(path):
    dates = dates_in(path)
    assert dates <= STANDARD_DATES, f"{path.name} uses dates {sorted(dates - STANDARD_DATES)} outside the standard split"


def test_the_date_check_covers_the_lessons_that_trade_the_market():
    checked = {p.relative_to(NOTEBOOKS).as_posix() for p in DATED}
    for name in TRADE_THE_MARKET:
        assert name in checked, f"{name} names no date: test_same_dates_everywhere would not check it"
    for prefix in CHANGE_THE_DATES:  # the exceptions name real lessons (a rename would silently widen them)
        assert any(p.name.startswith(prefix) for p in LESSONS), f"no lesson {prefix}*.ipynb"


def test_run_lesson_needs_ipython():
    from podracer.course import run_lesson

    with pytest.raises(RuntimeError, match="in Jupyter or IPython"):
        run_lesson(str(LESSONS[0]))


@pytest.mark.slow  # starts a Jupyter kernel (in the "processes" group of conftest.py under pytest -n)
def test_run_lesson_echoes_what_the_lesson_would_and_no_more(tmp_path):
    # A solution runs its lesson inside one cell; a `;` at the end of a lesson cell must still
    # hide that cell's value (IPython reads the `;` from history, which holds the outer cell).
    import nbformat
    from nbclient import NotebookClient

    lesson = nbformat.v4.new_notebook()
    lesson.cells = [nbformat.v4.new_code_cell("import matplotlib\nmatplotlib.use('agg')\n"
                                              "import matplotlib.pyplot as plt\nplt.figure().gca().plot([1], label='a')\n"
                                              "plt.legend();"),
                    nbformat.v4.new_code_cell("answer = 41 + 1\nanswer")]
    nbformat.write(lesson, tmp_path / "lesson.ipynb")
    solution = nbformat.v4.new_notebook()
    solution.cells = [nbformat.v4.new_code_cell(f"from podracer.course import run_lesson\nrun_lesson({str(tmp_path / 'lesson.ipynb')!r})")]
    NotebookClient(solution, kernel_name="python3", timeout=120).execute()
    echoed = [o["data"]["text/plain"] for o in solution.cells[0].outputs if o["output_type"] == "execute_result"]
    assert echoed == ["42"]
