"""Off-policy agents (SAC, TD3, DDPG, DQN, Double DQN, D3QN): learning, timeouts, save/load, errors.

The learning tests train through the unchanged ``podracer.train`` with each file's ``PRESETS``
and assert a deterministic evaluation on a fresh seed. PODRACER_SIZE=full also runs them on
more seeds.
"""

import importlib
import os
from typing import Any

import gymnasium as gym
import pytest
import torch

import podracer
from podracer import evaluate, get_agent_class, make_agent, train
from podracer.agents import AgentBase
from podracer.agents.replay import Batch
from podracer.envs import CartPoleVecEnv, PendulumVecEnv

SIZE = os.environ.get("PODRACER_SIZE", "smoke")
SEEDS = [0] if SIZE == "smoke" else [0, 1, 2]
CONTINUOUS = ["sac", "td3", "ddpg"]
DISCRETE = ["dqn", "double_dqn", "d3qn"]
ALL = CONTINUOUS + DISCRETE
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(autouse=True)
def _one_thread():
    """One intra-op thread: these networks are small (threads only add overhead), and the learning
    runs stay identical whatever the machine's core count or load."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def module_of(name: str):
    return importlib.import_module(f"podracer.agents.{'dqn' if name in DISCRETE else name}")


# ---------------------------------------------------------------------------- learning
LEARNING = [
    # agent, task, stop at this eval return (10 episodes), then assert above this on 16 fresh ones
    ("sac", "pendulum", -250.0, -250.0),
    ("td3", "pendulum", -250.0, -250.0),
    ("ddpg", "pendulum", -250.0, -250.0),
    ("dqn", "cartpole", 475.0, 400.0),
    ("double_dqn", "cartpole", 475.0, 400.0),
    ("d3qn", "cartpole", 475.0, 400.0),
]
ENVS = {"pendulum": PendulumVecEnv, "cartpole": CartPoleVecEnv}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name,task,stop_at,threshold", LEARNING, ids=[x[0] for x in LEARNING])
def test_learns(name, task, stop_at, threshold, seed):
    preset = get_agent_class(name).presets[task]
    env_cls = ENVS[task]
    podracer.seed_everything(seed)
    env, eval_env = env_cls(num_envs=preset.num_envs), env_cls(num_envs=10)
    agent = make_agent(name, env, seed=seed, **preset.config)
    agent, history = train(agent, env, preset.total_steps, eval_env=eval_env,
                           eval_every=500 if task == "pendulum" else 2_000, seed=seed, progress=False,
                           target_return=stop_at)
    # Judged on episodes the stopping rule never saw: a fresh seed, more of them.
    result = evaluate(agent, env_cls(num_envs=16), seed=12_345)
    steps = int(history["global_step"].iloc[-1])
    assert result["eval/return_mean"] > threshold, (
        f"{name} on {task}: deterministic return {result['eval/return_mean']:.1f} <= {threshold} after {steps} "
        f"steps; eval curve {history['eval/return_mean'].dropna().round(1).tolist()}")


# ---------------------------------------------------------------------------- timeouts
class ToyVecEnv:
    """Three sub-envs with scripted endings: 0 is truncated, 1 terminates, 2 runs on.

    Observations count steps; at an ending the returned obs is a reset value (-3) while
    ``info["final_obs"]`` holds the true last one, so a learner that bootstraps from the wrong
    observation gets a different target.
    """

    metadata = {"autoreset_mode": "same_step"}
    num_envs = 3
    device = torch.device("cpu")

    def __init__(self, discrete: bool):
        self.single_observation_space = gym.spaces.Box(-10.0, 10.0, shape=(2,))
        self.single_action_space = gym.spaces.Discrete(2) if discrete else gym.spaces.Box(-1.0, 1.0, shape=(1,))

    def reset(self, seed=None, options=None):
        self.state = torch.tensor([[0.5, 1.0], [1.5, -1.0], [2.5, 0.0]])
        return self.state.clone(), {}

    def step(self, actions):
        final_obs = self.state + torch.tensor([1.0, 0.5])
        terminated = torch.tensor([False, True, False])
        truncated = torch.tensor([True, False, False])
        done = terminated | truncated
        self.state = torch.where(done[:, None], torch.full_like(final_obs, -3.0), final_obs)
        rewards = torch.tensor([1.0, 2.0, 3.0])
        return self.state.clone(), rewards, terminated, truncated, {"final_obs": final_obs, "_final_obs": done}


def bootstrap_value(agent: Any, next_obs: torch.Tensor) -> torch.Tensor:
    """V(s') exactly as each agent's update computes it (same generator draws)."""
    mod, nets = module_of(agent.name), agent.nets
    if agent.name == "sac":
        return mod.soft_value(nets, next_obs, agent.rng)
    if agent.name == "td3":
        return mod.smoothed_target_value(nets, next_obs, agent.config, agent.rng)
    if agent.name == "ddpg":
        return mod.target_value(nets, next_obs)
    return mod.target_value(nets, next_obs, agent.config.double)


def critic_mse(agent: Any, batch: Batch, targets: torch.Tensor) -> float:
    with torch.no_grad():
        if agent.name in DISCRETE:
            q = agent.nets.q(batch.obs).gather(-1, batch.actions[:, None]).squeeze(-1)
            return (q - targets).pow(2).mean().item()
        q = agent.nets.critic(batch.obs, batch.actions)  # (K, B) or (B,)
        return (q - targets).pow(2).mean(dim=-1).sum().item()


def run_update(agent: Any, batch: Batch) -> dict[str, torch.Tensor]:
    mod, cfg = module_of(agent.name), agent.config
    if agent.name == "sac":
        return mod.update(agent.nets, agent.optim, batch, cfg, agent.target_entropy, agent.rng)
    if agent.name == "td3":
        return mod.update(agent.nets, agent.optim, batch, cfg, True, agent.rng)
    if agent.name == "ddpg":
        return mod.update(agent.nets, agent.optim, batch, cfg)
    return mod.update(agent.nets, agent.optim, batch, cfg, False)


@pytest.mark.parametrize("name", ALL)
def test_truncation_bootstraps_and_termination_does_not(name):
    env = ToyVecEnv(discrete=name in DISCRETE)
    gamma = 0.9
    agent = make_agent(name, env, seed=0, gamma=gamma, learning_starts=10**6, num_steps=1, buffer_size=16)
    obs, _ = env.reset()
    agent.train_step(env, obs)  # one vector step, stored, no update (still warming up)

    buf = agent.buffer
    batch = Batch(buf.obs[:3], buf.actions[:3], buf.rewards[:3], buf.next_obs[:3], buf.terminated[:3])
    final_obs = torch.tensor([[1.5, 1.5], [2.5, -0.5], [3.5, 0.5]])
    assert torch.equal(batch.next_obs, final_obs), "next_obs must be info['final_obs'], not the reset obs"
    assert batch.terminated.tolist() == [False, True, False], "only real terminations may be stored as done"

    state = agent.rng.get_state()
    v_final = bootstrap_value(agent, final_obs)
    v_reset = bootstrap_value(agent, torch.full((3, 2), -3.0))
    agent.rng.set_state(state)
    expected = torch.tensor([1.0 + gamma * v_final[0].item(),  # truncated: r + gamma * V(final_obs)
                             2.0,  # terminated: r alone
                             3.0 + gamma * v_final[2].item()])  # running: r + gamma * V(s')
    targets = module_of(name).td_target(batch.rewards, batch.terminated, v_final, gamma)
    torch.testing.assert_close(targets, expected)
    assert abs(v_final[0] - v_reset[0]) > 1e-4  # the test could tell the two observations apart

    # The update itself regresses onto exactly these targets (its loss is measured before the step).
    want = critic_mse(agent, batch, expected)
    info = run_update(agent, batch)
    got = info["loss/q" if name in DISCRETE else "loss/critic"].item()
    assert got == pytest.approx(want, rel=1e-5)


# ---------------------------------------------------------------------------- interface
def small_agent(name: str, device: str = "cpu", **overrides: Any):
    env_cls = CartPoleVecEnv if name in DISCRETE else PendulumVecEnv
    env = env_cls(num_envs=4, device=device)
    cfg = dict(hidden=(16, 16), learning_starts=32, batch_size=16, num_steps=8, buffer_size=1_000)
    return make_agent(name, env, seed=0, **{**cfg, **overrides}), env


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ALL)
def test_train_step_metrics_and_determinism(name, device):
    def run() -> list[dict[str, float]]:
        agent, env = small_agent(name, device)
        obs, _ = env.reset(seed=0)
        rows = []
        for _ in range(3):
            obs, metrics = agent.train_step(env, obs)
            rows.append(metrics)
        assert obs.device.type == torch.device(device).type
        return rows

    rows = run()
    assert rows == run()  # same seed, same numbers
    assert all(r["env_steps"] == 32 for r in rows)
    last = rows[-1]
    loss_keys = {"loss/q"} if name in DISCRETE else {"loss/critic", "loss/actor"}
    assert loss_keys <= set(last), sorted(last)
    assert all(isinstance(v, float) for v in last.values())
    if name == "sac":
        assert "charts/alpha" in last and "loss/alpha" in last
    if name in DISCRETE:
        assert 0.0 <= last["charts/epsilon"] <= 1.0


@pytest.mark.parametrize("name", ALL)
def test_save_load_round_trip(name, tmp_path):
    agent, env = small_agent(name, save_buffer=True)
    obs, _ = env.reset(seed=0)
    for _ in range(2):
        obs, _ = agent.train_step(env, obs)
    path = agent.save(tmp_path / f"{name}.pt")
    torch.load(path, weights_only=True)  # plain tensors and values only
    loaded = AgentBase.load(path)
    assert type(loaded) is type(agent) and loaded.config == agent.config
    assert torch.equal(loaded.act(obs, deterministic=True), agent.act(obs, deterministic=True))
    assert torch.equal(loaded.act(obs), agent.act(obs))  # the exploration generator travels too
    assert len(loaded.buffer) == len(agent.buffer)

    # Everything that drives training was restored: optimizer, counters, buffer, generators.
    env_a, env_b = type(env)(num_envs=4), type(env)(num_envs=4)
    obs_a, _ = env_a.reset(seed=5)
    obs_b, _ = env_b.reset(seed=5)
    _, m_a = agent.train_step(env_a, obs_a)
    _, m_b = loaded.train_step(env_b, obs_b)
    assert m_a == m_b

    slim = agent.state_dict(include_buffer=False)
    assert "buffer" not in slim and "buffer" in agent.state_dict()


@pytest.mark.parametrize("name", CONTINUOUS)
def test_continuous_agents_reject_discrete_actions(name):
    with pytest.raises(ValueError, match="needs a Box action space"):
        make_agent(name, CartPoleVecEnv(num_envs=2))


@pytest.mark.parametrize("name", DISCRETE)
def test_discrete_agents_reject_box_actions(name):
    with pytest.raises(ValueError, match="needs a Discrete action space"):
        make_agent(name, PendulumVecEnv(num_envs=2))


@pytest.mark.parametrize("name", ALL)
def test_unknown_and_invalid_config_keys(name):
    env = CartPoleVecEnv(num_envs=2) if name in DISCRETE else PendulumVecEnv(num_envs=2)
    with pytest.raises(ValueError, match=r"unknown \w+Config field\(s\) \['learning_rate'\]"):
        make_agent(name, env, learning_rate=1e-3)
    with pytest.raises(ValueError, match="gamma must be in"):
        make_agent(name, env, gamma=1.5)


@pytest.mark.parametrize("name", ALL)
def test_set_hparams_reaches_the_optimizer(name):
    agent, _ = small_agent(name)
    lr_field = "lr" if name in DISCRETE else "actor_lr"
    agent.set_hparams(**{lr_field: 1.234e-4})
    groups = agent.optim.param_groups
    if name not in DISCRETE:  # one optimizer, a named group per network
        groups = [g for g in groups if g["name"] == "actor"]
    assert [g["lr"] for g in groups] == [1.234e-4]
    with pytest.raises(ValueError, match="not mutable"):
        agent.set_hparams(gamma=0.5)


def test_dqn_variants_are_config_presets():
    env = CartPoleVecEnv(num_envs=2)
    dqn, ddqn, d3qn = (make_agent(n, env, seed=0) for n in DISCRETE)
    assert (dqn.config.double, dqn.config.dueling) == (False, False)
    assert (ddqn.config.double, ddqn.config.dueling) == (True, False)
    assert (d3qn.config.double, d3qn.config.dueling) == (True, True)
    assert d3qn.nets.q.dueling and not ddqn.nets.q.dueling


def test_dqn_epsilon_decays_linearly():
    agent, _ = small_agent("dqn", start_e=1.0, end_e=0.1, exploration_steps=1_000)
    for steps, eps in [(0, 1.0), (500, 0.55), (1_000, 0.1), (5_000, 0.1)]:
        agent.env_steps = steps
        assert agent.epsilon == pytest.approx(eps)
