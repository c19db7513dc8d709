"""The files that tell a visitor how the project is kept: CITATION.cff, the CI workflow a fork runs,
the bug-report template, the changelog's released history."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

import podracer

ROOT = Path(__file__).resolve().parents[1]


def test_citation_file_is_cff_1_2_0_citing_the_project_and_the_paper():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    # CFF 1.2.0's required keys, and ours: the version the package reports, the paper it follows.
    assert {"cff-version", "message", "title", "authors"} <= cff.keys()
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert str(cff["version"]) == podracer.__version__
    assert all("name" in a or "family-names" in a for a in cff["authors"])
    (paper,) = [ref for ref in cff["references"] if "ElegantRL-Podracer" in ref["title"]]
    assert {"title", "authors", "type", "year"} <= paper.keys()
    assert [a["family-names"] for a in paper["authors"]][:2] == ["Liu", "Li"]
    assert any("2112.05923" in i["value"] for i in paper["identifiers"])


def test_ci_workflow_runs_the_readme_commands_on_python_3_11():
    ci = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())
    (job,) = ci["jobs"].values()
    assert job["runs-on"].startswith("ubuntu")
    python = [s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python")]
    assert python and python[0]["with"]["python-version"] == "3.11"
    runs = [s["run"].strip() for s in job["steps"] if "run" in s]
    assert "make check" in runs and "make test" in runs
    assert runs.index("make check") < runs.index("make test")


def test_bug_report_asks_for_version_command_and_traceback():
    form = yaml.safe_load((ROOT / ".github" / "ISSUE_TEMPLATE" / "bug_report.yml").read_text())
    required = {field["id"] for field in form["body"] if field.get("validations", {}).get("required")}
    assert {"version", "command", "traceback"} <= required


def test_changelog_has_unreleased_then_released_versions_newest_first():
    text = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, flags=re.M)
    assert headings[0] == ("Unreleased", "")
    versions = [tuple(int(x) for x in v.split(".")) for v, _ in headings[1:]]
    assert versions and versions == sorted(versions, reverse=True)
    assert headings[1][0] == podracer.__version__, "the newest release is the version the package reports"
    assert all(date for _, date in headings[1:]), "every release has its date"
