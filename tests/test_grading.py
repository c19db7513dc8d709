"""The grading API of podracer.course (issue 24): lenient and strict checks, functions written from
scratch against the library's, hidden answers, tiered hints, the Colab cell, source pointers, slides."""

from __future__ import annotations

import json
import sys
import tomllib
import types
from pathlib import Path

import pytest
import torch

from podracer import course
from podracer.agents import ppo
from podracer.course import (COLAB_CELL, CheckResult, ExerciseFailed, add_colab_cell, check, check_function,
                             check_value, hidden, record_answer, same_as, set_strict, where)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"


@pytest.fixture(autouse=True)
def _lenient(monkeypatch):
    """Each test starts in the default mode with no hints revealed, whatever the previous one did."""
    monkeypatch.delenv(course.STRICT_ENV, raising=False)
    monkeypatch.delenv(course.ANSWERS_ENV, raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    set_strict(None)
    course._attempts.clear()
    course._results.clear()
    yield
    set_strict(None)
    course._attempts.clear()
    course._results.clear()


# ---------------------------------------------------------------------------- check: never raises by default
def test_a_wrong_answer_is_reported_and_the_notebook_goes_on(capsys):
    result = check("3", 4, lambda a: a == 3, "add one")
    out = capsys.readouterr().out
    assert isinstance(result, CheckResult) and not result and result.status == "wrong"
    assert "✗ Exercise 3: not yet right (your answer: 4). Hint: add one" in out


def test_right_and_unanswered_answers(capsys):
    right = check("2", 3, lambda a: a == 3, "hint", success="three")
    assert right and right.ok and right.status == "ok"
    assert "✓ Exercise 2: ok. three" in capsys.readouterr().out
    unanswered = check("1", ..., lambda a: a > 0, "hint")
    assert not unanswered and unanswered.status == "unanswered"
    assert "Exercise 1: not answered yet" in capsys.readouterr().out
    assert check("1b", (1.0, ...), lambda a: True, "hint").status == "unanswered"


def test_a_condition_that_raises_is_a_wrong_answer_explained(capsys):
    result = check("4", "abc", lambda a: a + 1 > 0, "a number")
    assert result.status == "wrong"
    assert "Exercise 4: checking 'abc' raised TypeError" in capsys.readouterr().out
    with pytest.raises(TypeError, match="condition must be a function"):
        check("5", 1, True, "hint")  # type: ignore[arg-type]  (a mistake in the notebook, not in the answer)


def test_colours_unless_no_color(monkeypatch, capsys):
    monkeypatch.delenv("NO_COLOR")
    check("1", 1, lambda a: a == 2, "hint")
    check("2", 2, lambda a: a == 2, "hint")
    out = capsys.readouterr().out
    assert "\x1b[31m✗ Exercise 1" in out and "\x1b[32m✓ Exercise 2" in out


# ---------------------------------------------------------------------------- strict mode
def test_strict_by_argument_by_environment_and_by_set_strict(monkeypatch):
    with pytest.raises(ExerciseFailed, match=r"Exercise 3: not yet right \(your answer: 4\)\. Hint: add one"):
        check("3", 4, lambda a: a == 3, "add one", strict=True)
    monkeypatch.setenv(course.STRICT_ENV, "1")
    with pytest.raises(ExerciseFailed, match="Exercise 4: checking 'abc' raised TypeError.*Hint: a number"):
        check("4", "abc", lambda a: a + 1 > 0, "a number")
    assert check("5", 4, lambda a: a == 3, "hint", strict=False).status == "wrong"  # the argument wins
    monkeypatch.delenv(course.STRICT_ENV)
    set_strict(True)
    with pytest.raises(ExerciseFailed):
        check("6", 4, lambda a: a == 3, "hint")
    assert check("7", ..., lambda a: a == 3, "hint").status == "unanswered"  # strict, but answers not required
    assert issubclass(ExerciseFailed, AssertionError)  # pytest and nbmake report it as a failed assertion


def test_a_solutions_notebook_must_answer_every_exercise():
    set_strict(True, require_answers=True)  # what run_lesson leaves behind
    with pytest.raises(ExerciseFailed, match="Exercise 1: not answered yet.*must answer every exercise"):
        check("1", ..., lambda a: True, "hint")
    with pytest.raises(ExerciseFailed, match="returns None"):
        check_function("2", lambda x: None, lambda x: x, lambda g: 1.0)
    assert check("3", 3, lambda a: a == 3, "hint")


@pytest.fixture
def ipython(tmp_path, monkeypatch):
    """An IPython shell in this process (no kernel, no history file), removed afterwards."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    for name in ("displayhook", "excepthook"):  # put back what the shell replaces, for the next tests
        monkeypatch.setattr(sys, name, getattr(sys, name))
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell.instance(config=config)
    yield shell
    InteractiveShell.clear_instance()


def test_run_lesson_makes_the_rest_of_a_solutions_notebook_strict(tmp_path, ipython, capsys):
    import nbformat

    lesson = nbformat.v4.new_notebook()
    lesson.cells = [nbformat.v4.new_code_cell("from podracer.course import check\nanswer = ...  # your answer"),
                    nbformat.v4.new_code_cell('check("1", answer, lambda a: a == 42, "six times seven")')]
    nbformat.write(lesson, tmp_path / "07_demo.ipynb")
    course.run_lesson(str(tmp_path / "07_demo.ipynb"))  # the lesson's unanswered check does not stop it
    assert "Exercise 1: not answered yet" in capsys.readouterr().out
    right = ipython.run_cell('answer = 6 * 7\ncheck("1", answer, lambda a: a == 42, "six times seven")')
    assert right.success and "CheckResult" not in capsys.readouterr().out  # no stray value under the message
    wrong = ipython.run_cell('check("1", 41, lambda a: a == 42, "six times seven")')
    assert isinstance(wrong.error_in_exec, ExerciseFailed)  # a wrong solution fails the notebook
    unanswered = ipython.run_cell('check("1", ..., lambda a: a == 42, "six times seven")')
    assert isinstance(unanswered.error_in_exec, ExerciseFailed)


def test_results_keeps_the_latest_status_of_each_exercise():
    check("1", 1, lambda a: a == 2, "hint")
    check("2", ..., lambda a: a == 2, "hint")
    check("3", 2, lambda a: a == 2, "hint")
    check("1", 2, lambda a: a == 2, "hint")  # right at the second try
    assert course.results() == {"1": "ok", "2": "unanswered", "3": "ok"}


def test_check_result_shows_nothing_as_a_cells_value():
    from IPython.core.formatters import DisplayFormatter

    result = check("1", 3, lambda a: a == 3, "hint")
    assert DisplayFormatter().format(result) == ({}, {})  # no Out[] under the check's own message
    assert bool(result) is True and bool(check("2", 1, lambda a: a == 3, "hint")) is False


# ---------------------------------------------------------------------------- tiered hints
def test_hints_are_revealed_one_more_per_wrong_try(capsys):
    hints = ["vague", "closer", "the answer, nearly"]
    check("1", 0, lambda a: a == 1, hints=hints)
    first = capsys.readouterr().out
    assert "Hint 1 of 3: vague" in first and "closer" not in first and "after your next try" in first
    check("1", 0, lambda a: a == 1, hints=hints)
    second = capsys.readouterr().out
    assert "Hint 2 of 3: closer" in second and "nearly" not in second
    check("1", 0, lambda a: a == 1, hints=hints)
    check("1", 0, lambda a: a == 1, hints=hints)
    fourth = capsys.readouterr().out.split("✗")[-1]
    assert "Hint 3 of 3: the answer, nearly" in fourth and "after your next try" not in fourth
    check("2", 0, lambda a: a == 1, ["a list as hint", "is taken as hints"])  # other exercise: its own count
    out = capsys.readouterr().out
    assert "Hint 1 of 2: a list as hint" in out and "is taken as hints" not in out


# ---------------------------------------------------------------------------- functions from scratch
def random_rollout(g: torch.Generator) -> tuple:
    T, N = (int(x) for x in torch.randint(1, 7, (2,), generator=g))
    flags = torch.rand(2, T, N, generator=g) < 0.25
    return (torch.randn(T, N, generator=g), torch.randn(T, N, generator=g), torch.randn(T, N, generator=g),
            flags[0], flags[1], 0.9, 0.8)


def gae_by_hand(rewards, values, next_values, terminated, truncated, gamma, gae_lambda, bootstrap_terminal=False):
    advantages, running = torch.zeros_like(values), torch.zeros_like(values[0])
    for t in reversed(range(len(values))):
        keep = torch.ones_like(values[t]) if bootstrap_terminal else (~terminated[t]).float()
        delta = rewards[t] + gamma * keep * next_values[t] - values[t]
        running = delta + gamma * gae_lambda * (~(terminated[t] | truncated[t])).float() * running
        advantages[t] = running
    return advantages, advantages + values


def test_check_function_accepts_a_right_implementation(capsys):
    result = check_function("2", gae_by_hand, ppo.compute_gae, random_rollout)
    assert result.ok
    assert "Exercise 2: ok, same as `compute_gae` on 20 random inputs." in capsys.readouterr().out


def test_check_function_names_the_input_and_the_element_that_differ(capsys):
    def bootstraps_terminal_steps(*args):
        return gae_by_hand(*args, bootstrap_terminal=True)

    result = check_function("2", bootstraps_terminal_steps, ppo.compute_gae, random_rollout, hints=["look at δ"])
    out = capsys.readouterr().out
    assert result.status == "wrong"
    assert "on random input" in out and "rewards=tensor of shape" in out and "gamma=0.9" in out
    assert "output 0 at index" in out and "largest difference" in out and "Hint 1 of 1: look at δ" in out


def test_check_function_reports_shapes_types_and_errors(capsys):
    make = lambda g: (torch.randn(3, 2, generator=g),)  # noqa: E731
    assert check_function("a", lambda x: x.sum(0), lambda x: x, make).status == "wrong"
    assert "has shape (2,), expected (3, 2)" in capsys.readouterr().out
    assert check_function("b", lambda x: (x,), lambda x: (x, x), make).status == "wrong"
    assert "should be a tuple of 2" in capsys.readouterr().out
    assert check_function("c", lambda x: x[5], lambda x: x, make).status == "wrong"
    assert "raised IndexError" in capsys.readouterr().out
    assert check_function("d", 3.0, lambda x: x, make).status == "wrong"
    assert "expected a function" in capsys.readouterr().out
    assert check_function("e", lambda x: {"a": 1.0}, lambda x: {"a": 1.0 + 1e-9}, make).ok  # within tolerance
    assert check_function("f", lambda x: x.numpy(), lambda x: x, make).ok  # arrays and tensors compare


def test_a_stub_is_not_answered_yet(capsys):
    def stub(x):
        ...  # your code

    def raises(x):
        raise NotImplementedError

    make = lambda g: torch.randn(3, generator=g)  # noqa: E731  (one value: one positional argument)
    assert check_function("1", stub, torch.exp, make).status == "unanswered"
    assert "returns None" in capsys.readouterr().out
    assert check_function("2", raises, torch.exp, make).status == "unanswered"
    assert check_function("3", ..., torch.exp, make).status == "unanswered"


def test_each_function_gets_its_own_copy_of_the_inputs():
    def scribbles(x):
        x.mul_(0)  # writes into its input
        return x

    def reference(x):
        return x.clone()

    make = lambda g: {"x": torch.ones(3)}  # noqa: E731  (a dict: keyword arguments)
    assert check_function("1", scribbles, reference, make).status == "wrong"  # its zeros, not the reference's ones
    # the same inputs on every run: a deterministic check
    seen = []
    same_as(lambda x: x, lambda g: seen.append(torch.rand(1, generator=g).item()) or 0.0, n=3).evaluate(lambda x: x)
    again = []
    same_as(lambda x: x, lambda g: again.append(torch.rand(1, generator=g).item()) or 0.0, n=3).evaluate(lambda x: x)
    assert seen == again and len(set(seen)) == 3


def test_check_is_the_same_with_a_condition_object(capsys):
    assert check("2", gae_by_hand, same_as(ppo.compute_gae, random_rollout, n=5)).ok
    assert "on 5 random inputs" in capsys.readouterr().out


# ---------------------------------------------------------------------------- hidden values
def test_check_value_against_a_hidden_answer(tmp_path, capsys):
    answers = tmp_path / "answers.json"
    record_answer("07_x/1", 4.2504, digits=3, path=answers)
    record_answer("07_x/2", "momentum", path=answers)
    text = answers.read_text()
    assert "4.25" not in text and "momentum" not in text  # out of the reader's sight
    assert check_value("1", 4.2504, lesson="07_x", answers=answers).ok
    assert check_value("1", torch.tensor(4.2509), lesson="07_x", answers=answers).ok  # rounds to 4.251: one off
    assert check_value("1", 4.2496, lesson="07_x", answers=answers).ok
    wrong = check_value("1", 4.26, lesson="07_x", answers=answers, hints=["recompute"])
    assert wrong.status == "wrong"
    out = capsys.readouterr().out
    assert "your answer: 4.26, which is not the expected value to 3 decimals" in out and "Hint 1 of 1" in out
    assert check_value("2", " momentum ", lesson="07_x", answers=answers).ok
    assert check_value("2", "Momentum", lesson="07_x", answers=answers).status == "wrong"
    assert check_value("1", "four", lesson="07_x", answers=answers).status == "wrong"


def test_check_value_finds_the_answers_file(tmp_path, monkeypatch, capsys):
    record_answer("07_x/1", -0.5, digits=2, path=tmp_path / "notebooks" / "answers.json")
    lesson_dir = tmp_path / "notebooks" / "solutions"
    lesson_dir.mkdir()
    monkeypatch.chdir(lesson_dir)  # a solutions notebook runs here: the file is one folder up
    assert check_value("1", -0.5, lesson="07_x").ok
    monkeypatch.chdir(tmp_path)  # none here or above, as in a student's release: the kind is checked, not the value
    result = check_value("1", -0.5, lesson="07_x")
    assert result.status == "unchecked" and not result
    assert "its value is not checked here" in capsys.readouterr().out
    assert check_value("1", "minus a half", lesson="07_x").status == "wrong"  # a number was asked for
    assert check_value("1", [1, 2], lesson="07_x").status == "wrong"  # a list is not a number either
    assert check_value("1", "momentum", lesson="07_x", text=True).status == "unchecked"
    assert check_value("1", 3.0, lesson="07_x", text=True).status == "wrong"
    set_strict(True, require_answers=True)  # a source checks its worked value with its hidden test, not here
    assert check_value("1", -0.5, lesson="07_x").status == "unchecked"
    set_strict(None)
    monkeypatch.setenv(course.ANSWERS_ENV, str(tmp_path / "notebooks" / "answers.json"))
    assert check_value("1", -0.5, lesson="07_x").ok
    assert check_value("9", 1.0, lesson="07_x").status == "unanswered"  # no entry: cannot be checked here
    set_strict(True, require_answers=True)  # but a solutions notebook must be checkable
    with pytest.raises(ExerciseFailed, match="has no answer for '07_x/9'"):
        check_value("9", 1.0, lesson="07_x")


def test_record_answer_keeps_the_salt_and_replaces_an_entry(tmp_path):
    path = tmp_path / "answers.json"
    record_answer("a/1", 1.0, path=path)
    salt = json.loads(path.read_text())["salt"]
    record_answer("a/1", 2.0, path=path)
    data = json.loads(path.read_text())
    assert data["salt"] == salt and list(data["answers"]) == ["a/1"]
    assert check("1", 2.0, hidden("a/1", path)).ok and not check("1", 1.0, hidden("a/1", path))
    with pytest.raises(ValueError, match="not a finite number"):
        record_answer("a/2", float("nan"), path=path)


def test_no_answers_file_ships_with_the_lessons():
    """The student's files hold no expected value, not even hashed: a rounded value falls to trying
    them all. The values are in the hidden tests of the lessons' sources (notebooks/source/)."""
    assert not list(NOTEBOOKS.rglob("answers*.json"))


# ---------------------------------------------------------------------------- pointers into the library
def test_where_points_at_the_definition():
    text = where(ppo.compute_gae)
    path, _, rest = text.partition(":")
    line, name = rest.split(" ")
    assert path == "podracer/agents/ppo.py" and name == "compute_gae"
    assert (ROOT / path).read_text().splitlines()[int(line) - 1].startswith("def compute_gae(")
    assert where(ppo.PPO.act).startswith("podracer/agents/ppo.py:") and where(ppo.PPO.act).endswith(" PPO.act")


# ---------------------------------------------------------------------------- Colab
class _FakeShell:
    def __init__(self):
        self.magics = []

    def run_line_magic(self, name, line):
        self.magics.append((name, line))


def _run_colab_cell(monkeypatch, on_colab: bool) -> list[tuple[str, str]]:
    """COLAB_CELL as IPython runs it, with the pip install captured instead of run."""
    from IPython.core.inputtransformer2 import TransformerManager

    if on_colab:
        google = types.ModuleType("google")
        google.colab = types.ModuleType("google.colab")
        monkeypatch.setitem(sys.modules, "google", google)
        monkeypatch.setitem(sys.modules, "google.colab", google.colab)
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    shell = _FakeShell()
    exec(TransformerManager().transform_cell(COLAB_CELL), {"get_ipython": lambda: shell})
    return shell.magics


def test_the_colab_cell_installs_the_course_on_colab_only(monkeypatch):
    assert _run_colab_cell(monkeypatch, on_colab=False) == []
    magics = _run_colab_cell(monkeypatch, on_colab=True)
    assert magics == [("pip", f'install --quiet "{course.COLAB_PIP}"')]
    assert "podracer" not in COLAB_CELL.replace(course.COLAB_PIP, "")  # runs before podracer is importable


def test_the_course_extra_is_light_and_has_what_the_lessons_need():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert project["name"] == "podracer-rl"

    def resolve(extra: str) -> set[str]:
        names = set()
        for requirement in extras[extra]:
            if requirement.startswith("podracer-rl["):
                for inner in requirement[len("podracer-rl["):-1].split(","):
                    names |= resolve(inner.strip())
            else:
                names.add(requirement.split(";")[0].split(">")[0].split("=")[0].split("[")[0].strip().lower())
        return names

    course_deps = resolve("course")
    assert {"jupyterlab", "ipywidgets", "matplotlib", "scipy", "pyarrow", "yfinance"} <= course_deps
    assert course_deps >= resolve("finance") and course_deps >= resolve("notebooks")
    assert not course_deps & {"ray", "mujoco", "envpool", "mujoco-warp", "warp-lang", "stable-baselines3"}
    # Colab's cell: the lessons' packages without a Jupyter stack to replace Colab's own
    colab = resolve(course.COLAB_PIP[len("podracer-rl["):-1])
    assert colab >= resolve("finance") and not colab & {"jupyterlab", "ipykernel", "notebook", "jupyter-server", "ray"}


def test_the_course_extra_names_no_cuda_package_and_the_docs_give_the_cpu_torch_line():
    """A student's `pip install "podracer-rl[course]"` asks for no CUDA package itself: CUDA comes in
    only through the default Linux wheel of torch, which docs/colab.md's CPU line installs first
    from PyTorch's CPU index (a resolver run against an index would need the network: this checks
    what the project declares)."""
    import re

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]

    def requirements(extra: str) -> list[Requirement]:
        found = []
        for text in extras[extra]:
            requirement = Requirement(text)
            if requirement.name == "podracer-rl":
                found += [r for inner in sorted(requirement.extras) for r in requirements(inner)]
            else:
                found.append(requirement)
        return found

    declared = [Requirement(text) for text in project["dependencies"]] + requirements("course")
    cuda = re.compile(r"^(nvidia-|cuda|cupy|triton|tensorrt|jax-cuda|torch-cuda)|[-_]cu\d+$")
    assert len(declared) > 10
    assert not [r.name for r in declared if cuda.search(r.name.lower())]
    assert not [str(r) for r in declared if any(extra.startswith("cu") for extra in r.extras) or "+cu" in str(r)]
    torch_requirement = next(r for r in declared if r.name == "torch")
    colab = (ROOT / "docs" / "colab.md").read_text()
    block = re.search(r"```bash\n(pip install torch [^\n]*)\n(pip install \"podracer-rl\[course\]\")\n```", colab)
    assert block, "docs/colab.md should give the CPU torch line, then the course's install, in one block"
    assert block.group(1).split()[3:] == ["--index-url", "https://download.pytorch.org/whl/cpu"], block.group(1)
    # The CPU build the project itself is tested on (constraints.txt) satisfies what it declares.
    pinned = re.search(r"^torch==([\d.]+)", (ROOT / "constraints.txt").read_text(), flags=re.M).group(1)
    assert torch_requirement.specifier.contains(pinned), f"torch {pinned} does not satisfy {torch_requirement}"


def test_add_colab_cell_puts_it_after_the_title_once():
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 01 · title"), nbformat.v4.new_code_cell("import os")]
    assert add_colab_cell(nb) is True and add_colab_cell(nb) is False
    assert [c.cell_type for c in nb.cells] == ["markdown", "code", "code"] and nb.cells[1].source == COLAB_CELL


# ---------------------------------------------------------------------------- slides
def test_tag_slides_keeps_a_lecturers_tags_and_fills_the_rest():
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"), nbformat.v4.new_markdown_cell("## A section"),
                nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_markdown_cell("### A detail"),
                nbformat.v4.new_code_cell("setup()", metadata={"slideshow": {"slide_type": "skip"}})]
    kinds = [c.metadata["slideshow"]["slide_type"] for c in course.tag_slides(nb).cells]
    assert kinds == ["slide", "slide", "-", "subslide", "skip"]


def test_the_foundations_lesson_is_tagged_for_slides():
    import nbformat

    nb = nbformat.read(NOTEBOOKS / "00_foundations.ipynb", as_version=4)
    kinds = [c.metadata.get("slideshow", {}).get("slide_type") for c in nb.cells]
    assert None not in kinds and kinds[0] == "slide" and kinds.count("slide") >= 8 and "skip" in kinds


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.name)
def test_no_slide_holds_a_wall_of_text(path):
    """As make slides cuts them: no slide holds 5,000 characters (14 had slides of 5,700, 03 of 8,700)."""
    import nbformat

    from podracer.course import split_long_slides, tag_slides

    notebook = split_long_slides(tag_slides(nbformat.read(path, as_version=4)))
    slides, held = [], 0
    for cell in notebook.cells:
        kind = cell.metadata["slideshow"]["slide_type"]
        if kind in ("slide", "subslide"):
            slides.append(held)
            held = 0
        held += 0 if kind in ("skip", "notes") else len(cell.source)
    assert max([*slides, held]) < 5_000


def test_split_long_slides_keeps_a_lecturers_tags_and_starts_sub_slides_where_text_piles_up():
    import nbformat

    from podracer.course import split_long_slides

    def cell(text: str, kind: str):
        return nbformat.v4.new_markdown_cell(text, metadata={"slideshow": {"slide_type": kind}})

    cells = [cell("## a\n" + "x" * 2000, "slide"), *[cell("y" * 1500, "-") for _ in range(3)], cell("## b", "slide")]
    notebook = split_long_slides(nbformat.v4.new_notebook(cells=cells))
    kinds = [c.metadata["slideshow"]["slide_type"] for c in notebook.cells]
    assert kinds == ["slide", "subslide", "-", "subslide", "slide"]  # 2,004 + 1,500 > 3,500: a sub-slide


def test_build_slides_writes_reveal_html(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"), nbformat.v4.new_markdown_cell("## Second"),
                nbformat.v4.new_code_cell("print(1)")]
    nbformat.write(nb, tmp_path / "07_demo.ipynb")
    (written,) = course.build_slides([tmp_path / "07_demo.ipynb"], tmp_path / "slides", offline=False)
    html = written.read_text()
    assert written.name == "07_demo.slides.html" and "reveal" in html.lower() and "Second" in html
    assert html.count("<section") >= 2  # one per slide
    assert "https://unpkg.com/reveal.js" in html  # offline=False: from a CDN when opened


def fake_slide_assets(folder: Path) -> Path:
    """What fetch_slide_assets unpacks from the npm registry, as empty files (no network in tests)."""
    for name in ("reveal.js/dist/reveal.js", "reveal.js/dist/reveal.css", "reveal.js/dist/theme/white.css",
                 "reveal.js/plugin/notes/notes.js", "requirejs/require.js", "jquery/dist/jquery.min.js"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("/* stand-in */")
    return folder


def test_offline_slides_load_no_script_or_style_from_the_network(tmp_path):
    import re

    import nbformat

    nb = nbformat.v4.new_notebook()
    badge = ("[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
             "(https://colab.research.google.com/github/o/r/blob/main/notebooks/07_demo.ipynb)")
    nb.cells = [nbformat.v4.new_markdown_cell(f"# Title\n\n{badge}\n\n$$G_t = \\sum_k \\gamma^k r_{{t+k}}$$"),
                nbformat.v4.new_code_cell("print(1)")]
    nbformat.write(nb, tmp_path / "07_demo.ipynb")
    out = tmp_path / "slides"
    (written,) = course.build_slides([tmp_path / "07_demo.ipynb"], out, assets=fake_slide_assets(tmp_path / "assets"))
    html = written.read_text()
    loaded = (re.findall(r"<(?:script|img)[^>]*\ssrc=\"([^\"]+)\"", html)
              + re.findall(r"<link[^>]*\shref=\"([^\"]+)\"", html)
              + re.findall(r"\bimport\s+\w+\s+from\s+['\"]([^'\"]+)['\"]", html)
              + re.findall(r"\"([^\"\s]+\.js)\"", html))  # require([...]) loads reveal.js and its notes plugin
    assert len(loaded) >= 6, loaded
    remote = [url for url in loaded if re.match(r"(https?:)?//", url)]
    assert not remote, f"the slides load {remote} from the network"
    for url in loaded:  # each is a file in the output folder, which can be copied as a whole
        assert (out / url.split("?")[0]).is_file(), f"{url} is referenced but not in {out}"
    assert (out / "_static" / "mathjax" / "MathJax.js").is_file()  # from jupyter-server-mathjax, real


def test_offline_slides_without_the_assets_say_how_to_fetch_them(tmp_path):
    import nbformat

    nbformat.write(nbformat.v4.new_notebook(), tmp_path / "07_demo.ipynb")
    with pytest.raises(FileNotFoundError, match="make slides-assets"):
        course.build_slides([tmp_path / "07_demo.ipynb"], tmp_path / "slides", assets=tmp_path / "nothing")
