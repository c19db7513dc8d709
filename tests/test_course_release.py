"""The course's graded releases (podracer.course.release, grading, otter_plugin): one source per
lesson builds the student notebooks, otter-grader autograders with hidden tests, and a TA release;
grading a submission marks its answer cells and nothing a student cell does elsewhere."""

from __future__ import annotations

import copy
import json
import re
import zipfile
from pathlib import Path

import pytest
import torch

from podracer.agents import ppo
from podracer.course import grading
from podracer.course.release import build_release, lesson_sources

pytest.importorskip("otter", reason="the release step needs otter-grader (pip install 'podracer-rl[teach]')")
from podracer.course.otter_plugin import rebuild  # noqa: E402 (otter first)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _text(cell: dict) -> str:
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def _solutions(source: Path, whole: bool = True) -> dict[str, str]:
    """The worked answer of each answer cell of a source, by cell id, as a student would type it
    (``whole``: with the cell's lines the student's version has too)."""
    out = {}
    for cell in _cells(source):
        text = _text(cell)
        if cell["cell_type"] == "code" and "# BEGIN SOLUTION NO PROMPT" in text:
            keep = text.split('""" # BEGIN PROMPT')[0] if '""" # BEGIN PROMPT' in text else ""
            body = text.split("# BEGIN SOLUTION NO PROMPT\n", 1)[1].rsplit("# END SOLUTION", 1)[0]
            out[cell["id"]] = keep + body if whole else body
    return out


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    return build_release(tmp_path_factory.mktemp("course"))


# ---------------------------------------------------------------------------- the release step
def test_every_lesson_has_a_source_and_is_released_three_ways(release):
    sources = lesson_sources()
    assert len(sources) >= 14
    for source in sources:
        assert (release / "student" / source.name).is_file()
        assert (release / "ta" / source.name).is_file()
        assert (release / "autograder" / f"{source.stem}.zip").is_file()
    for folder in ("student", "ta"):
        assert (release / folder / "GLOSSARY.md").is_file()
    rubric = (release / "ta" / "RUBRIC.md").read_text()
    assert all(f"## {s.stem}" in rubric for s in sources)


def test_the_student_release_holds_no_solution_no_hidden_test_and_no_expected_value(release):
    assert not list((release / "student").glob("answers*")) and not (release / "student" / "solutions").exists()
    for source in lesson_sources():
        student = (release / "student" / source.name).read_text()
        assert "# HIDDEN" not in student and "expect_value" not in student and "expect_function" not in student
        assert "solutions/" not in student and "BEGIN SOLUTION" not in student and "source-only" not in student
        for answer in _solutions(source, whole=False).values():  # a hint that is the answer line shows up here
            lines = [line.strip() for line in answer.splitlines()
                     if len(line.strip()) > 25 and not line.strip().startswith(("import", "from", "def ", "class "))]
            leaked = [line for line in lines if line in student]
            assert not leaked, f"{source.name}: a worked answer line is in the student's notebook: {leaked}"
        for cell in _cells(source):  # every value a hidden test expects, e.g. 119 or 0.78571429
            for value in re.findall(r"expect_value\([^,]+, ([-\d.]+)", _text(cell)):
                if len(value.strip(".-0")) > 3:
                    assert value not in student, f"{source.name}: the expected value {value} is in the student file"


def test_the_autograder_has_the_hidden_tests_and_the_released_notebook(release):
    with zipfile.ZipFile(release / "autograder" / "00_foundations.zip") as z:
        tests = {n: z.read(n).decode() for n in z.namelist() if n.startswith("tests/")}
        config = json.loads(z.read("otter_config.json"))
    assert set(tests) == {f"tests/ex{i}.py" for i in range(1, 6)}
    assert "'hidden': True" in tests["tests/ex2.py"] and "podracer.agents.ppo:compute_gae" in tests["tests/ex2.py"]
    (plugin,) = config["plugins"]
    released = plugin["podracer.course.otter_plugin.LockedCells"]["notebook"]
    assert released == json.loads((release / "student" / "00_foundations.ipynb").read_text())


def test_the_committed_student_notebooks_are_what_the_release_builds(release):
    for source in lesson_sources():
        built = json.loads((release / "student" / source.name).read_text())
        committed = json.loads((NOTEBOOKS / source.name).read_text())
        assert committed == built, (f"notebooks/{source.name} is not what notebooks/source/{source.name} builds: "
                                    f"run `make course` (it writes the student notebooks) and commit them")


# ---------------------------------------------------------------------------- hidden-test helpers
def test_expect_function_fails_an_answer_that_calls_the_library_by_any_name():
    from podracer.agents.ppo import compute_gae as aliased

    def rollout(g):
        T, N = 4, 3
        flags = torch.rand(2, T, N, generator=g) < 0.2
        return (torch.randn(T, N, generator=g), torch.randn(T, N, generator=g), torch.randn(T, N, generator=g),
                flags[0], flags[1], 0.9, 0.8)

    def by_the_library(*args):
        return aliased(*args)

    with pytest.raises(AssertionError, match="written from scratch.*compute_gae"):
        grading.expect_function(by_the_library, ppo.compute_gae, rollout, blocked=["podracer.agents.ppo:compute_gae"])
    assert ppo.compute_gae(*rollout(torch.Generator().manual_seed(0)))  # restored after the test

    with pytest.raises(AssertionError):
        grading.expect_function(lambda *a: (torch.zeros(4, 3), torch.zeros(4, 3)), ppo.compute_gae, rollout)


def test_expect_value_is_exact_for_whole_numbers_and_states_its_float_tolerance():
    grading.expect_value(119, 119)
    for near in (118, 120, 119.4):
        with pytest.raises(AssertionError, match="whole number"):
            grading.expect_value(near, 119)
    grading.expect_value(0.8424, 0.8421, digits=3)  # within half a unit of the third decimal
    with pytest.raises(AssertionError, match="within 0.0005"):
        grading.expect_value(0.8431, 0.8421, digits=3)  # "give or take one in the last digit" passed this
    with pytest.raises(AssertionError, match="not answered"):
        grading.expect_value(..., 1)
    with pytest.raises(AssertionError, match="expected a number"):
        grading.expect_value("x", 1.0, digits=2)


# ---------------------------------------------------------------------------- the grader's rebuild
def _student() -> dict:
    return json.loads((NOTEBOOKS / "00_foundations.ipynb").read_text())


def test_rebuild_keeps_answer_cells_reverts_edits_and_drops_added_cells():
    released = _student()
    submission = copy.deepcopy(released)
    answers = [c for c in submission["cells"] if "otter_answer_cell" in c["metadata"].get("tags", [])]
    answers[0]["source"] = "v_star_halfway = 0.8"
    locked = next(c for c in submission["cells"] if c["cell_type"] == "code" and "check_function(" in _text(c))
    locked["source"] = "check_function = lambda *a, **k: True"
    submission["cells"].append({"cell_type": "code", "metadata": {}, "source": "import podracer.course as c\n"
                                "c._results.update({'1': 'ok'})", "outputs": [], "execution_count": None})
    rebuilt, notes = rebuild(released, submission)
    assert len(rebuilt["cells"]) == len(released["cells"])
    texts = [_text(c) for c in rebuilt["cells"]]
    assert "v_star_halfway = 0.8" in texts and "check_function = lambda *a, **k: True" not in texts
    assert not any("_results" in t for t in texts) and notes == []


def test_rebuild_matches_answers_by_order_when_ids_changed_and_flags_reaching_into_the_grader():
    released = _student()
    submission = copy.deepcopy(released)
    answers = [c for c in submission["cells"] if "otter_answer_cell" in c["metadata"].get("tags", [])]
    for i, cell in enumerate(answers):
        cell["id"] = f"new-{i}"  # a cell deleted and typed again gets a new id
    answers[0]["source"] = "v_star_halfway = 0.84"
    answers[1]["source"] = "import podracer.course.grading as g\ng.expect_function = lambda *a, **k: None"
    rebuilt, notes = rebuild(released, submission)
    texts = [_text(c) for c in rebuilt["cells"]]
    assert "v_star_halfway = 0.84" in texts and not any("g.expect_function" in t for t in texts)
    assert len(notes) == 1 and "answer cell 2 was not run" in notes[0] and "podracer.course" in notes[0]


# ---------------------------------------------------------------------------- grading end to end
@pytest.mark.slow
def test_grading_lesson_00_full_marks_nothing_partial_and_tampering_changes_nothing(release, tmp_path, monkeypatch):
    """otter run on two submissions of lesson 00, each in a fresh kernel: the worked answers get
    every point; library calls for the from-scratch functions, a wrong PSR and two tampering cells
    (one forging the results, one disabling otter's check) only the first exercise's point, the one
    answered by hand, and the answer that reaches into the grader is not run. (A third, blank
    submission with the same tampering scored 0; it ran a third kernel to show what this one shows:
    the tampering cells add no point.)"""
    monkeypatch.setenv("PODRACER_SIZE", "smoke")
    student = json.loads((release / "student" / "00_foundations.ipynb").read_text())
    solutions = _solutions(NOTEBOOKS / "source" / "00_foundations.ipynb")

    def submit(name: str, answers: dict[int, str], extra: list[str] = ()) -> Path:
        notebook = copy.deepcopy(student)
        cells = [c for c in notebook["cells"] if "otter_answer_cell" in c["metadata"].get("tags", [])]
        for index, text in answers.items():
            cells[index]["source"] = text
        for text in extra:
            notebook["cells"].append({"cell_type": "code", "metadata": {}, "source": text, "outputs": [],
                                      "execution_count": None})
        path = tmp_path / f"{name}.ipynb"
        path.write_text(json.dumps(notebook))
        return path

    ids = [c["id"] for c in student["cells"] if "otter_answer_cell" in c["metadata"].get("tags", [])]
    tamper = ["import podracer.course as course\ncourse._results.update({str(i): 'ok' for i in range(1, 6)})",
              "import otter.execute\notter.execute.Checker.check_if_not_already_checked = lambda *a, **k: None"]
    library = {
        1: "from podracer.agents.ppo import compute_gae as gae\n\n\ndef compute_gae(*args):\n    return gae(*args)",
        2: "def policy_loss(logprobs, old_logprobs, advantages, clip_eps):\n"
           "    return library_policy_loss(logprobs, old_logprobs, advantages, clip_eps)",
        3: "def soft_q_target(rewards, terminated, next_q, next_logprob, alpha, gamma):\n"
           "    return td_target(rewards, terminated, next_q.min(dim=0).values - alpha * next_logprob, gamma)",
        4: "import finance\nimport podracer.course.grading as g\ng.expect_function = lambda *a, **k: None\n\n\n"
           "def psr(returns, benchmark_sharpe):\n"
           "    return finance.probabilistic_sharpe_ratio(returns, benchmark_sharpe)",
    }
    submissions = [submit("worked", {i: solutions[cid] for i, cid in enumerate(ids)}),
                   submit("library_calls", {0: solutions[ids[0]], **library}, tamper)]
    from podracer.course.release import grade

    rows = {r["submission"]: r for r in grade(release / "autograder" / "00_foundations.zip", submissions,
                                              tmp_path / "grades")}
    possible = rows["worked.ipynb"]["possible"]
    assert possible == 9  # 1 + 2 + 2 + 2 + 2: the from-scratch functions count double
    assert rows["worked.ipynb"]["total"] == possible
    assert rows["library_calls.ipynb"]["total"] == 1 and rows["library_calls.ipynb"]["ex1"] == 1
    assert "answer cell 5 was not run" in rows["library_calls.ipynb"]["notes"]
    assert (tmp_path / "grades" / "grades.csv").read_text().count("\n") == 3


# ---------------------------------------------------------------------------- the hosted path
def test_the_hosted_setting_fills_every_badge_and_first_cell(tmp_path):
    from podracer.course.release import build_release, hosted_settings

    wheel = "https://github.com/uni/rl/releases/download/t1/podracer_rl-1.2.0-py3-none-any.whl"
    out = build_release(tmp_path / "course", sources=lesson_sources()[12:14],
                        hosted=hosted_settings(repository="uni/rl", ref="t1", install=wheel))
    for path in sorted((out / "student").glob("*.ipynb")):
        cells = _cells(path)
        assert f"colab.research.google.com/github/uni/rl/blob/t1/notebooks/{path.name})" in _text(cells[0])
        first = next(_text(c) for c in cells if c["cell_type"] == "code")
        extras = "finance,cluster" if path.name.startswith("12_ray") else "finance,locomotion"
        assert f'%pip install --quiet "podracer-rl[{extras}] @ {wheel}"' in first, first
    for bad, match in ((dict(repository="no-slash"), "owner/name"), (dict(install='x"; rm -rf ~'), "install="),
                       (dict(ref="main branch"), "branch or tag")):
        with pytest.raises(ValueError, match=match):
            hosted_settings(**bad)


@pytest.mark.slow
def test_the_bundle_runs_a_student_lesson_where_only_a_hosted_service_s_packages_are(tmp_path):
    """The wheel the release builds, installed into a fresh virtual environment with no project files,
    runs lesson 06's first cells from the student release: its imports, the bundled prices, the glossary.

    Offline, the preinstalled packages (torch, numpy, pandas, matplotlib, ...) come from this checkout's
    environment, added as a path entry: its .pth files, this checkout's editable install among them, are
    not processed there, so podracer is importable only once the wheel is installed."""
    import subprocess
    import sys

    from IPython.core.inputtransformer2 import TransformerManager

    from podracer.course.release import build_bundle

    wheel = build_bundle(tmp_path / "bundle")
    venv = tmp_path / "hosted"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "preinstalled.pth").write_text(str(Path(torch.__file__).resolve().parents[1]) + "\n")
    classroom = tmp_path / "classroom"  # what a student has: the release's notebook and glossary
    classroom.mkdir()
    student = NOTEBOOKS / "06_market_data.ipynb"
    (classroom / "GLOSSARY.md").write_text((NOTEBOOKS / "GLOSSARY.md").read_text())
    before = subprocess.run([python, "-c", "import podracer"], cwd=classroom, capture_output=True, text=True)
    assert before.returncode != 0 and "No module named 'podracer'" in before.stderr
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target",
                    str(site), str(wheel)], check=True)
    code = [_text(c) for c in _cells(student) if c["cell_type"] == "code"][:3]  # Colab cell, imports, prices
    script = "\n".join(TransformerManager().transform_cell(c) for c in code)
    script += ("\nimport podracer, finance\nprint('FROM', podracer.__file__, finance.__file__)\n"
               "print('SHAPE', prices.shape)\n")
    done = subprocess.run([python, "-c", script], cwd=classroom, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PODRACER_SIZE": "smoke",
                               "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    where = done.stdout.split("FROM", 1)[1].split()
    assert all(str(site) in w for w in where[:2]), where  # the wheel's copy, not this checkout
    assert "SHAPE (4781, 20)" in done.stdout, done.stdout  # 2004-2022 closes of the bundled 20 stocks
    for anchor in re.findall(r"\]\((GLOSSARY\.md)#", "".join(_text(c) for c in _cells(student))):
        assert (classroom / anchor).is_file()


def test_a_submission_that_is_no_notebook_is_that_students_row_not_the_end_of_grading(release, tmp_path):
    from podracer.course.release import grade

    broken = tmp_path / "carol_00.ipynb"
    broken.write_text("not json")
    (row,) = grade(release / "autograder" / "00_foundations.zip", [broken], tmp_path / "grades")
    assert row["total"] == 0 and "cannot be read as a notebook" in row["notes"] and "again" in row["notes"]
    assert "carol_00.ipynb" in (tmp_path / "grades" / "grades.csv").read_text()
