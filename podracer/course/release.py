"""Build a term's releases of the course from one source per lesson, and grade submissions.

Each lesson has one source, ``notebooks/source/NN_name.ipynb``: the lesson with its worked answers,
in otter-grader's notebook format (an exercise is a ``# BEGIN QUESTION`` block: the prompt, the
answer cell with the solution between ``# BEGIN SOLUTION`` and ``# END SOLUTION``, the practice
check, and hidden tests, ``# HIDDEN``, that call :mod:`podracer.course.grading`). CI runs every
source top to bottom, so every worked answer passes its practice check and its hidden tests.

:func:`build_release` (``make course``, ``python -m podracer.course release``) runs ``otter assign``
on each source and writes three things into ``build/course/``:

``student/``
    What students get: the lessons without solutions, hidden tests or expected values, with the
    practice checks (tiered hints) and ``GLOSSARY.md``. ``notebooks/NN_name.ipynb`` in the
    repository are these notebooks (a test keeps them in step with the sources).
``autograder/NN_name.zip``
    otter's autograder for the lesson: the hidden tests, and the :mod:`podracer.course.otter_plugin`
    configuration that rebuilds a submission from the release before it runs. ``otter run -a
    NN_name.zip submission.ipynb`` grades one notebook on this machine, without Docker; the same
    zip is a Gradescope autograder. :func:`grade` does it for a folder of submissions.
``ta/``
    For the teaching assistants: the solution notebooks (``NN_name.ipynb``), ``RUBRIC.md`` (each
    question's points, what its hidden tests assert, the prose answers to mark by hand) and
    ``GLOSSARY.md``.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Iterable, Sequence

__all__ = ["ASSIGNMENT_CONFIG", "SOURCE_ONLY_TAG", "TIMES", "build_bundle", "build_release", "clock", "grade",
           "hosted_settings", "lesson_sources", "lesson_time", "measure_times"]

SOURCE_ONLY_TAG = "source-only"  # a cell the sources run in CI and no release holds
PLUGIN = "podracer.course.otter_plugin.LockedCells"
# otter assign's settings, one place for every lesson: no otter cells in the student's notebook
# (students install the course, not the grader), the tests not run at assign time (CI runs the
# sources), no PDFs.
ASSIGNMENT_CONFIG = {
    "init_cell": False,
    "check_all_cell": False,
    "export_cell": False,
    "run_tests": False,
    "solutions_pdf": False,
    "generate": {"plugins": [PLUGIN]},
}
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def _text(cell: dict) -> str:
    """A cell's source as one string (a notebook's JSON may store it as a list of lines)."""
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source


def lesson_sources(folder: str | os.PathLike = NOTEBOOKS / "source") -> list[Path]:
    """The lessons' sources, ``NN_name.ipynb``, in order."""
    return sorted(Path(folder).glob("[0-9][0-9]_*.ipynb"))


HOSTED = NOTEBOOKS / "source" / "hosted.yaml"
BADGE = re.compile(r"(https://colab\.research\.google\.com/github/)[^/\s)]+/[^/\s)]+/blob/[^/\s)]+/notebooks/")
EXTRAS = re.compile(r'"podracer-rl\[([a-z,]+)\]')


HOSTED_KEYS = ("repository", "ref", "install", "extras")


def hosted_settings(path: str | os.PathLike = HOSTED, **override: str | None) -> dict[str, str]:
    """The hosted-notebook setting (``notebooks/source/hosted.yaml``: ``repository``, ``ref``,
    ``install`` and the lessons' default ``extras``), with any of them given as keywords instead;
    each is checked."""
    import yaml

    if not Path(path).is_file():
        raise FileNotFoundError(f"no course settings at {path}: they are in a checkout of the repository "
                                f"(notebooks/source/hosted.yaml); outside one, pass extras= and install= explicitly")
    settings = yaml.safe_load(Path(path).read_text()) or {}
    settings.update({k: v for k, v in override.items() if v is not None})
    unknown = set(settings) - set(HOSTED_KEYS)
    if unknown:
        raise ValueError(f"{path}: unknown setting(s) {sorted(unknown)}; the settings are {', '.join(HOSTED_KEYS)}")
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", str(settings.get("repository", ""))):
        raise ValueError(f"{path}: repository must be a GitHub owner/name, got {settings.get('repository')!r}")
    if not re.fullmatch(r"[\w./-]+", str(settings.get("ref", ""))):
        raise ValueError(f"{path}: ref must be a branch or tag name, got {settings.get('ref')!r}")
    if not re.fullmatch(r"[a-z]+(,[a-z]+)*", str(settings.get("extras", ""))):
        raise ValueError(f"{path}: extras must name the package's optional dependencies ([project.optional-"
                         f"dependencies] in pyproject.toml), comma-separated, got {settings.get('extras')!r}")
    from podracer.course import install_requirement

    install_requirement(str(settings["extras"]), str(settings.get("install", "")))  # raises on a malformed one
    return {k: str(settings[k]) for k in HOSTED_KEYS}


def _otter_master(source: Path, notebook: dict, hosted: dict[str, str]) -> dict:
    """The source as otter assign reads it: its config cell first, source-only cells left out,
    links to the glossary as they will be beside it, and the Colab badge and install cell from the
    hosted setting."""
    from podracer.course import colab_cell

    notebook = copy.deepcopy(notebook)
    cells = [c for c in notebook["cells"] if SOURCE_ONLY_TAG not in c.get("metadata", {}).get("tags", [])]
    config = "# ASSIGNMENT CONFIG\n" + json.dumps({"name": source.stem, **ASSIGNMENT_CONFIG}, indent=1)
    cells.insert(0, {"cell_type": "raw", "metadata": {}, "source": config, "id": "assignment-config"})
    for cell in cells:
        text = _text(cell)
        if cell["cell_type"] == "markdown":
            text = text.replace("](../GLOSSARY.md", "](GLOSSARY.md")
            text = BADGE.sub(rf"\g<1>{hosted['repository']}/blob/{hosted['ref']}/notebooks/", text)
        elif cell["cell_type"] == "code" and "google.colab" in text and EXTRAS.search(text):
            text = colab_cell(EXTRAS.search(text).group(1), hosted["install"])
        cell["source"] = text
    notebook["cells"] = cells
    return notebook


def _assign(source: Path, notebook: dict, work: Path, hosted: dict[str, str]) -> Path:
    """``otter assign`` of one source into ``work``; returns the folder it wrote."""
    try:
        from otter.assign import main as otter_assign
    except ImportError as exc:
        raise ImportError("building the course's releases needs otter-grader: pip install 'podracer-rl[teach]' "
                          "(make install has it)") from exc
    master = work / "master" / source.name
    master.parent.mkdir(parents=True, exist_ok=True)
    master.write_text(json.dumps(_otter_master(source, notebook, hosted), indent=1))
    dist = work / "dist"
    with contextlib.redirect_stdout(io.StringIO()) as said:  # otter prints its progress
        try:
            otter_assign(str(master), str(dist), no_pdfs=True)
        except Exception as exc:
            raise RuntimeError(f"otter assign failed on {source}: {exc}\n{said.getvalue()[-2000:]}") from exc
    return dist


def _clean(notebook: dict, source_cells: list[dict]) -> dict:
    """Outputs and execution counts off; each cell's metadata from the source (its slide type, say),
    with otter's added (its answer-cell tag, which cells are locked)."""
    original = {c.get("id"): c.get("metadata", {}) for c in source_cells}
    # A solution block after a check (what the worked answer prints once checked) leaves an empty
    # answer cell in the student's notebook: not a place to answer, so it goes.
    def empty_answer(cell: dict) -> bool:
        tags = cell["metadata"].get("tags", [])
        return cell["cell_type"] == "code" and "otter_answer_cell" in tags and not "".join(cell["source"]).strip()

    notebook["cells"] = [c for c in notebook["cells"] if not empty_answer(c)]
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
        kept = original.get(cell.get("id"), {})
        tags = [*kept.get("tags", []), *(t for t in cell["metadata"].get("tags", []) if t not in kept.get("tags", []))]
        cell["metadata"] = {**kept, **cell["metadata"], **({"tags": tags} if tags else {})}
    return notebook


def _rubric(source: Path, cells: list[dict]) -> str:
    """One lesson's part of RUBRIC.md: each question, its points, its hidden tests and prose answers."""
    lines = [f"## {source.stem}", ""]
    question, in_tests, in_solution = None, False, False
    for cell in cells:
        text = _text(cell)
        if cell["cell_type"] == "raw" and text.startswith("# BEGIN QUESTION"):
            meta = dict(line.split(": ", 1) for line in text.splitlines()[1:] if ": " in line)
            question = meta.get("name")
            lines += [f"### {question} ({meta.get('points', 1)} point(s))", ""]
        elif cell["cell_type"] == "raw":
            in_tests = text.startswith("# BEGIN TESTS") or (in_tests and not text.startswith("# END TESTS"))
            in_solution = text.startswith("# BEGIN SOLUTION") or (in_solution and not text.startswith("# END SOLUTION"))
            if text.startswith("# BEGIN TESTS"):
                lines += ["Hidden tests (each an equal share of the points):", ""]
        elif question and cell["cell_type"] == "markdown" and text.startswith("### "):
            lines += [text.splitlines()[0].lstrip("# "), ""]
        elif question and in_tests and cell["cell_type"] == "code":
            boiler = ("# HIDDEN", "from podracer.course.grading")
            body = "\n".join(line for line in text.splitlines() if not line.startswith(boiler))
            lines += ["```python", body.strip(), "```", ""]
        elif question and in_solution and cell["cell_type"] == "markdown":
            lines += ["Prose to mark by hand (the model answer; full marks for the idea, not the wording):", "",
                      *[f"> {l}" if l else ">" for l in text.splitlines()], ""]
    return "\n".join(lines)


def _patch_autograder(zip_path: Path, student: dict, target: Path) -> None:
    """otter's autograder zip, with the released student notebook in the plugin's configuration."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(zip_path) as old, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as new:
        for item in old.infolist():
            data = old.read(item.filename)
            if item.filename == "otter_config.json":
                config = json.loads(data)
                config["plugins"] = [{PLUGIN: {"notebook": student}}]
                data = json.dumps(config).encode()
            new.writestr(item.filename, data)


def build_bundle(out: str | os.PathLike = "build/course/bundle") -> Path:
    """The release bundle: this checkout's wheel (the packages with their data: the bundled prices,
    the presets), which a hosted notebook's first cell can install from a URL. Built offline
    (``pip wheel --no-deps --no-build-isolation``). Returns the wheel's path."""
    out = Path(out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                           "--wheel-dir", str(out), str(NOTEBOOKS.parent)], capture_output=True, text=True)
    wheels = list(out.glob("podracer_rl-*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        raise RuntimeError(f"building the wheel failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return wheels[0]


def build_release(out: str | os.PathLike = "build/course", sources: Iterable[str | os.PathLike] | None = None,
                  glossary: str | os.PathLike = NOTEBOOKS / "GLOSSARY.md", update_lessons: bool = False,
                  hosted: dict[str, str] | None = None, bundle: bool = False) -> Path:
    """Build ``out/student``, ``out/autograder`` and ``out/ta`` from the lessons' sources (all of
    them by default), the Colab badges and first cells from ``hosted`` (default:
    :func:`hosted_settings`); ``bundle`` also builds the wheel into ``out/bundle``.
    ``update_lessons`` also writes the student notebooks over ``notebooks/`` (what a change to a
    source needs before it is committed). Returns ``out``."""
    out = Path(out)
    hosted = hosted or hosted_settings()
    paths = [Path(s) for s in sources] if sources is not None else lesson_sources()
    if not paths:
        raise FileNotFoundError("no lesson sources (notebooks/source/NN_name.ipynb) to release")
    for folder in ("student", "autograder", "ta"):
        shutil.rmtree(out / folder, ignore_errors=True)
        (out / folder).mkdir(parents=True)
    rubric = ["# Rubric", "",
              "Points per question as in the autograders; each hidden test is an equal share of its question.", ""]
    with tempfile.TemporaryDirectory() as tmp:
        for source in paths:
            notebook = json.loads(source.read_text())  # read once: otter's input, the metadata, the rubric
            dist = _assign(source, notebook, Path(tmp) / source.stem, hosted)
            student = _clean(json.loads((dist / "student" / source.name).read_text()), notebook["cells"])
            (out / "student" / source.name).write_text(json.dumps(student, indent=1, ensure_ascii=False) + "\n")
            if update_lessons:
                (NOTEBOOKS / source.name).write_text(json.dumps(student, indent=1, ensure_ascii=False) + "\n")
            solution = _clean(json.loads((dist / "autograder" / source.name).read_text()), notebook["cells"])
            (out / "ta" / source.name).write_text(json.dumps(solution, indent=1, ensure_ascii=False) + "\n")
            (zip_path,) = (dist / "autograder").glob("*.zip")
            _patch_autograder(zip_path, student, out / "autograder" / f"{source.stem}.zip")
            rubric.append(_rubric(source, notebook["cells"]))
            print(f"released {source.stem}")
    (out / "ta" / "RUBRIC.md").write_text("\n".join(rubric) + "\n")
    for folder in ("student", "ta"):
        shutil.copy(glossary, out / folder / "GLOSSARY.md")
    if bundle:
        print(f"bundle: {build_bundle(out / 'bundle')}")
    return out


def grade(autograder: str | os.PathLike, submissions: Sequence[str | os.PathLike],
          out: str | os.PathLike = "build/grades") -> list[dict]:
    """Grade each submitted notebook with ``otter run`` (a fresh kernel each, no Docker) and write
    ``out/grades.csv`` (one row per submission: each question's score, the total, the plugin's
    notes). Returns the rows."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    import nbformat

    rows = []
    for submission in map(Path, submissions):
        # One unreadable hand-in is that student's row, not the end of the class's grading.
        try:
            nbformat.read(submission, as_version=4)
        except Exception as exc:
            rows.append({"submission": submission.name, "total": 0.0, "possible": float("nan"),
                         "notes": f"not graded: {submission.name} cannot be read as a notebook ({type(exc).__name__}: "
                                  f"{str(exc).splitlines()[0][:120]}); ask for the .ipynb file again"})
            continue
        target = out / submission.stem
        target.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, "-m", "otter", "run", "-a", str(Path(autograder).resolve()),
                               "-o", str(target.resolve()), "--no-logo", str(submission.resolve())],
                              capture_output=True, text=True, cwd=submission.resolve().parent)
        results = target / "results.json"
        if not results.exists():
            last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
            rows.append({"submission": submission.name, "total": 0.0, "possible": float("nan"),
                         "notes": f"not graded: otter run failed ({last[:160]}); its output is in {target}"})
            (target / "otter.log").write_text(done.stdout + "\n" + done.stderr)
            continue
        tests = json.loads(results.read_text())["tests"]
        row = {"submission": submission.name}
        for test in tests:
            if test.get("max_score"):
                row[test["name"]] = test.get("score", 0.0)
        row["total"] = sum(v for k, v in row.items() if k not in ("submission",))
        row["possible"] = sum(t["max_score"] for t in tests if t.get("max_score"))
        notes = re.search(r"every answer cell was run|answer cell .*", done.stdout)
        row["notes"] = notes.group(0) if notes else ""
        rows.append(row)
    with open(out / "grades.csv", "w", newline="") as f:
        fields = sorted({k for r in rows for k in r}, key=lambda k: (k != "submission", k in ("total", "possible",
                                                                                             "notes"), k))
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return rows


TIMES = NOTEBOOKS / "source" / "times.yaml"  # the one measured table the syllabus, README and headers quote


def lesson_time(seconds: float) -> str:
    """A lesson's time as the course states it in headers and the syllabus: ``"15 s"`` (to 5 s under
    a minute), ``"1.5 min"`` (to half a minute under ten), ``"12 min"``."""
    if seconds < 57.5:
        return f"{max(5, 5 * round(seconds / 5))} s"
    if seconds < 585:
        return f"{round(seconds / 30) / 2:g} min"
    return f"{round(seconds / 60)} min"


def clock(seconds: float) -> str:
    """A measured time as the README's table gives it: ``"13 s"``, ``"1 min 32 s"``."""
    whole = round(seconds)
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60} s"


def measure_times(sources: Iterable[str | os.PathLike] | None = None, size: str = "full",
                  out: str | os.PathLike | None = TIMES) -> dict:
    """Run each lesson's source top to bottom at ``size``, one at a time as a student would, and
    record the seconds each took, with the date, the machine's cores and its load average, in
    ``out`` (``notebooks/source/times.yaml``, the one table the syllabus, the README and the
    lessons' headers quote; a test checks they agree with it). Returns the table."""
    import datetime
    import time

    import nbformat
    import yaml

    from podracer.course import notebook_client

    paths = [Path(s) for s in sources] if sources is not None else lesson_sources()
    table: dict = {"size": size, "date": datetime.date.today().isoformat(), "cores": os.cpu_count(),
                   "torch_threads": int(os.environ.get("OMP_NUM_THREADS", "0")) or None, "seconds": {}, "load": {}}
    if out is not None and Path(out).exists():
        old = yaml.safe_load(Path(out).read_text()) or {}
        if old.get("size") == size:
            table["seconds"], table["load"] = old.get("seconds", {}), old.get("load", {})
            table["notes"] = old.get("notes", {})  # how a lesson's entry was measured, when not as the rest
    previous = os.environ.get("PODRACER_SIZE")
    os.environ["PODRACER_SIZE"] = size
    try:
        for path in paths:
            notebook = nbformat.read(path, as_version=4)
            start = time.perf_counter()
            notebook_client(notebook, timeout=3600, resources={"metadata": {"path": str(path.parent)}}).execute()
            table["seconds"][path.stem] = round(time.perf_counter() - start, 1)
            table["load"][path.stem] = round(os.getloadavg()[0], 1)
            table.get("notes", {}).pop(path.stem, None)  # measured as the rest now
            print(f"{path.stem}: {table['seconds'][path.stem]:.0f} s (load {table['load'][path.stem]})", flush=True)
            if out is not None:  # after each lesson: an interrupted run keeps what it measured
                Path(out).write_text(yaml.safe_dump(table, sort_keys=False))
    finally:
        if previous is None:
            os.environ.pop("PODRACER_SIZE", None)
        else:
            os.environ["PODRACER_SIZE"] = previous
    return table
