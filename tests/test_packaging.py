"""Set-up files agree with each other: environment.yml and pyproject.toml list the same
dependencies, and constraints.txt pins every one of them (torch to the CPU build on disk)."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _name(req: str) -> str:
    return re.split(r"[\[<>=!~; ]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pyproject_names() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra, items in project["optional-dependencies"].items():
        reqs += [r for r in items if not r.startswith("podracer-rl")]
    return {_name(r): r for r in reqs}


def _conda_names() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    names = {}
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            names.update({_name(r): r for r in dep["pip"] if not r.startswith("-e")})
        elif _name(dep) not in ("python", "pip"):
            names[_name(dep)] = dep
    return names


def test_environment_yml_matches_pyproject():
    py, conda = _pyproject_names(), _conda_names()
    assert sorted(set(py) - set(conda)) == [], "in pyproject.toml but not environment.yml"
    assert sorted(set(conda) - set(py)) == [], "in environment.yml but not pyproject.toml"


def test_constraints_pin_every_direct_dependency():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[_name(name)] = version
    assert pins.get("torch") == "2.13.0"
    missing = sorted(set(_pyproject_names()) - set(pins))
    assert missing == [], f"not pinned in constraints.txt: {missing}"


def test_every_package_exports_its_api():
    import finance
    import locomotion
    import podracer

    for pkg in (podracer, finance, locomotion):
        for name in getattr(pkg, "__all__", []):
            assert hasattr(pkg, name), f"{pkg.__name__}.__all__ names missing {name}"
    assert {"make_agent", "train", "make_env", "evaluate"} <= set(podracer.__all__)
