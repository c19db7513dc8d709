"""Pages the site builds from the code and the notebooks (run by mkdocs-gen-files, see mkdocs.yml).

- ``reference/<package>.md``: one page per package, one section per name in its ``__all__``, rendered
  by mkdocstrings from the docstrings and type hints. A new public name appears by itself; a public
  name without a docstring stops the build (``undocumented`` below, also run by tests/test_site.py).
- ``course/NN_name.ipynb``: the student notebooks (``notebooks/[0-9][0-9]_*.ipynb``, globbed), rendered
  by mkdocs-jupyter, with ``course/GLOSSARY.md`` beside them and ``course/index.md`` listing them.
- ``changelog.md``: CHANGELOG.md as a page.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import griffe

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("podracer", "finance", "locomotion")
ABOUT = {
    "podracer": "The domain-free core: batched-tensor envs, agents, presets, the train loop, the tournament.",
    "finance": "Market data, the stock-trading and portfolio envs, backtests, walk-forward, statistics.",
    "locomotion": "MuJoCo locomotion tasks in the env protocol, over several simulator backends.",
}
# The Colab badge is an image on Google's servers: the site shows the same link as text, so that no
# page needs the network to render.
BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\(([^)]*)\)")


@functools.lru_cache(maxsize=None)
def _load(package: str, root: Path) -> griffe.Module:
    return griffe.load(package, search_paths=[str(root)], resolve_aliases=True, resolve_external=False)


def public_objects(package: str) -> list[tuple[str, str, griffe.Object]]:
    """``(name, identifier, object)`` for each name in ``package.__all__``, as griffe reads the code (what
    mkdocstrings renders). ``identifier`` is what the page passes to mkdocstrings: ``package.name``,
    except where a submodule has the name of the function it defines (``finance.backtest``): the package
    exports the function, which ``from .backtest import backtest`` bound over the submodule at import."""
    module = _load(package, ROOT)
    found = []
    for name in module.exports or ():
        name = name if isinstance(name, str) else name.name
        obj = module[name]
        obj = obj.final_target if obj.is_alias else obj
        identifier = f"{package}.{name}"
        if obj.is_module and name in obj.members:
            obj, identifier = obj.members[name], f"{obj.path}.{name}"
            obj = obj.final_target if obj.is_alias else obj
        found.append((name, identifier, obj))
    return found


def undocumented(package: str) -> list[str]:
    """Names in ``package.__all__`` whose object (class, function or constant) has no docstring.
    A constant's docstring is the string literal on the line after it (PEP 257's attribute docstring)."""
    return [f"{package}.{name} ({obj.path})" for name, _, obj in public_objects(package)
            if not (obj.docstring and obj.docstring.value.strip())]


def _documented_params(obj: griffe.Object) -> list[str]:
    sections = griffe.parse_google(obj.docstring, warn_unknown_params=False, warn_missing_types=False, warnings=False)
    return [part.strip() for section in sections if section.kind.value == "parameters"
            for param in section.value for part in param.name.split(",")]


def unknown_params(package: str) -> list[str]:
    """Arguments that a docstring's ``Args:`` documents but the signature does not take, in every public
    function and class (``__init__``) and their public methods. Google style, with one line allowed to
    document several (``start, end: ...``), which griffe's own check counts as unknown."""
    wrong = []

    def check(obj: griffe.Object) -> None:
        function = obj.members.get("__init__") if obj.is_class else obj
        if function is not None and function.is_alias:
            function = function.final_target
        if obj.docstring and function is not None and function.is_function:
            taken = {p.name for p in function.parameters}
            wrong.extend(f"{obj.path}: {name}" for name in _documented_params(obj)
                         if name.lstrip("*") not in taken)

    for _, _, obj in public_objects(package):
        check(obj)
        if obj.is_class:
            for member in obj.members.values():
                if not member.is_alias and member.is_function and not member.name.startswith("_"):
                    check(member)
    return wrong


def reference_page(package: str) -> str:
    lines = [f"# `{package}`", "", ABOUT[package], "",
             f"Every public name of `{package}` (its `__all__`), in the order the package lists them.", ""]
    for name, identifier, _ in public_objects(package):
        lines += [f"::: {identifier}", ""]
    return "\n".join(lines)


def lesson_notebook(path: Path) -> str:
    """The student notebook as the site shows it: glossary links to the glossary page, the badge as text."""
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            text = "".join(cell["source"])
            text = BADGE.sub(r"[Open in Colab](\1)", text).replace("](GLOSSARY.md", "](GLOSSARY.html")
            cell["source"] = text
    return json.dumps(nb, indent=1)


def lesson_title(path: Path) -> str:
    for cell in json.loads(path.read_text())["cells"]:
        heading = re.search(r"^# (.+)$", "".join(cell["source"]), flags=re.M)
        if cell["cell_type"] == "markdown" and heading:
            return heading.group(1).strip()
    return path.stem


def course_index(lessons: list[Path]) -> str:
    lines = ["# The course: lessons", "",
             "The student notebooks of the course (`notebooks/NN_name.ipynb`), as they open in JupyterLab or "
             "Colab. They are shown **without their outputs**: the repository stores no outputs, and the site "
             "does not run them (`make site EXECUTE=1` does, at `PODRACER_SIZE`, smoke by default, to "
             "show the figures). `make lab` opens them at their learning size; the [syllabus](../syllabus.md) "
             "says how a term uses them, and the [glossary](GLOSSARY.md) defines each term once.", ""]
    lines += [f"- [{lesson_title(path)}]({path.name})" for path in lessons]
    return "\n".join(lines) + "\n"


def main() -> None:
    import mkdocs_gen_files  # only inside a build: tests import this file for `undocumented`

    missing = [name for package in PACKAGES for name in undocumented(package)]
    if missing:
        raise SystemExit("public names without a docstring (add one where each is defined): " + ", ".join(missing))
    wrong = [name for package in PACKAGES for name in unknown_params(package)]
    if wrong:
        raise SystemExit("docstrings document arguments their signature does not take: " + ", ".join(wrong))
    for package in PACKAGES:
        with mkdocs_gen_files.open(f"reference/{package}.md", "w") as f:
            f.write(reference_page(package))
    lessons = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    for path in lessons:
        with mkdocs_gen_files.open(f"course/{path.name}", "w") as f:
            f.write(lesson_notebook(path))
    with mkdocs_gen_files.open("course/index.md", "w") as f:
        f.write(course_index(lessons))
    with mkdocs_gen_files.open("course/GLOSSARY.md", "w") as f:
        f.write((ROOT / "notebooks" / "GLOSSARY.md").read_text())
    with mkdocs_gen_files.open("changelog.md", "w") as f:
        f.write((ROOT / "CHANGELOG.md").read_text())


if __name__ in ("__main__", "<run_path>"):  # mkdocs-gen-files runs the script with runpy
    main()
