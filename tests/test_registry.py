"""The core knows no domain: envs, presets and trusted factories are registered, and the installed
domains are imported by the core only when a lookup misses (entry points ``podracer.domains``)."""

import functools
import subprocess
import sys
import textwrap

import pytest

import podracer
from podracer.envs import PendulumVecEnv
from podracer.plugins import ENTRY_POINT_GROUP


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_import_podracer_imports_no_domain():
    out = _run("""
        import sys, podracer
        podracer.make_env("pendulum", 2); podracer.get_preset("ppo", "pendulum")  # core lookups that hit
        print(sorted(m for m in sys.modules if m.split('.')[0] in ('finance', 'locomotion')))
    """)
    assert out.strip() == "[]"


def test_a_lookup_that_misses_imports_the_installed_domains():
    out = _run("""
        import sys, podracer
        env = podracer.make_env("HalfCheetah", 1, backend="gymnasium")   # registered by locomotion on import
        p = podracer.get_preset("ppo", "stock_trading")                 # registered by finance on import
        print(env.task, p.num_envs, 'locomotion' in sys.modules, 'finance' in sys.modules)
    """)
    assert out.split()[-4:] == ["halfcheetah", "128", "True", "True"]


def test_the_domains_are_declared_as_entry_points():
    from importlib.metadata import entry_points

    assert {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)} == {"finance": "finance",
                                                                                  "locomotion": "locomotion"}


def test_register_env_and_make_env():
    podracer.register_env("TinyPendulum", functools.partial(PendulumVecEnv, max_episode_steps=5))
    env = podracer.make_env("tinypendulum", 3)  # names are case-insensitive
    assert env.num_envs == 3 and "TinyPendulum" in podracer.registered_envs()
    podracer.register_env("TinyPendulum", functools.partial(PendulumVecEnv, max_episode_steps=5))  # same again: fine
    with pytest.raises(ValueError, match="already registered.*overwrite=True"):
        podracer.register_env("tinypendulum", PendulumVecEnv)
    podracer.register_env("tinypendulum", PendulumVecEnv, overwrite=True)
    with pytest.raises(TypeError, match="must be callable"):
        podracer.register_env("broken", "not a factory")


def test_unknown_env_lists_the_registered_ones():
    with pytest.raises(ValueError, match=r"unknown env 'nope'.*'cartpole'.*'HalfCheetah'.*'pendulum'.*register_env"):
        podracer.make_env("nope")


def test_presets_are_yaml_data_and_a_bad_file_names_the_problem(tmp_path):
    good = tmp_path / "mine.yaml"
    good.write_text("ppo:\n  my_yaml_task:\n    num_envs: 4\n    total_steps: 64\n    provenance: test\n"
                    "    config: {num_steps: 8, learning_rate: 1.0e-3, hidden_sizes: [8, 8]}\n")
    assert podracer.register_presets(good) == [("ppo", "my_yaml_task")]
    assert podracer.get_preset("ppo", "my_yaml_task") == podracer.Preset(4, 64, {"num_steps": 8, "learning_rate": 1e-3,
                                                                                 "hidden_sizes": (8, 8)}, "test")
    text = tmp_path / "text.yaml"
    text.write_text("ppo:\n  t:\n    num_envs: 4\n    total_steps: 64\n    config: {learning_rate: 3e-4}\n")
    with pytest.raises(ValueError, match=r"\['learning_rate'\] read as text.*3.0e-4"):
        podracer.register_presets(text)
    missing = tmp_path / "missing.yaml"
    missing.write_text("ppo:\n  t:\n    num_envs: 4\n    config: {}\n")
    with pytest.raises(ValueError, match=r"missing.yaml: ppo.t: expected the keys num_envs, total_steps, config"):
        podracer.register_presets(missing)
    typo = tmp_path / "typo.yaml"
    typo.write_text("ppo:\n  t:\n    num_envs: 4\n    total_steps: 64\n    config: {learning_rat: 1.0e-3}\n")
    with pytest.raises(ValueError, match=r"typo.yaml: ppo.t: unknown PPOConfig field\(s\) \['learning_rat'\]"):
        podracer.register_presets(typo)
    bad = tmp_path / "bad.yaml"
    bad.write_text("ppo:\n  t:\n    num_envs: 4\n    total_steps: 64\n    config: {learning_rate: -1.0}\n")
    with pytest.raises(ValueError, match=r"bad.yaml: ppo.t: learning_rate must be positive"):
        podracer.register_presets(bad)
    with pytest.raises(ValueError, match="unknown agent 'nosuch'"):
        (tmp_path / "agent.yaml").write_text("nosuch:\n  t: {num_envs: 1, total_steps: 1, config: {}}\n")
        podracer.register_presets(tmp_path / "agent.yaml")


def test_every_shipped_preset_builds_its_agents_config():
    from podracer.agents.common import make_config

    table = podracer.presets()
    assert {"pendulum", "cartpole", "halfcheetah", "stock_trading"} <= set(table.task)
    for row in table.itertuples():
        cfg = make_config(podracer.resolve_agent(row.agent).config_cls, row.config)  # unknown keys or bad values raise
        assert row.num_envs >= 1 and row.total_steps >= row.num_envs, (row.agent, row.task, cfg)


def test_agent_names_come_from_the_classes():
    for name, (path, _spaces, _paper) in podracer.AGENTS.items():
        cls = podracer.resolve_agent(name)
        assert cls.name == name and f"{cls.__module__}:{cls.__qualname__}" == path


def test_a_stored_factory_of_a_domain_is_trusted_without_importing_it_first():
    out = _run("""
        import sys
        from podracer.tournament.config import check_trusted
        check_trusted("make_env", "locomotion.make:make_env", "store/tournament.yaml")
        check_trusted("make_env", "finance.demo:train_env", "store/tournament.yaml")
        try:
            check_trusted("make_env", "posix:system", "store/tournament.yaml")
        except ValueError as e:
            print("refused", "allow=" in str(e))
    """)
    assert out.strip() == "refused True"


def test_a_broken_domain_warns_with_its_name_and_the_others_still_load(monkeypatch):
    from importlib.metadata import EntryPoint

    import podracer.plugins as plugins

    eps = [EntryPoint("broken", "no_such_domain_pkg", ENTRY_POINT_GROUP),
           EntryPoint("good", "json", ENTRY_POINT_GROUP)]
    monkeypatch.setattr(plugins, "entry_points", lambda group: eps if group == ENTRY_POINT_GROUP else [])
    monkeypatch.setattr(plugins, "_loaded", {})
    with pytest.warns(RuntimeWarning, match=r"domain 'broken' \(no_such_domain_pkg\) failed to import: "
                                            r"ModuleNotFoundError.*reinstall"):
        assert plugins.load_domains() == {"broken": False, "good": True}
    assert plugins.load_domains() == {"broken": False, "good": True}  # once per process: no second warning
