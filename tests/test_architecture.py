"""The import contracts in pyproject.toml ([tool.importlinter], run by `lint-imports` in `make check`)
describe the layers docs/architecture.md draws. What import-linter cannot check itself is checked here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["name"]: c for c in config["contracts"]}


def _named(start: str) -> dict:
    (contract,) = [c for name, c in _contracts().items() if name.startswith(start)]
    return contract


def test_the_core_that_names_no_domain_is_every_module_of_podracer_but_the_course():
    """The course contract is exhaustive (import-linter fails when a module of podracer is not in it),
    the forbidden one is not: so both must list the same core, or a new module would escape the second."""
    course = _named("podracer.course is a tool layer over the core")
    assert course["exhaustive"] is True and course["containers"] == ["podracer"]
    top, core = course["layers"]
    assert top == "course"
    core_modules = {f"podracer.{m}" for m in re.split(r"\s*:\s*", core.strip())}
    no_domain = _named("the core names no domain")
    assert set(no_domain["source_modules"]) == core_modules
    assert {"finance", "locomotion"} <= set(no_domain["forbidden_modules"])
    on_disk = {f"podracer.{p.stem if p.is_file() else p.name}" for p in (ROOT / "podracer").iterdir()
               if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert on_disk - {"podracer.course"} == core_modules


def test_no_package_of_ours_has_an_import_cycle():
    ancestors = {a for c in _contracts().values() if c["type"] == "acyclic_siblings" for a in c["ancestors"]}
    assert {"podracer", "finance"} <= ancestors
