"""The core knows no domain: envs, presets and trusted factories are registered, and the installed
domains are imported by the core only when a lookup misses (entry points ``podracer.domains``)."""

import functools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

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


# ---------------------------------------------------------------------------- agents register themselves
def _run_in(cwd, code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                         cwd=cwd, env={**os.environ, "PYTHONPATH": f"{cwd}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                                       "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_agentbase_load_resolves_the_agent_without_the_registry_module(tmp_path):
    """The name -> class table lives beside the base class and each agent enters it when defined:
    with only ``podracer.agents.sac`` imported (the packages' __init__ files not run, so the
    registry module is never imported), ``AgentBase.load`` finds SAC from the checkpoint's name."""
    agent = podracer.make_agent("sac", PendulumVecEnv(2), seed=0, preset=None, verbose=False, hidden_sizes=(8,))
    path = agent.save(tmp_path / "sac.pt")
    out = _run_in(tmp_path, f"""
        import sys, types
        for name, where in [("podracer", {str(Path(podracer.__file__).parent)!r}),
                            ("podracer.agents", {str(Path(podracer.agents.__file__).parent)!r})]:
            package = types.ModuleType(name)  # the package without its __init__: nothing else gets imported
            package.__path__ = [where]
            sys.modules[name] = package
        from podracer.agents.sac import SAC
        from podracer.agents.common import AgentBase
        loaded = AgentBase.load({str(path)!r})
        print(type(loaded).__name__, loaded.config.hidden_sizes, "podracer.agents.registry" in sys.modules)
    """)
    assert out.split() == ["SAC", "(8,)", "False"]


PLUGIN = '''
from podracer.agents.sac import SAC


class PluginSAC(SAC):
    """A domain's agent: subclassing with its own name registers it."""

    name = "plugin_sac"
'''


def test_a_plugin_agent_registers_itself_and_a_checkpoint_naming_it_loads_in_a_fresh_process(tmp_path, monkeypatch):
    (tmp_path / "plugin_agents.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    import plugin_agents

    agent = podracer.make_agent("plugin_sac", PendulumVecEnv(2), seed=0, preset=None, verbose=False, hidden_sizes=(8,))
    assert type(agent) is plugin_agents.PluginSAC and podracer.agents.agent_name(type(agent)) == "plugin_sac"
    assert "plugin_sac" not in podracer.AGENTS  # AGENTS describes the agents Podracer ships
    agent.save(tmp_path / "plugin.pt")
    # A fresh process that never imported the plugin: the name misses, the installed domains are
    # imported (entry points "podracer.domains", here one declared by hand) and the plugin registers.
    out = _run_in(tmp_path, f"""
        from importlib.metadata import EntryPoint
        import podracer, podracer.plugins as plugins
        plugins.entry_points = lambda group: [EntryPoint("plugin", "plugin_agents", group)]
        loaded = podracer.load_agent({str(tmp_path / "plugin.pt")!r})
        print(type(loaded).__name__, loaded.config.hidden_sizes)
    """)
    assert out.split() == ["PluginSAC", "(8,)"]


def test_register_agent_under_another_name_and_a_taken_name_is_refused():
    from podracer.agents.sac import SAC

    class Renamed(SAC):  # no name of its own: not registered, and saved as module:Class
        pass

    assert podracer.agents.registered_agents()["sac"] is SAC
    with pytest.raises(ValueError, match="must be importable by name"):
        podracer.agents.agent_name(Renamed)  # defined in a function: no checkpoint could name it
    assert podracer.register_agent(Renamed, "renamed_sac_for_test") is Renamed
    assert podracer.resolve_agent("Renamed_SAC_for_test") is Renamed and podracer.agents.agent_name(Renamed) == \
        "renamed_sac_for_test"
    with pytest.raises(ValueError, match=r"agent name 'sac' is already registered to podracer.agents.sac:SAC"):
        podracer.register_agent(Renamed, "sac")
    with pytest.raises(TypeError, match="not an agent class"):
        podracer.register_agent(dict, "not_an_agent")
    with pytest.raises(ValueError, match="unknown agent 'nosuch'; available: .*'ppo'"):
        podracer.resolve_agent("nosuch")
