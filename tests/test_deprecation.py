"""One deprecation table (``podracer.deprecation``): every old name in it still works and warns with
the table's text, docs/stable_api.md and docs/deprecations.md show exactly that table, nothing else in the
packages warns of a rename its own way, and no name outlives its removal version."""

import ast
import importlib
import re
import sys
import types
import warnings
from pathlib import Path

import pytest

import podracer
from podracer import deprecation
from podracer.agents.common import make_config, registered_agents
from podracer.deprecation import DEPRECATIONS, deprecated_alias, markdown_table, message, version_tuple

ROOT = Path(__file__).resolve().parents[1]
# Where the classes that own renamed attributes live (a new owner in the table is added here).
OWNERS = {"OffPolicyAgent": "podracer.agents.offpolicy", "ReplayBuffer": "podracer.agents.replay",
          "StockTradingVecEnv": "finance.env", "Entry": "podracer.tournament.schema", "Pod": "podracer.tournament.pod",
          "Leaderboard": "podracer.tournament", "PPOConfig": "podracer.agents.ppo"}


def _generated_block(path: Path) -> str:
    text = path.read_text()
    found = re.search(r"<!-- deprecations:begin[^>]*-->\n(.*?)<!-- deprecations:end -->", text, flags=re.S)
    assert found, f"{path.name} has no <!-- deprecations:begin --> ... <!-- deprecations:end --> block"
    return found.group(1)


@pytest.mark.parametrize("page", ["docs/stable_api.md", "docs/deprecations.md"])  # the README's moved there
def test_the_readme_and_the_docs_page_show_the_modules_table(page):
    assert _generated_block(ROOT / page) == markdown_table(), (
        f"{page} disagrees with podracer.deprecation.DEPRECATIONS: paste podracer.deprecation.markdown_table()")


def test_each_name_has_one_removal_version_after_the_current_one():
    current = version_tuple(podracer.__version__)
    for row in DEPRECATIONS.values():
        assert version_tuple(row.since) < version_tuple(row.removed_in), row
        assert version_tuple(row.removed_in) > current, (
            f"{row.old} was to be removed in {row.removed_in}; this is {podracer.__version__}: remove it and its row")


def test_the_warning_names_the_new_name_and_the_removal_version():
    assert message("SACConfig.hidden") == ("SACConfig.hidden is renamed 'hidden_sizes'; the old name works until "
                                           "podracer 1.2 removes it (deprecated in 1.0)")
    assert "is renamed 'podracer.checkpoints'" in message("podracer.tournament.checkpoints")  # another owner: in full
    with pytest.raises(KeyError, match="not in podracer.deprecation.DEPRECATIONS: add its row"):
        message("podracer.never_deprecated")


def _one_warning(caught: list[warnings.WarningMessage]) -> str:
    said = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    assert len(said) == 1, said
    return said[0]


def _check_config_field(row: deprecation.Deprecation) -> None:
    configs = {cls.config_cls.__name__: cls.config_cls for cls in registered_agents().values()}
    owner, _, old = row.old.rpartition(".")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = make_config(configs[owner], {old: getattr(configs[owner](), row.new_short)})
    assert _one_warning(caught) == message(row.old)
    assert getattr(cfg, row.new_short) == getattr(configs[owner](), row.new_short)


def _check_attribute(row: deprecation.Deprecation) -> None:
    owner, _, old = row.old.rpartition(".")
    descriptor = vars(getattr(importlib.import_module(OWNERS[owner]), owner))[old]
    assert isinstance(descriptor, deprecated_alias) and descriptor.key == row.old
    holder = types.SimpleNamespace(**{row.new_short: object()})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert descriptor.__get__(holder) is getattr(holder, row.new_short)
    assert _one_warning(caught) == message(row.old)


def _check_argument(row: deprecation.Deprecation) -> None:
    owner, function, old = row.old.split(".")
    method = getattr(getattr(importlib.import_module(OWNERS[owner]), owner), function)
    assert method.renamed_arguments[old] is row  # @renamed_argument(row.old) on it
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert deprecation.renamed_argument(row.old)(lambda **kw: kw)(**{old: 7}) == {row.new_short: 7}
    assert _one_warning(caught) == message(row.old)


def _check_module_attribute(row: deprecation.Deprecation) -> None:
    module, _, old = row.old.rpartition(".")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert getattr(importlib.import_module(module), old) is deprecation.resolve(row.new)
    assert _one_warning(caught) == message(row.old)


def _check_function(row: deprecation.Deprecation) -> None:
    old = deprecation.resolve(row.old)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(TypeError):  # no arguments: the warning comes first, then the new function refuses
            old()
    assert _one_warning(caught) == message(row.old)


def _check_module(row: deprecation.Deprecation) -> None:
    sys.modules.pop(row.old, None)  # import it afresh: a moved module warns when imported
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        moved = importlib.import_module(row.old)
    assert _one_warning(caught) == message(row.old)
    new = importlib.import_module(row.new)
    assert all(getattr(moved, name) is getattr(new, name) for name in moved.__all__)


CHECKS = {"config field": _check_config_field, "attribute": _check_attribute, "argument": _check_argument,
          "module attribute": _check_module_attribute, "function": _check_function, "module": _check_module}


@pytest.mark.parametrize("old", list(DEPRECATIONS))
def test_every_old_name_in_the_table_works_and_warns_with_the_tables_text(old):
    row = DEPRECATIONS[old]
    CHECKS[row.kind](row)


def test_no_module_warns_of_a_rename_its_own_way():
    """Every FutureWarning or DeprecationWarning the packages raise comes from podracer.deprecation."""
    own = []
    for package in ("podracer", "finance", "locomotion"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "deprecation.py" and path.parent.name == "podracer":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("warn")
                        and any(isinstance(a, ast.Name) and a.id in ("FutureWarning", "DeprecationWarning")
                                for a in ast.walk(node))):
                    own.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert own == [], f"these warn of a deprecation without podracer.deprecation: {own}"


def test_a_deprecated_alias_without_a_row_fails_when_its_class_is_defined():
    with pytest.raises((KeyError, RuntimeError)) as error:  # Python < 3.12 wraps __set_name__'s error
        type("Thing", (), {"old_name": deprecated_alias("new_name")})
    said = f"{error.value} {error.value.__cause__}"
    assert "Thing.old_name' is not in podracer.deprecation.DEPRECATIONS: add its row" in said
