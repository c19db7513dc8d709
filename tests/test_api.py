"""The stable API: presets, make_agent's seeding and preset choice, one agent-name resolver, the one
checkpoint writer, train's step-budget warnings, and the deprecation rule for renamed names."""

import ast
import importlib
import logging
import warnings
from pathlib import Path

import pytest
import torch

import podracer
from podracer import checkpoints
from podracer.agents.common import make_config
from podracer.envs import CartPoleVecEnv, PendulumVecEnv

TINY = dict(hidden_sizes=(8,), num_steps=4, update_epochs=1, num_minibatches=1)


def _weights(agent):
    return torch.cat([p.detach().flatten() for p in agent.model.parameters()])


# ---------------------------------------------------------------------------- exports
def import_groups(path: Path) -> list[list[str]]:
    """The public names a package's ``__init__.py`` imports at top level, in groups: a comment
    line between two imports (``# Agents: ...``) opens a new group. Imports under a top-level
    ``if TYPE_CHECKING:`` count where they stand: names the package imports on first use (PEP 562)."""
    source = path.read_text()
    lines = source.splitlines()
    groups: list[list[str]] = []
    end = 0  # the last line of the statement before
    nodes = []
    for node in ast.parse(source).body:
        lazy = isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        nodes += node.body if lazy else [node]
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and getattr(node, "module", None) not in ("__future__",
                                                                                                      "typing"):
            if not groups or any(line.lstrip().startswith("#") for line in lines[end:node.lineno - 1]):
                groups.append([])
            groups[-1] += [(a.asname or a.name).split(".")[0] for a in node.names]
        end = node.end_lineno
    return [[n for n in group if not n.startswith("_")] for group in groups]


@pytest.mark.parametrize("package", ["podracer", "finance", "locomotion"])
def test_public_names_are_exported_and_grouped(package):
    """``__all__`` is what the package imports, nothing more or less, and in the order of its
    commented import groups (podracer: envs, agents, one pod, many pods; finance: data, features,
    env, backtest, ...), so the list reads as the API's table of contents."""
    module = importlib.import_module(package)
    groups = import_groups(Path(module.__file__))
    imported = [name for group in groups for name in group]
    for name in module.__all__:
        assert hasattr(module, name), f"{package}.__all__ names {name}, which it does not have"
    assert len(module.__all__) == len(set(module.__all__)), f"{package}.__all__ repeats a name"
    assert sorted(set(imported) - set(module.__all__)) == [], f"{package} imports these but does not export them"
    assert sorted(set(module.__all__) - set(imported)) == [], f"{package} exports these without importing them"
    group_of = {name: i for i, group in enumerate(groups) for name in group}
    order = [group_of[name] for name in module.__all__]
    assert order == sorted(order), (
        f"{package}.__all__ is not in the order of its import groups: "
        f"{[(name, group_of[name]) for name in module.__all__]}")
    if package in ("podracer", "finance"):  # (locomotion's imports are one block, no headers yet)
        assert len(groups) >= 4 and all(groups), f"{package}: the imports should be grouped under comment headers"
    if package == "podracer":
        assert podracer.agents.ppo.PPO.name == "ppo"  # submodules reachable after import


def test_old_names_keep_working_with_a_future_warning():
    with pytest.warns(FutureWarning, match="resolve_agent"):
        assert podracer.get_agent_class is podracer.resolve_agent


# ---------------------------------------------------------------------------- seeding
def test_make_agent_seed_is_local_and_reproducible():
    env = PendulumVecEnv(4)
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a = podracer.make_agent("ppo", env, seed=7, verbose=False)
    assert torch.equal(torch.random.get_rng_state(), before), "make_agent(seed=) must not touch torch's global RNG"
    b = podracer.make_agent("ppo", env, seed=7, verbose=False)
    c = podracer.make_agent("ppo", env, seed=8, verbose=False)
    assert torch.equal(_weights(a), _weights(b))
    assert not torch.equal(_weights(a), _weights(c))
    obs = torch.zeros(4, 3)
    assert torch.equal(a.act(obs), b.act(obs))  # the agent's own generator is seeded too


# ---------------------------------------------------------------------------- presets
def test_presets_table_lists_agent_task_envs_budget_config():
    table = podracer.presets()
    assert list(table.columns) == ["agent", "task", "num_envs", "total_steps", "config", "provenance"]
    row = table[(table.agent == "ppo") & (table.task == "pendulum")].iloc[0]
    preset = podracer.get_preset("ppo", "pendulum")
    assert (row.num_envs, row.total_steps, row.config) == (preset.num_envs, preset.total_steps, preset.config)
    assert {"sac", "td3", "ddpg", "dqn"} <= set(table.agent)
    assert row.provenance == preset.provenance and "seeds" in row.provenance  # every preset says where it comes from
    assert (table.provenance.str.len() > 0).all()


def test_make_agent_picks_the_preset_of_a_shipped_env_and_says_so(caplog):
    env = PendulumVecEnv(8)
    with caplog.at_level(logging.INFO, logger="podracer"):
        agent = podracer.make_agent("ppo", env, seed=0)
    preset = podracer.get_preset("ppo", "pendulum")
    assert agent.preset == preset
    assert agent.config.learning_rate == preset.config["learning_rate"]
    assert "preset 'pendulum'" in caplog.text and f"tuned with num_envs={preset.num_envs}; this env has 8" in caplog.text


def test_explicit_preset_none_and_overrides():
    env = PendulumVecEnv(8)
    default = podracer.make_agent("ppo", env, preset=None, verbose=False)
    assert default.preset is None and default.config == podracer.agents.ppo.PPOConfig()
    named = podracer.make_agent("ppo", CartPoleVecEnv(8), preset="cartpole", learning_rate=1e-4, verbose=False)
    assert named.preset == podracer.get_preset("ppo", "cartpole") and named.config.learning_rate == 1e-4
    with pytest.raises(ValueError, match="no ppo preset 'walker'.*cartpole"):
        podracer.make_agent("ppo", env, preset="walker")
    gym_env = podracer.make_gym_env("Pendulum-v1", 2)  # no task: defaults, no message
    assert podracer.make_agent("ppo", gym_env, verbose=False).preset is None


def test_train_takes_the_step_budget_from_the_preset(monkeypatch):
    env = PendulumVecEnv(4)
    agent = podracer.make_agent("ppo", env, seed=0, verbose=False, **TINY)
    monkeypatch.setattr(agent, "preset", podracer.Preset(num_envs=4, total_steps=48, config={}))
    _, history = podracer.train(agent, env, progress=False)
    assert history["global_step"].iloc[-1] == 48
    bare = podracer.make_agent("ppo", env, preset=None, verbose=False, **TINY)
    with pytest.raises(ValueError, match="give total_steps"):
        podracer.train(bare, env, progress=False)


def test_register_preset_from_another_package():
    podracer.register_preset("ppo", "my_task", podracer.Preset(num_envs=2, total_steps=32, config=dict(num_steps=4)))
    env = PendulumVecEnv(2)
    env.task = "my_task"
    agent = podracer.make_agent("ppo", env, verbose=False)
    assert agent.config.num_steps == 4 and agent.preset.total_steps == 32
    assert "my_task" in set(podracer.presets("ppo").task)


# ---------------------------------------------------------------------------- train warnings
def test_train_warns_when_total_steps_is_below_one_rollout_or_overshot():
    env = PendulumVecEnv(8)
    agent = podracer.make_agent("ppo", env, seed=0, verbose=False, **TINY)  # 4 x 8 = 32 env steps per call
    with pytest.warns(UserWarning, match=r"smaller than one training step.*runs 32 steps \(22 more\)"):
        _, history = podracer.train(agent, env, 10, progress=False)
    assert history["global_step"].iloc[-1] == 32
    with pytest.warns(UserWarning, match=r"runs 64 steps \(24 more\)"):
        podracer.train(agent, env, 40, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        podracer.train(agent, env, 64, progress=False)  # a multiple: silent


def test_defaults_fit_batched_envs_instead_of_huge_rollouts():
    """The 0.1 default (T=2048 per sub-env) made one PPO update 131,072 env steps on 64 sub-envs."""
    env = PendulumVecEnv(64)
    agent = podracer.make_agent("ppo", env, preset=None, verbose=False)
    assert agent.steps_per_train_step(64) <= 8192


def test_iterate_training_does_not_reseed_the_env_each_call():
    """0.1 reset the env with seed 0 on every call: every generation, every notebook re-run saw
    the same episodes. Now an unseeded call continues the env's random stream."""
    env = PendulumVecEnv(4)
    unseeded = [env_start(env, None) for _ in range(2)]
    assert not torch.equal(unseeded[0], unseeded[1])
    seeded = [env_start(env, 5) for _ in range(2)]
    assert torch.equal(seeded[0], seeded[1])


def env_start(env, seed):
    """The first observation iterate_training trains from, recorded by a probe agent."""
    probe = _Probe(env)
    next(podracer.iterate_training(probe, env, 1, seed=seed))
    return probe.first_obs


class _Probe:
    def __init__(self, env):
        self.first_obs = None

    def train_step(self, env, obs):
        self.first_obs = obs.clone()
        return obs, {"env_steps": 1.0}


class _ThreadProbe:
    """Records torch's thread count inside each train_step."""

    def __init__(self):
        self.seen = []

    def train_step(self, env, obs):
        self.seen.append(torch.get_num_threads())
        return obs, {"env_steps": float(env.num_envs)}


def test_train_uses_one_thread_unless_told_and_restores_torchs_setting(monkeypatch):
    """On a busy machine torch's default (a thread per core) made training 13-80x slower
    (docs/performance.md), so train runs on one thread; ``threads=`` or PODRACER_NUM_THREADS
    change it, 0 keeps torch's, and the caller's setting is back afterwards."""
    env = PendulumVecEnv(2)
    monkeypatch.delenv("PODRACER_NUM_THREADS", raising=False)
    torch.set_num_threads(2)  # (the conftest fixture restores the session's count after the test)
    for threads, env_var, expected in [(None, None, 1), (2, None, 2), (None, "2", 2), (1, "2", 1), (0, None, 2)]:
        if env_var is not None:
            monkeypatch.setenv("PODRACER_NUM_THREADS", env_var)
        probe = _ThreadProbe()
        podracer.train(probe, env, 4, progress=False, threads=threads)
        assert set(probe.seen) == {expected}, (threads, env_var)
        assert torch.get_num_threads() == 2  # restored
        monkeypatch.delenv("PODRACER_NUM_THREADS", raising=False)
    with pytest.raises(ValueError, match=r"threads must be a whole number of torch threads >= 0.*got -1"):
        podracer.train(_ThreadProbe(), env, 4, progress=False, threads=-1)
    monkeypatch.setenv("PODRACER_NUM_THREADS", "two")
    with pytest.raises(ValueError, match=r"PODRACER_NUM_THREADS='two': expected a whole number"):
        podracer.train(_ThreadProbe(), env, 4, progress=False)


# ---------------------------------------------------------------------------- one resolver, one writer
def test_module_class_names_work_in_make_agent_save_and_load(tmp_path):
    env = PendulumVecEnv(2)
    agent = podracer.make_agent("podracer.agents.ppo:PPO", env, seed=0, verbose=False, **TINY)
    assert type(agent).__name__ == "PPO" and podracer.resolve_agent("ppo") is type(agent)
    path = agent.save(tmp_path / "a.pt")
    assert torch.load(path, weights_only=True)["agent"] == "ppo"  # registry name when there is one
    loaded = podracer.load_agent(path)
    assert torch.equal(_weights(loaded), _weights(agent))
    with pytest.raises(TypeError, match="not an agent class"):
        podracer.resolve_agent("os:system")
    with pytest.raises(ValueError, match="unknown agent 'ppp'"):
        podracer.make_agent("ppp", env)


def test_agent_save_is_the_checksummed_atomic_writer(tmp_path):
    env = PendulumVecEnv(2)
    agent = podracer.make_agent("ppo", env, seed=0, verbose=False, **TINY)
    path = agent.save(tmp_path / "deep" / "agent.pt")
    assert checkpoints.read(path)["agent"] == "ppo"
    assert not list(path.parent.glob("*.tmp"))
    with pytest.raises(podracer.CheckpointError, match="does not exist"):
        podracer.load_agent(tmp_path / "nope.pt")
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(podracer.CheckpointError, match="cannot be loaded"):
        podracer.load_agent(path)


def test_renamed_config_fields_load_with_a_warning():
    cfg_cls = type(podracer.make_agent("sac", PendulumVecEnv(2), verbose=False).config)
    with pytest.warns(FutureWarning, match=r"SACConfig.hidden is renamed 'hidden_sizes'.*until podracer 1.2"):
        cfg = make_config(cfg_cls, {"hidden": [32, 32]})
    assert cfg.hidden_sizes == (32, 32)
    with pytest.raises(ValueError, match="give 'hidden_sizes' only"):
        make_config(cfg_cls, {"hidden": [32], "hidden_sizes": [32]})


def test_ppo_refuses_minibatches_of_one_sample_instead_of_going_nan():
    """Found by probing: 8 steps x 4 sub-envs in 32 minibatches gave 1-sample minibatches, whose
    standardised advantage is NaN; the NaN policy only surfaced as the env refusing NaN actions."""
    env = PendulumVecEnv(4)
    agent = podracer.make_agent("ppo", env, seed=0, preset=None, hidden_sizes=(8,), num_steps=8)
    with pytest.raises(ValueError, match=r"minibatches would hold 1 sample.*num_minibatches <= 16"):
        podracer.train(agent, env, 64, progress=False)
    ok = podracer.make_agent("ppo", env, seed=0, preset=None, hidden_sizes=(8,), num_steps=8, num_minibatches=16)
    _, history = podracer.train(ok, env, 64, progress=False)
    assert history["loss/actor"].notna().all()


@pytest.mark.parametrize("name", ["ppo", "sac", "dqn"])
def test_checkpoints_written_by_0_1_load_with_a_warning_and_keep_training(name):
    """tests/data/v0_1_*.pt were saved by podracer 0.1 (config `hidden`/`lr`, state `nets`/`optim`/
    `rng`/`env_steps`): they load, and the old names' removal version is said with the fix (save
    again) before it comes; PPO's 0.1 checkpoint already used the 1.0 names and loads quietly."""
    from pathlib import Path

    path = Path(__file__).parent / "data" / f"v0_1_{name}.pt"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent = podracer.load_agent(path)
    said = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    if name == "ppo":
        assert said == []
    else:
        assert said and all("save it again" in m and "works until podracer 1.2" in m for m in said), said
        assert any("Config.hidden is renamed 'hidden_sizes'" in m for m in said)
        assert any("OffPolicyAgent.nets is renamed 'model'" in m for m in said)
    assert agent.global_step == 64 and agent.config.hidden_sizes == (8,)
    env = CartPoleVecEnv(4) if name == "dqn" else PendulumVecEnv(4)
    _, history = podracer.train(agent, env, 64, seed=0, progress=False)
    assert history["global_step"].iloc[-1] == agent.global_step == 128  # the history counts over the agent's life


def test_mismatched_envs_get_a_clear_error_not_a_shape_traceback():
    import gymnasium as gym

    with pytest.raises(TypeError, match="needs a batched env.*make_env"):
        podracer.make_agent("ppo", gym.make("Pendulum-v1"))
    agent = podracer.make_agent("ppo", PendulumVecEnv(8), seed=0, verbose=False)
    with pytest.raises(ValueError, match="built for observation_space .* but this env has single_observation_space"):
        podracer.train(agent, CartPoleVecEnv(8), 128, progress=False)


@pytest.mark.parametrize("name", ["ppo", "sac", "td3", "ddpg", "dqn"])
def test_act_refuses_observations_it_would_misread_and_takes_numpy(name):
    """Found by probing: ``act`` on one unbatched observation (3,) broadcast it into actions for 3
    envs, and a wrong width failed inside a matmul with torch's shape message."""
    import numpy as np

    env = CartPoleVecEnv(4) if name == "dqn" else PendulumVecEnv(4)
    agent = podracer.make_agent(name, env, seed=0, verbose=False)
    obs, _ = env.reset(seed=0)
    dim = obs.shape[1]
    with pytest.raises(ValueError, match=rf"expected a batch of observations of shape \(N, {dim}\), got \({dim},\) "
                                         r"\(one observation\? add the batch dimension: obs\[None\]\)"):
        agent.act(obs[0])
    with pytest.raises(ValueError, match=rf"shape \(N, {dim}\), got \(4, {dim + 2}\); the agent was built for"):
        agent.act(torch.zeros(4, dim + 2))
    with pytest.raises(TypeError, match="takes a batch of observations as a torch.Tensor"):
        agent.act(obs.tolist())
    # A NumPy batch (float64, as gymnasium gives) is converted: the same actions as the tensor.
    expected = agent.act(obs, deterministic=True)
    assert torch.equal(agent.act(obs.numpy().astype(np.float64), deterministic=True), expected)
    # So is a float64 tensor (torch.from_numpy of gymnasium's arrays): it was a dtype error from inside a matmul.
    assert torch.equal(agent.act(obs.double(), deterministic=True), expected)
    assert agent.act(obs.numpy()).shape[0] == 4
    assert agent(obs[None, 0]).shape[0] == 1  # the policy call takes a batch of one


def test_numpy_integers_are_sizes_and_seeds_while_floats_and_bools_are_refused():
    import numpy as np

    env = podracer.make_env("pendulum", np.int64(4))
    assert env.num_envs == 4 and type(env.num_envs) is int
    env.reset(seed=np.int64(3))
    for bad in (2.5, True, 0):
        with pytest.raises(ValueError, match="num_envs must be a positive whole number"):
            podracer.make_env("pendulum", bad)
    with pytest.raises(ValueError, match="seed must be a whole number"):
        env.reset(seed=2.5)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a CUDA GPU")
def test_asking_for_a_gpu_that_is_not_there_names_the_fix(tmp_path):
    """Found by probing: device="cuda" on a CPU-only torch gave torch's bare AssertionError, and an
    unknown name ("gpu") torch's list of every backend it was built to know."""
    import finance
    import locomotion

    env = PendulumVecEnv(2)
    path = podracer.make_agent("ppo", env, seed=0, verbose=False, **TINY).save(tmp_path / "a.pt")
    for call in (lambda: podracer.make_env("pendulum", 2, device="cuda"),
                 lambda: podracer.make_agent("ppo", env, device="cuda"),
                 lambda: podracer.load_agent(path, device="cuda"),
                 lambda: finance.prepare_market().env("test", 1, device="cuda")):
        with pytest.raises(ValueError, match="sees no CUDA GPU.*device='cpu'"):
            call()
    for call in (lambda: podracer.make_env("pendulum", 2, device="gpu"),  # was torch's list of every backend
                 lambda: podracer.agents.ppo.PPO(env.single_observation_space, env.single_action_space, device="gpu"),
                 lambda: locomotion.make_env("HalfCheetah", 1, device="gpu", verbose=False),
                 lambda: finance.prepare_market().env("test", 1, device="gpu")):
        with pytest.raises(ValueError, match="unknown device 'gpu': use 'cpu', 'cuda'"):
            call()
    with pytest.raises(ValueError, match="sees no CUDA GPU"):  # an agent built directly, not by make_agent
        podracer.agents.ppo.PPO(env.single_observation_space, env.single_action_space, device="cuda")
