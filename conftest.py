"""pytest set-up for the whole checkout; the tests' own fixtures are in tests/conftest.py.

Each lesson runs once, through its source. ``notebooks/source/NN_name.ipynb`` is the one source of a
lesson: its cells with the worked answers inline, in otter-grader's format (``podracer.course.release``).
``notebooks/NN_name.ipynb``, the student's notebook, is built from it (``make course``; a test keeps
the two in step), so ``pytest notebooks --nbmake`` (``make test``, CI) runs the sources and does not
collect the student notebooks: every lesson's cells execute once, with its answers, its practice
checks strict and its hidden tests asserted. A notebook named on the command line always runs
(pytest never ignores a path it was given): the grading tests run a student notebook that way.

This file sits at the root, not in notebooks/: the tests import ``from conftest import SIZE``
(tests/conftest.py), and pytest keeps one module named ``conftest`` for directories that are not
packages, the one it loaded last; the root's loads first, so tests/conftest.py keeps the name.

Notebooks are ``slow`` (``make check`` deselects them with ``-m "not slow"``; see pyproject.toml); under
``pytest -n`` the lessons that start pods or a Ray run one at a time with the other tests that start
processes (below), the others spread over the workers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Every process the tests start inherits one OpenMP/torch thread: Jupyter kernels (every lesson),
# the demo, CLI runs, Ray's workers. The tests pin their own process to one thread (tests/conftest.py)
# for determinism; a child left at torch's default of one thread per core competes with the other
# pytest worker on a 2-core machine, and small networks then run many times slower, not faster.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Ray starts its workers at niceness 15 (its worker_niceness setting) so that they yield to the
# driver. Here the other pytest workers, at niceness 0, keep both cores busy, and a Ray worker then
# gets a few percent of a core: a pod's actor took minutes to import torch and a test's 180 s wait
# ran out. Every Ray the tests start (in the pytest process, subprocess drivers, `ray start` nodes,
# Jupyter kernels: all inherit the environment) runs its workers at the tests' priority instead.
os.environ.setdefault("RAY_worker_niceness", "0")

NOTEBOOKS = Path(__file__).resolve().parent / "notebooks"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.suffix == ".ipynb" and collection_path.resolve().parent == NOTEBOOKS:
        return True  # a student notebook: built from its source, which runs
    return None  # no opinion: pytest's own rules (--ignore, ...) decide


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker's collection is the order xdist hands out
        _longest_scopes_first(items)


# Under `pytest -n` (make test, make check: pytest-xdist), the tests that start process trees or
# servers that could collide run one at a time, on one worker, in one of three scopes:
# - RAY: Ray clusters and their kill tests (`ray start` nodes, the module's shared local Ray) and the
#   S3 server. Every cluster gets ports of its own and `start_local_ray` never joins another cluster,
#   but two kill tests at once would race for the CPUs a node declares and for the GCS's health-check
#   timing;
# - RAY_LESSON: lesson 12 and the README/docs blocks that start a Ray (their id ends in "-ray"): each
#   starts a local Ray of its own and kills at most a pod's actor (no node, no GCS timing), so they
#   run beside the RAY scope, not after it: the RAY scope alone is the longest chain of the suite;
# - LOCAL: the tournaments that start pods as local processes (lessons 10 and 11, their kill tests)
#   and the browser's JupyterLab, whose timing two at once would disturb.
# The scopes run side by side (they share no port, no Ray and no store), and every other test is its
# own scope, spread over the workers: the other lessons too (a Jupyter kernel binds ports the OS hands
# out, and the kernels get one thread each, see above). The scopes spend most of their time waiting on
# processes they started, so `make test` runs two more workers than the machine has cores (Makefile).
# (A path list, not xdist_group markers: pytest-xdist 3.8's loadgroup does not group under pytest 9,
# which ignores the nodeid suffix it sets.)
RAY = ("tests/test_ray_backend.py", "tests/test_storage.py", "tests/test_cluster_faults.py")
RAY_LESSON = ("notebooks/source/12_",)
LOCAL = ("notebooks/source/10_", "notebooks/source/11_",
         "tests/test_tournament.py", "tests/test_notebook_browser.py")


def _scope(nodeid: str) -> str:
    """The scope a test runs in: "ray", "ray-lesson", "local", "site", or its own node id."""
    if nodeid.startswith(RAY):
        return "ray"
    if nodeid.startswith(RAY_LESSON) or (nodeid.startswith("tests/test_readme.py::") and nodeid.endswith("-ray]")):
        return "ray-lesson"
    if nodeid.startswith("tests/test_site.py::"):
        return "site"  # one worker: its tests share one build of the site (a module fixture)
    return "local" if nodeid.startswith(LOCAL) else nodeid


# The longest work first (list scheduling's LPT rule): xdist hands the scopes out in the order of the
# collection, and a two-minute test left to the end runs alone while the other workers wait. The
# expected seconds of the slow tests are data, tests/durations.json (measured, only the order matters;
# a test it does not name counts 0 and keeps its place). Refresh it after a full run with
# `PODRACER_DURATIONS_OUT=tests/durations.json make test`.
DURATIONS = Path(__file__).resolve().parent / "tests" / "durations.json"


def _longest_scopes_first(items: list[pytest.Item]) -> None:
    import json

    seconds = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    cost: dict[str, float] = {}
    for item in items:
        scope = _scope(item.nodeid)
        cost[scope] = cost.get(scope, 0.0) + seconds.get(item.nodeid, 0.0)
    order = {id(item): i for i, item in enumerate(items)}
    # Stable: a scope's tests keep their order (module fixtures), ties keep the collection's order.
    items.sort(key=lambda item: (-cost[_scope(item.nodeid)], order[id(item)]))


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadScopeScheduling

    class ProcessesTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    # The workers' collection is already in the order to hand out (_longest_scopes_first); xdist's
    # own reordering (scopes with the most tests first) would undo it.
    config.option.loadscopereorder = False
    return ProcessesTogether(config, log)


class _DurationRecorder:
    """Writes each test's seconds (set-up, call and tear-down) to $PODRACER_DURATIONS_OUT at the end."""

    def __init__(self, path: str):
        self.path, self.seconds = Path(path), {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        import json

        slow = {k: round(v, 1) for k, v in sorted(self.seconds.items(), key=lambda kv: -kv[1]) if v >= 2.0}
        self.path.write_text(json.dumps(slow, indent=0) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    out = os.environ.get("PODRACER_DURATIONS_OUT")
    if out and not os.environ.get("PYTEST_XDIST_WORKER"):  # the controller sees every worker's reports
        config.pluginmanager.register(_DurationRecorder(out), "podracer-durations")
    # nbmake executes the notebooks with nbclient, whose stand-in for the Output widget (lessons 07
    # and 08 draw into one) could leave a cell waiting out its whole timeout, 1,800 s here, for a reply
    # that had already come in (jupyter/nbclient#312); podracer.course.notebook_client sends that
    # widget's messages the way that cannot stall, and the same send is used for nbmake's runs.
    try:
        from nbclient.output_widget import OutputWidget
    except ImportError:  # no notebook extras installed: no notebooks to run
        return
    from podracer.course import _output_widget

    OutputWidget._publish_msg = _output_widget()._publish_msg
