"""PPO: learning on Pendulum and CartPole, GAE at episode boundaries, persistence, determinism,
config errors and live hyperparameters."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import podracer
from podracer.agents.ppo import PPO, PRESETS, PPOConfig, compute_gae, policy_loss, value_loss
from podracer.envs import CartPoleVecEnv, PendulumVecEnv

from conftest import SIZE

FULL = SIZE == "full"


def _train(env_name: str, seed: int, target: float | None, total_steps: int, eval_every: int, eval_envs: int = 16,
           **overrides: Any):
    preset = PRESETS[env_name]
    env = podracer.make_env(env_name, num_envs=preset.num_envs)
    eval_env = podracer.make_env(env_name, num_envs=eval_envs)
    podracer.seed_everything(seed)
    agent = podracer.make_agent("ppo", env, **{**preset.config, **overrides})
    agent, history = podracer.train(agent, env, total_steps, eval_env=eval_env, eval_every=eval_every, seed=seed,
                                    progress=False, target_return=target)
    return agent, history, eval_env


# ---------------------------------------------------------------------------- learning
@pytest.fixture
def one_thread():
    """The presets were tuned on one thread: on small MLPs a second one mostly adds overhead, and
    on a shared 2-core machine contention. Results are deterministic for a fixed thread count."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("seed", range(5) if FULL else [0])
def test_ppo_solves_pendulum(seed: int, one_thread):
    # Evaluate after every update (512 envs x 16 steps = 8192 env steps) on 16 episodes.
    agent, history, eval_env = _train("pendulum", seed, target=-250.0, total_steps=PRESETS["pendulum"].total_steps,
                                      eval_every=8192)
    final = history["eval/return_mean"].dropna().iloc[-1]
    assert final >= -250.0, f"PPO reached only {final:.1f} on Pendulum in {int(history['global_step'].iloc[-1])} steps"
    # Stopped early at the target, and an independent evaluation (fresh seed) agrees roughly.
    assert history["global_step"].iloc[-1] < PRESETS["pendulum"].total_steps
    assert podracer.evaluate(agent, eval_env, seed=123)["eval/return_mean"] > -400.0


@pytest.mark.parametrize("seed", range(5) if FULL else [0])
def test_ppo_solves_cartpole(seed: int, one_thread):
    agent, history, eval_env = _train("cartpole", seed, target=475.0, total_steps=PRESETS["cartpole"].total_steps,
                                      eval_every=8192)
    final = history["eval/return_mean"].dropna().iloc[-1]
    assert final > 475.0, f"PPO reached only {final:.1f} on CartPole in {int(history['global_step'].iloc[-1])} steps"
    assert history["global_step"].iloc[-1] < PRESETS["cartpole"].total_steps


# ---------------------------------------------------------------------------- GAE and truncation
def test_gae_terminated_vs_truncated_by_hand():
    """Two sub-envs see the same rewards and values; sub-env 0 terminates at t=1, sub-env 1 is
    truncated there. Only the truncated one may bootstrap from V(final_obs) = 10."""
    gamma, lam = 0.9, 0.5
    rewards = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])  # (T=3, N=2)
    values = torch.tensor([[2.0, 2.0], [3.0, 3.0], [4.0, 4.0]])  # V(s_t)
    next_values = torch.tensor([[3.0, 3.0], [10.0, 10.0], [5.0, 5.0]])  # V(s'_t); s'_1 is final_obs
    terminated = torch.tensor([[False, False], [True, False], [False, False]])
    truncated = torch.tensor([[False, False], [False, True], [False, False]])
    adv, ret = compute_gae(rewards, values, next_values, terminated, truncated, gamma, lam)

    # t=2 (new episode, no boundary after it): δ = 1 + 0.9*5 - 4 = 1.5 for both.
    # t=1 terminated: δ = 1 - 3 = -2, recursion cut: Â = -2.
    # t=1 truncated:  δ = 1 + 0.9*10 - 3 = 7, recursion cut: Â = 7.
    # t=0: δ = 1 + 0.9*3 - 2 = 1.7; Â = 1.7 + 0.9*0.5*Â_1 -> 0.8 (terminated), 4.85 (truncated).
    expected_adv = torch.tensor([[0.8, 4.85], [-2.0, 7.0], [1.5, 1.5]])
    torch.testing.assert_close(adv, expected_adv)
    torch.testing.assert_close(ret, expected_adv + values)
    assert ret[1, 1] - ret[1, 0] == pytest.approx(gamma * 10.0)


class _TwoStepEnv:
    """Episodes of two steps, reward 1. Observations count the step (0, then 1); the last one is
    2 and is only ever seen in ``final_obs``, since the same step already returns the reset 0.
    ``end`` decides whether the episode end is a termination or a truncation."""

    metadata = {"autoreset_mode": "same_step"}

    def __init__(self, num_envs: int, end: str):
        self.num_envs, self.end, self.device = num_envs, end, torch.device("cpu")
        self.single_observation_space = gym.spaces.Box(-10, 10, (1,), np.float32)
        self.single_action_space = gym.spaces.Box(-1, 1, (1,), np.float32)
        self.t = 0

    def reset(self, seed: int | None = None, options: dict | None = None):
        self.t = 0
        return torch.zeros(self.num_envs, 1), {}

    def step(self, actions: torch.Tensor):
        self.t += 1
        done = torch.full((self.num_envs,), self.t == 2)
        final_obs = torch.full((self.num_envs, 1), float(self.t))
        obs = torch.zeros(self.num_envs, 1) if self.t == 2 else final_obs.clone()
        self.t %= 2
        no = torch.zeros(self.num_envs, dtype=torch.bool)
        terminated, truncated = (done, no) if self.end == "terminated" else (no, done)
        return obs, torch.ones(self.num_envs), terminated, truncated, {"final_obs": final_obs, "_final_obs": done}


def test_agent_bootstraps_truncation_from_final_obs():
    cfg = dict(num_steps=4, num_minibatches=1, update_epochs=1, gamma=0.9, gae_lambda=0.95, norm_obs=False,
               norm_reward=False)
    batches = {}
    for end in ("terminated", "truncated"):
        env = _TwoStepEnv(3, end)
        agent = podracer.make_agent("ppo", env, seed=0, **cfg)  # same seed: identical critic
        obs, _ = env.reset()
        agent._allocate(env.num_envs)
        agent._collect(env, obs)
        batches[end] = agent._prepare_batch()
    v = lambda x: agent.model.value(torch.tensor([[x]])).item()  # noqa: E731
    with torch.no_grad():
        v0, v1, v2 = v(0.0), v(1.0), v(2.0)
    ret_term = batches["terminated"].returns.reshape(4, 3)
    ret_trunc = batches["truncated"].returns.reshape(4, 3)
    # Step t=1 ends the episode: target r + γ V(final_obs = 2) when truncated, r when terminated;
    # bootstrapping from the returned obs (the reset 0) would give γ V(0) instead.
    torch.testing.assert_close(ret_term[1], torch.full((3,), 1.0))
    torch.testing.assert_close(ret_trunc[1], torch.full((3,), 1.0 + 0.9 * v2))
    assert abs(v2 - v0) > 1e-4, "critic must tell final_obs from the reset obs for this test to bite"
    # Step t=0 is mid-episode: identical in both, one λ-step into the boundary step.
    for ret, boundary in ((ret_term, 1.0), (ret_trunc, 1.0 + 0.9 * v2)):
        delta0 = 1 + 0.9 * v1 - v0
        torch.testing.assert_close(ret[0], torch.full((3,), v0 + delta0 + 0.9 * 0.95 * (boundary - v1)))


def test_losses_by_hand():
    adv = torch.tensor([1.0, -1.0])
    old = torch.zeros(2)
    new = torch.log(torch.tensor([1.5, 1.5]))  # ratio 1.5 > 1 + ε
    loss, info = policy_loss(new, old, adv, clip_eps=0.2)
    # min(1.5*1, 1.2*1) = 1.2; min(1.5*-1, 1.2*-1) = -1.5 -> mean -0.15, negated.
    assert loss.item() == pytest.approx(-(1.2 - 1.5) / 2)
    assert info["charts/clipfrac"].item() == 1.0
    assert info["charts/approx_kl"].item() == pytest.approx(0.5 - math.log(1.5))
    vloss, _ = value_loss(torch.tensor([2.0]), torch.tensor([0.0]), torch.tensor([1.0]), clip_eps=0.5)
    # unclipped (2-1)^2 = 1; clipped value 0.5 -> (0.5-1)^2 = 0.25; pessimistic max = 1, halved.
    assert vloss.item() == pytest.approx(0.5)


# ---------------------------------------------------------------------------- interface
def _tiny_agent(env: Any, seed: int = 0, **overrides: Any) -> PPO:
    cfg = dict(num_steps=8, num_minibatches=2, update_epochs=2, hidden_sizes=(16,))
    return podracer.make_agent("ppo", env, seed=seed, **{**cfg, **overrides})


def test_act_shapes_bounds_and_metrics():
    env = PendulumVecEnv(num_envs=5)
    agent = _tiny_agent(env, log_std_init=1.0)  # wide Gaussian: many samples land outside the bounds
    obs, _ = env.reset(seed=0)
    a = agent.act(obs)
    assert a.shape == (5, 1) and a.dtype == torch.float32
    assert float(a.abs().max()) <= 2.0
    obs, metrics = agent.train_step(env, obs)
    for key in ("env_steps", "loss/policy", "loss/value", "loss/entropy", "charts/approx_kl", "charts/clipfrac",
                "charts/learning_rate"):
        assert isinstance(metrics[key], float) and math.isfinite(metrics[key]), key
    assert metrics["env_steps"] == 8 * 5

    cart = CartPoleVecEnv(num_envs=4)
    agent = _tiny_agent(cart)
    obs, _ = cart.reset(seed=0)
    a = agent.act(obs)
    assert a.shape == (4,) and a.dtype == torch.int64 and set(a.tolist()) <= {0, 1}
    assert torch.equal(agent.act(obs, deterministic=True), agent(obs))


def test_wrong_action_space_and_bad_config():
    env = PendulumVecEnv(num_envs=2)
    with pytest.raises(ValueError, match="lerning_rate.*valid fields"):
        podracer.make_agent("ppo", env, lerning_rate=1e-3)
    with pytest.raises(ValueError, match="clip_eps must be positive"):
        PPOConfig(clip_eps=0.0)
    with pytest.raises(ValueError, match="activation must be one of"):
        PPOConfig(activation="sigmoid")
    with pytest.raises(ValueError, match="no PPO preset 'mujoco'"):
        PPOConfig.preset("mujoco")
    with pytest.raises(ValueError, match="PPO needs a Box or Discrete"):
        PPO(env.single_observation_space, gym.spaces.MultiBinary(3))
    assert PPOConfig.preset("pendulum", learning_rate=1e-4).learning_rate == 1e-4


def test_set_hparams_changes_optimizer_lr_and_annealing():
    env = PendulumVecEnv(num_envs=4)
    agent = _tiny_agent(env)
    agent.set_hparams(learning_rate=1e-3, ent_coef=0.01)
    assert agent.optimizer.param_groups[0]["lr"] == 1e-3
    assert agent.config.ent_coef == 0.01
    with pytest.raises(ValueError, match="not mutable"):
        agent.set_hparams(gamma=0.5)

    annealed = _tiny_agent(env, learning_rate=1e-3, anneal_steps=8 * 4 * 4)  # 4 train_steps to reach 0
    obs, _ = env.reset(seed=0)
    lrs = []
    for _ in range(3):
        obs, metrics = annealed.train_step(env, obs)
        lrs.append(metrics["charts/learning_rate"])
    assert lrs == pytest.approx([1e-3, 0.75e-3, 0.5e-3])


def _env_snapshot(env: PendulumVecEnv) -> dict[str, torch.Tensor]:
    return {"state": env.state.clone(), "elapsed": env.elapsed.clone(), "rng": env.rng.get_state()}


def _env_restore(env: PendulumVecEnv, snap: dict[str, torch.Tensor]) -> None:
    env.state, env.elapsed = snap["state"].clone(), snap["elapsed"].clone()
    env.rng.set_state(snap["rng"])


def test_save_load_round_trip(tmp_path):
    env = PendulumVecEnv(num_envs=6)
    agent = _tiny_agent(env)
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        obs, _ = agent.train_step(env, obs)
    path = agent.save(tmp_path / "ppo.pt")
    ckpt = torch.load(path, weights_only=True)  # plain tensors and values only
    assert {"model", "optimizer", "obs_rms", "return_rms"} <= set(ckpt["state"])
    assert ckpt["state"]["obs_rms"]["count"] > 1  # normalisers travel with the weights

    loaded = podracer.AgentBase.load(path)
    assert isinstance(loaded, PPO) and loaded.config == agent.config
    torch.testing.assert_close(loaded.act(obs, deterministic=True), agent.act(obs, deterministic=True), rtol=0, atol=0)
    # Same generator state: stochastic actions agree too (this call advances both streams alike).
    torch.testing.assert_close(loaded.act(obs), agent.act(obs), rtol=0, atol=0)

    # Continued training is identical when both continue from the same env state.
    snap, obs0 = _env_snapshot(env), obs.clone()
    obs_a, m_a = agent.train_step(env, obs0)
    env_b = PendulumVecEnv(num_envs=6)
    _env_restore(env_b, snap)
    obs_b, m_b = loaded.train_step(env_b, obs0)
    assert m_a == m_b
    torch.testing.assert_close(obs_a, obs_b, rtol=0, atol=0)
    for (name, p), q in zip(agent.model.state_dict().items(), loaded.model.state_dict().values()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)


def test_same_seed_same_history():
    def history(seed: int):
        env = PendulumVecEnv(num_envs=16)
        agent = _tiny_agent(env, seed=seed)
        _, hist = podracer.train(agent, env, 16 * 8 * 6, eval_env=PendulumVecEnv(num_envs=2), eval_every=256,
                                 seed=seed, progress=False)
        return hist.drop(columns=[c for c in hist if c.startswith("time/") or c == "charts/steps_per_second"])

    a, b, c = history(3), history(3), history(4)
    assert a.equals(b)
    assert not a.equals(c)
