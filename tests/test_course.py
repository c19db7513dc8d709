"""The course's rules (issues 13, 24 and 33), checked on the committed notebooks, and the exercise checker.

``notebooks/source/NN_name.ipynb`` is each lesson's one source (its worked answers and hidden tests
inline); ``notebooks/NN_name.ipynb`` is the student's notebook built from it (tests/test_course_release.py
keeps the two in step)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from podracer import course
from podracer.course import ExerciseFailed, check, is_unanswered, set_strict

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
LESSONS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
SOURCES = NOTEBOOKS / "source"
SOLVED = sorted(SOURCES.glob("[0-9][0-9]_*.ipynb"))
GLOSSARY = NOTEBOOKS / "GLOSSARY.md"
# The standard market: prepare_market's defaults (train, valid, test) and the history before them.
# A call of any of the three checks, and its exercise's name: check("1", ...), check_value("2b", ...)
CHECK_CALL = r"\bcheck(?:_function|_value)?\(\s*\"([^\"]+)\""
STANDARD_DATES = {"2000-01-01", "2005-01-01", "2016-12-31", "2017-01-01", "2018-12-31", "2019-01-01",
                  "2022-12-31"}


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def code(path: Path) -> list[str]:
    return ["".join(c["source"]) for c in cells(path) if c["cell_type"] == "code"]


# ---------------------------------------------------------------------------- the checker
@pytest.fixture
def lenient(monkeypatch):
    """The default mode, whatever an earlier test or the environment set (tests/test_grading.py tests the modes)."""
    monkeypatch.delenv(course.STRICT_ENV, raising=False)
    set_strict(None)
    yield
    set_strict(None)


def test_check_unanswered_does_not_fail(capsys, lenient):
    result = check("1", ..., lambda a: a > 0, "hint")
    assert not result and result.status == "unanswered"
    assert "not answered yet" in capsys.readouterr().out
    assert is_unanswered((1.0, ...)) and is_unanswered({"a": ...}) and not is_unanswered(0)


def test_check_right_and_wrong_answers(capsys, lenient):
    right = check("2", 3, lambda a: a == 3, "hint", success="three")
    assert right and right.status == "ok"
    assert "Exercise 2: ok. three" in capsys.readouterr().out
    wrong = check("3", 4, lambda a: a == 3, "add one")  # lenient: reported, and Run All goes on
    assert not wrong and wrong.status == "wrong" and "Hint: add one" in capsys.readouterr().out
    with pytest.raises(ExerciseFailed, match=r"Exercise 3: not yet right \(your answer: 4\)\. Hint: add one"):
        check("3", 4, lambda a: a == 3, "add one", strict=True)


def test_check_reports_an_answer_of_the_wrong_kind(lenient):
    with pytest.raises(ExerciseFailed, match="Exercise 4: checking 'abc' raised TypeError.*Hint: a number"):
        check("4", "abc", lambda a: a + 1 > 0, "a number", strict=True)
    with pytest.raises(TypeError, match="condition must be a function"):
        check("5", 1, True, "hint")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- the notebooks
def test_the_sequence_is_numbered_without_gaps():
    numbers = [int(p.name[:2]) for p in LESSONS]
    assert numbers == list(range(0, len(numbers))), [p.name for p in LESSONS]
    assert len(LESSONS) >= 13


@pytest.mark.parametrize("path", LESSONS + SOLVED, ids=lambda p: p.parent.name + "/" + p.name)
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
    checks = sum(len(re.findall(CHECK_CALL, src)) for src in sources)
    most = 5 if number == "00" else 4  # 00, the foundations, has five exercises
    assert 2 <= checks <= most, f"{path.name}: 2-{most} checks (check, check_function, check_value), found {checks}"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_every_lesson_has_a_source_that_answers_and_tests_every_exercise(path):
    source = SOURCES / path.name
    assert source.exists(), f"no source/{path.name}"
    lesson_checks = re.findall(CHECK_CALL, "\n".join(code(path)))
    source_cells = cells(source)
    source_checks = re.findall(CHECK_CALL, "\n".join(c for c in code(source) if not c.startswith("# HIDDEN")))
    assert sorted(lesson_checks) == sorted(source_checks), f"source/{path.name} should check {lesson_checks}"
    hidden = [c for c in code(source) if c.startswith("# HIDDEN")]
    assert len(hidden) == len(lesson_checks), f"source/{path.name}: one hidden test per check, found {len(hidden)}"
    questions = ["".join(c["source"]) for c in source_cells if c["cell_type"] == "raw"
                 and "".join(c["source"]).startswith("# BEGIN QUESTION")]
    assert questions and len(questions) <= len(lesson_checks), f"source/{path.name}: its exercises as questions"
    for src in code(source):
        if "# BEGIN SOLUTION NO PROMPT" in src:
            answer = src.split("# BEGIN SOLUTION NO PROMPT", 1)[1]
            assert not re.search(r"=\s*\.\.\.(\s|#|$)", answer), f"source/{path.name} leaves a `...` answer:\n{src}"


# ---------------------------------------------------------------------------- exercises a lecturer can grade
EXPECT_VALUE = re.compile(r"\bexpect_value\([^,]+,\s*(-?[\d.]+)(?:,\s*digits=(\d+))?")
NUMBER = re.compile(r"(?<![\w.])-?\d[\d,_]*(?:\.\d+)?(?:[eE][-+]?\d+)?")  # -1,974  0.3241  2_048  1e-3


def written_numbers(text: str) -> set[float]:
    """The numbers written in ``text`` with 3 significant digits or more, with either sign. Shorter ones
    (0.5, 200) are everywhere in a lesson, and an answer that short cannot be kept out of sight anyway."""
    found = set()
    for token in NUMBER.findall(text):
        token = token.replace(",", "").replace("_", "")
        try:
            x = float(token)
        except ValueError:
            continue
        if len(re.split(r"[eE]", token.lstrip("-"))[0].replace(".", "").strip("0")) >= 3:
            found |= {x, -x}
    return found


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_no_lesson_shows_a_hidden_answer(path):
    """No number written in the student's lesson, in a cell or a hint, is the value a hidden test expects
    (rounded to the test's decimals): the student's files hold no expected value."""
    candidates = written_numbers("\n".join("".join(c["source"]) for c in cells(path)))
    for expected, digits in EXPECT_VALUE.findall("\n".join(code(SOURCES / path.name))):
        d = int(digits or 0)
        shown = [x for x in candidates if round(x, d) == round(float(expected), d)]
        assert not shown, f"{path.name} writes {shown[0]}, the value a hidden test expects: take it out"


COLAB_BADGE = re.compile(r"\[!\[Open In Colab\]\(https://colab\.research\.google\.com/assets/colab-badge\.svg\)\]"
                         r"\(https://colab\.research\.google\.com/github/[\w.-]+/[\w.-]+/blob/main/notebooks/([^)\s]+)\)")


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_every_lesson_opens_on_colab(path):
    """A badge in the title cell that opens the lesson on Colab, and course.COLAB_CELL as the first code
    cell (the course's default extras, notebooks/source/hosted.yaml, and those the lesson adds: cluster
    for 12, locomotion for 13)."""
    match = COLAB_BADGE.search("".join(cells(path)[0]["source"]))
    assert match, f"{path.name}: the title cell needs a Colab badge linking .../blob/main/notebooks/{path.name}"
    assert match.group(1) == path.name, f"{path.name}: its Colab badge opens {match.group(1)}"
    first = code(path)[0]
    extras = re.search(r'"podracer-rl\[([a-z,]+)\]"', first)
    default = course.default_extras().split(",")
    assert extras and set(default) <= set(extras.group(1).split(",")), (
        f"{path.name}: the first code cell should be COLAB_CELL, installing at least podracer-rl[{','.join(default)}]")
    assert first == course.colab_cell(extras.group(1)), (
        f"{path.name}: the first code cell should be course.COLAB_CELL (podracer.course.add_colab_cell inserts it)")


def test_the_install_extras_are_the_course_s_data_not_its_code(tmp_path, monkeypatch):
    """podracer.course is a tool over the domains (docs/architecture.md): the extras its Colab cell
    installs by default come from notebooks/source/hosted.yaml, and it names no domain in its code."""
    import tokenize
    import tomllib

    from podracer.course import release

    assert course.default_extras() == release.hosted_settings()["extras"]
    settings = tmp_path / "hosted.yaml"
    settings.write_text("repository: uni/rl\nref: main\ninstall: podracer-rl\nextras: cluster\n")
    monkeypatch.setattr(release, "HOSTED", settings)
    assert course.install_requirement() == course.COLAB_PIP == "podracer-rl[cluster]"
    assert '"podracer-rl[cluster]"' in course.COLAB_CELL and course.colab_cell("notebooks") != course.COLAB_CELL
    settings.write_text("repository: uni/rl\nref: main\ninstall: podracer-rl\nextras: '[x]'\n")
    with pytest.raises(ValueError, match="extras must name the package's optional dependencies"):
        course.default_extras()
    monkeypatch.setattr(release, "HOSTED", tmp_path / "missing.yaml")
    with pytest.raises(FileNotFoundError, match="pass extras= and install= explicitly"):
        course.colab_cell()
    assert course.install_requirement("cluster") == "podracer-rl[cluster]"  # explicit extras need no settings
    project = tomllib.loads((NOTEBOOKS.parent / "pyproject.toml").read_text())["project"]
    domains = set(project["entry-points"]["podracer.domains"])  # finance, locomotion
    assert domains
    for path in sorted(Path(course.__file__).parent.glob("*.py")):
        with path.open("rb") as f:
            named = [t for t in tokenize.tokenize(f.readline) if t.type in (tokenize.NAME, tokenize.STRING)
                     and any(d in t.string for d in domains)]
        assert not named, f"{path.name} names a domain at line {named[0].start[0]}: {named[0].string[:80]}"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_the_colab_cell_does_nothing_outside_colab(path):
    # What IPython runs for the cell (its %pip line becomes a get_ipython() call inside the `if`), here.
    from IPython.core.inputtransformer2 import TransformerManager

    first = code(path)[0]
    assert "google.colab" in first, f"{path.name}: the first code cell is not the Colab cell"
    python = TransformerManager().transform_cell(first)
    called = []
    assert "google.colab" not in sys.modules
    # Nothing may be installed or started: %pip, a subprocess, os.system all count as work done.
    with pytest.MonkeyPatch.context() as mp:
        for name in ("run", "Popen", "call", "check_call", "check_output"):
            mp.setattr(subprocess, name, lambda *a, _n=name, **k: called.append(f"subprocess.{_n}"))
        mp.setattr(os, "system", lambda *a, **k: called.append("os.system"))
        exec(compile(python, path.name, "exec"), {"get_ipython": lambda: called.append("get_ipython")})
    assert not called, called


ASKS = re.compile(r"\*\*(?:Why|Predict|Derive)\b")
EXERCISE_HEADING = re.compile(r"###\s+Exercise\s+(\w+)")


def exercise_sections(path: Path) -> dict[str, list[dict]]:
    """The cells after each '### Exercise N' heading, up to the next heading, by N."""
    sections, current = {}, None
    for cell in cells(path):
        text = "".join(cell["source"]).lstrip()
        if cell["cell_type"] == "markdown" and text.startswith("#"):
            match = EXERCISE_HEADING.match(text)
            current = match.group(1) if match else None
            if current:
                sections[current] = [cell]
        elif current:
            sections[current].append(cell)
    return sections


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_solutions_answer_the_questions_in_prose(path):
    """An exercise that asks why, or to predict or derive first, has its answer in words in the solution:
    a markdown cell of at least a few sentences, not only code."""
    answered = exercise_sections(SOURCES / path.name)
    for number, part in exercise_sections(path).items():
        if not any(cell["cell_type"] == "markdown" and ASKS.search("".join(cell["source"])) for cell in part):
            continue
        prose = [cell for cell in answered.get(number, []) if cell["cell_type"] == "markdown"
                 and len("".join(cell["source"])) >= 150]
        assert prose, f"source/{path.name}: exercise {number} asks why (or to predict, or derive): answer it in prose"


# ---------------------------------------------------------------------------- each lesson runs once
def _root_conftest():
    """The repository's conftest.py, loaded by path (``import conftest`` names tests/conftest.py)."""
    spec = importlib.util.spec_from_file_location("_podracer_root_conftest", NOTEBOOKS.parent / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_collection_leaves_out_the_student_notebooks_and_keeps_the_sources():
    """CI executes each lesson once, through its source; the student's notebook is built from it."""
    conftest = _root_conftest()
    assert all(conftest.pytest_ignore_collect(p, None) is True for p in LESSONS)
    assert all(conftest.pytest_ignore_collect(p, None) is None for p in SOLVED)


@pytest.mark.slow
def test_the_lessons_that_start_pods_run_in_their_scope():
    """conftest.py names lessons by number ("notebooks/source/12_"): after a renumbering, the lesson on
    Ray must still be in the RAY_LESSON scope, the tournaments of local pods in LOCAL, and no other lesson in either."""
    conftest = _root_conftest()
    for path in SOLVED:
        text, node = "\n".join(code(path)), f"notebooks/source/{path.name}::{path.name}"
        expected = "ray-lesson" if 'backend="ray"' in text else "local" if "Tournament(" in text else node
        assert conftest._scope(node) == expected, f"source/{path.name} runs in scope {conftest._scope(node)!r}"
    assert sum(conftest._scope(f"notebooks/source/{p.name}::{p.name}") != f"notebooks/source/{p.name}::{p.name}"
               for p in SOLVED) == 3


def test_nbmake_collects_the_sources_and_not_the_student_notebooks():
    # the caller's PYTEST_ADDOPTS (-v, say) would change the listing this reads, so it is left out
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    res = subprocess.run([sys.executable, "-m", "pytest", "notebooks", "--nbmake", "--collect-only", "-q",
                          "-p", "no:cacheprovider"], cwd=NOTEBOOKS.parent, capture_output=True, text=True, timeout=300,
                         env=env)
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


# "lesson 09", "Notebook 03's", "lessons 10-12", "notebooks 00 (the RL objective), 07 (...) and 09 (...)",
# "lesson 00 §3": a word, then a list of two-digit numbers, ranges and parenthetical remarks.
_ITEM = r"\d\d(?:\s*§[\d\-–]+)?(?:\s*\([^()]*\))?"
_JOIN = r"\s*(?:-|–|,|,?\s+and|,?\s+or|to)\s*"
LESSON_REFERENCE = re.compile(rf"\b(?:[Nn]otebooks?|[Ll]essons?)\s+({_ITEM}(?:{_JOIN}{_ITEM})*)")
LESSON_FILE = re.compile(r"\b(\d\d_[a-z][a-z_]*)\.(?:ipynb|html|slides\.html)\b")


def _course_texts() -> dict[str, str]:
    """The text of every file a reader meets the lessons' numbers in: the notebooks (cell sources),
    the glossary, docs/ and the README."""
    root = NOTEBOOKS.parent
    texts = {p.relative_to(root).as_posix(): "\n".join("".join(c["source"]) for c in cells(p))
             for p in sorted(NOTEBOOKS.glob("*.ipynb")) + sorted(SOURCES.glob("*.ipynb"))}
    for p in [GLOSSARY, root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        texts[p.relative_to(root).as_posix()] = p.read_text()
    return texts


def test_every_lesson_reference_names_an_existing_lesson():
    """A renumbering (the tabular lesson became 01) must leave no "lesson 14" or "notebook 07" pointing
    past the course or at a file that is gone: every number after "lesson(s)"/"notebook(s)", and
    every NN_name.ipynb, names a lesson in notebooks/."""
    numbers, stems = {p.name[:2] for p in LESSONS}, {p.stem for p in LESSONS}
    checked, wrong = 0, []
    for name, text in _course_texts().items():
        for match in LESSON_REFERENCE.finditer(text):
            listed = re.sub(r"\([^()]*\)|§[\d\-–]+", "", match.group(1))  # remarks and sections are not lessons
            for n in re.findall(r"\d\d", listed):
                checked += 1
                if n not in numbers:
                    wrong.append(f"{name}: '{match.group(0).strip()}' names lesson {n}")
        for stem in LESSON_FILE.findall(text):
            checked += 1
            if stem not in stems:
                wrong.append(f"{name}: {stem}.ipynb is not a lesson")
        if name.endswith("GLOSSARY.md"):  # each entry ends with the lessons that use it: "(03, 04, 13)"
            for listed in re.findall(r"\((\d\d(?:, \d\d)*)\)\s*$", text, flags=re.M):
                checked += 1
                wrong += [f"GLOSSARY.md: ({listed}) names lesson {n}" for n in listed.split(", ") if n not in numbers]
    assert checked > 100, f"only {checked} lesson references found: has the pattern stopped matching?"
    assert not wrong, "\n".join(wrong)


def dates_in(path: Path) -> set[str]:
    return set(re.findall(r"\b(?:19|20)\d\d-\d\d-\d\d\b", "\n".join(code(path))))


# Every notebook trades the same market on the same dates; 06 (data), 08 (a date control) and 09
# (walk-forward) are about changing them. Most notebooks hold no date at all (01-05, 10, 12, 13 are
# not about markets), so the check runs on the ones that do, and the lessons that trade the
# standard market must be among them.
CHANGE_THE_DATES = ("06_market_data", "08_interactive_backtest", "09_overfitting")
TRADE_THE_MARKET = ("07_trading_env.ipynb", "11_trading_tournament.ipynb")
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


@pytest.mark.slow  # starts a Jupyter kernel
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


# ---------------------------------------------------------------------------- every figure shown, once
# Issue 24: a figure must show exactly once whatever its cell ends with (a value, `;`, an
# assignment, display()), in a lesson run alone and in one run by its solution (run_lesson runs
# each lesson cell as a cell inside the solution's first cell), checked in a real kernel on a real
# lesson and on every ending. tests/test_figures.py tests the figure itself.
FIGURE_SETUP = """\
import dataclasses
import numpy as np, pandas as pd, torch
from finance.backtest import BacktestResult, backtest
from finance.walk_forward import WalkForwardResult
rng = np.random.default_rng(0)
close = pd.DataFrame(50 * np.exp(np.cumsum(rng.normal(2e-4, 0.02, (80, 3)), axis=0)),
                     index=pd.bdate_range("2019-01-02", periods=80, name="date"), columns=list("ABC"))
r = backtest(lambda obs: torch.full((1, 3), 0.2), close, benchmark=close.mean(axis=1), name="steady")
walked = WalkForwardResult(**{f.name: getattr(r, f.name) for f in dataclasses.fields(BacktestResult)},
                           windows=pd.DataFrame({"test_start": close.index[[0, 40]]}))"""
FIGURE_CELLS = [  # (source, images it must show)
    (FIGURE_SETUP, 0),
    ("r.plot()", 1),  # the cell's value
    ("r.plot();", 1),  # no value: shown when the cell ends
    ("r.plot()\nimport gc\ncollected = gc.collect()", 1),  # no reference left to it: shown all the same
    ("fig = r.plot()\nprint('made')", 1),
    ("fig", 1),  # asked for again: shown again
    ("display(r.plot())", 1),
    ("walked.plot();", 1),
    ("import matplotlib.pyplot as plt\nfig2, ax = plt.subplots(figsize=(3, 2))\nax.plot([1, 2])", 1),  # pyplot
    ("plt.plot([1]);\nplt.show()", 1),
    ("r.metrics()", 0),
    ("x = 1", 0),  # nothing left over from the cells before
]


def output_kinds(cell) -> list[tuple[str, str]]:
    """What a cell showed, in order: images, printed text, results (by type, not by value)."""
    kinds = []
    for out in cell.outputs:
        if out["output_type"] == "stream":
            kinds.append(("stream", out["text"]))
        else:
            kinds.append((out["output_type"], "image" if "image/png" in out.get("data", {}) else "other"))
    return kinds


def images(cell) -> int:
    return sum(kind == "image" for _, kind in output_kinds(cell))


def draws(source: str) -> bool:
    """A lesson cell that draws a figure: a backtest's or walk-forward's .plot(), or pyplot."""
    return bool(re.search(r"\.plot\(|\bplt\.", source))


@pytest.mark.slow  # a lesson at smoke size in a Jupyter kernel
def test_run_lesson_shows_each_figure_once_whatever_the_cell_ends_with(tmp_path, monkeypatch):
    # One kernel runs, in turn: lesson 07 alone (the lesson whose backtest figures were never shown);
    # every way a cell can end with a figure; and the same cells again through run_lesson.
    import nbformat

    lesson = nbformat.v4.new_notebook()
    lesson.cells = [nbformat.v4.new_code_cell(src) for src, _ in FIGURE_CELLS]
    nbformat.write(lesson, tmp_path / "lesson.ipynb")
    real = [c for c in nbformat.read(NOTEBOOKS / "07_trading_env.ipynb", as_version=4).cells if c.cell_type == "code"]
    notebook = nbformat.v4.new_notebook()
    notebook.cells = real + [nbformat.v4.new_code_cell(src) for src, _ in FIGURE_CELLS] + [nbformat.v4.new_code_cell(
        f"from podracer.course import run_lesson\nrun_lesson({str(tmp_path / 'lesson.ipynb')!r})")]
    monkeypatch.setenv("PODRACER_SIZE", "smoke")
    # course.notebook_client, not nbclient's NotebookClient: lesson 07's backtest_view draws into an Output
    # widget, and nbclient's stand-in for it could leave that cell waiting out the whole timeout (600 s)
    # for a reply that had come in (jupyter/nbclient#312), then pass.
    course.notebook_client(notebook, kernel_name="python3", timeout=600,
                           resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    ran, alone, solution = notebook.cells[:len(real)], notebook.cells[len(real):-1], notebook.cells[-1]

    shown = [(images(cell), int(draws(cell.source)), cell.source.strip()[-60:]) for cell in ran]
    assert sum(expected for _, expected, _ in shown) >= 2
    assert all(got == expected for got, expected, _ in shown), [s for s in shown if s[0] != s[1]]
    for (src, expected), cell in zip(FIGURE_CELLS, alone):
        assert images(cell) == expected, f"{src!r} showed {images(cell)} image(s), not {expected}: {output_kinds(cell)}"
    made = alone[[src for src, _ in FIGURE_CELLS].index("fig = r.plot()\nprint('made')")]
    assert output_kinds(made)[0] == ("stream", "made\n")  # shown when the cell ends, after its output
    # Through run_lesson: the same outputs in the same order, in the solution's cell.
    assert output_kinds(solution) == [kind for cell in alone for kind in output_kinds(cell)]


@pytest.mark.slow  # starts a Jupyter kernel
def test_notebook_client_does_not_wait_out_the_timeout_after_an_output_widget(monkeypatch):
    # nbclient echoes what an Output widget shows back to the kernel on the shell socket while it awaits
    # the cell's reply there; its blocking send could swallow the wake-up for the reply, and the cell
    # then waited out its whole timeout and passed (jupyter/nbclient#312). A client slowed down, as on a
    # busy machine, made every such cell wait; course.notebook_client must not.
    import nbformat
    from nbclient.output_widget import OutputWidget

    shown = OutputWidget.output

    def late(self, *args, **kwargs):  # the reply is in by the time the client echoes the output
        time.sleep(0.05)
        return shown(self, *args, **kwargs)

    monkeypatch.setattr(OutputWidget, "output", late)
    notebook = nbformat.v4.new_notebook()
    source = "import ipywidgets\nout = ipywidgets.Output()\nwith out:\n    display({'text/plain': 'drawn'}, raw=True)\n"
    notebook.cells = [nbformat.v4.new_code_cell(source + "out") for _ in range(5)]
    started, took = {}, []
    client = course.notebook_client(notebook, kernel_name="python3", timeout=15,
                                    on_cell_execute=lambda cell, cell_index: started.update(at=time.monotonic()),
                                    on_cell_executed=lambda cell, cell_index, execute_reply: took.append(
                                        time.monotonic() - started["at"]))
    client.execute()
    assert len(took) == 5 and max(took) < 10, f"cells waited out the 15 s timeout: {[round(t, 1) for t in took]}"
    outputs = [state.get("outputs") for state in client.widget_state.values() if "outputs" in state]
    assert outputs == [[{"output_type": "display_data", "metadata": {}, "data": {"text/plain": "drawn"}}]] * 5


# ---------------------------------------------------------------------------- one table of times
def _times() -> dict:
    import yaml

    return yaml.safe_load((SOURCES / "times.yaml").read_text())


def test_the_lessons_times_are_measured_at_the_learning_size_for_every_lesson():
    times = _times()
    assert times["size"] == "full" and set(times["seconds"]) == {p.stem for p in LESSONS}
    assert all(seconds > 0 for seconds in times["seconds"].values())


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_each_lesson_s_header_states_its_measured_time(path):
    from podracer.course.release import lesson_time

    header = "".join(cells(SOURCES / path.name)[0]["source"])
    stated = lesson_time(_times()["seconds"][path.stem])
    assert f"**Time:** about {stated}" in header, (
        f"{path.name}: the header should say '**Time:** about {stated}' (notebooks/source/times.yaml; "
        f"`python -m podracer.course times` measures them again)")


def test_the_readme_and_the_syllabus_quote_the_measured_times():
    from podracer.course.release import clock, lesson_time

    seconds = _times()["seconds"]
    readme = (NOTEBOOKS.parent / "docs" / "course.md").read_text()  # the README's course table, moved there
    for stem, value in seconds.items():
        row = re.search(rf"^\| `{stem}` \|.*\| ([^|]+) \| [^|]+ \|$", readme, flags=re.M)
        assert row and row.group(1).strip() == clock(value), f"docs/course.md's row for {stem}: full should be {clock(value)}"
    syllabus = (NOTEBOOKS.parent / "docs" / "syllabus.md").read_text()
    weeks = re.findall(r"^\| (\d+) \|[^|]+\|([^|]*)\|[^|]*\|[^|]*\|([^|]*)\|", syllabus, flags=re.M)
    assert len(weeks) == 12
    for week, lab, compute in weeks:
        lessons = {f"{int(n):02d}" for n in re.findall(r"\b(\d\d)\b", lab)}
        if not lessons:
            continue
        total = sum(v for stem, v in seconds.items() if stem[:2] in lessons)
        assert compute.strip() == lesson_time(total), f"syllabus week {week}: compute should be {lesson_time(total)}"


def test_the_scopes_hand_out_the_longest_work_first(tmp_path, monkeypatch):
    """xdist hands out scopes in collection order: conftest sorts the collection by each scope's
    expected seconds (tests/durations.json), keeping a scope's tests in their own order."""
    conftest = _root_conftest()

    class Item:
        def __init__(self, nodeid: str):
            self.nodeid = nodeid

    ids = ["tests/test_a.py::fast", "tests/test_ray_backend.py::one", "tests/test_b.py::slow",
           "tests/test_ray_backend.py::two", "tests/test_c.py::unknown"]
    items = [Item(i) for i in ids]
    seconds = {"tests/test_b.py::slow": 100.0, "tests/test_ray_backend.py::one": 60.0,
               "tests/test_ray_backend.py::two": 60.0}
    (tmp_path / "durations.json").write_text(json.dumps(seconds))
    monkeypatch.setattr(conftest, "DURATIONS", tmp_path / "durations.json")
    conftest._longest_scopes_first(items)
    assert [i.nodeid for i in items] == ["tests/test_ray_backend.py::one", "tests/test_ray_backend.py::two",
                                         "tests/test_b.py::slow", "tests/test_a.py::fast", "tests/test_c.py::unknown"]
    assert conftest._scope("notebooks/source/12_ray_cluster.ipynb::12_ray_cluster.ipynb") == "ray-lesson"
    assert conftest._scope("tests/test_readme.py::test_x[tournament-block0-ray]") == "ray-lesson"
    assert conftest._scope("tests/test_cluster_faults.py::test_y") == "ray"
