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
from podracer.agents import ppo as ppo_module
from podracer.agents.ppo import (PPO, PPOConfig, compute_gae, discounted_returns, gaussian_log_prob, policy_loss,
                                 value_loss)
from podracer.envs import CartPoleVecEnv, PendulumVecEnv

from conftest import SIZE

FULL = SIZE == "full"


def _train(env_name: str, seed: int, target: float | None, total_steps: int, eval_every: int, eval_envs: int = 16,
           **overrides: Any):
    preset = podracer.get_preset("ppo", env_name)
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
@pytest.mark.slow
def test_ppo_solves_pendulum(seed: int, one_thread):
    # Evaluate about every 2,000 env steps (the benchmark's protocol) on 16 episodes.
    agent, history, eval_env = _train("pendulum", seed, target=-250.0, total_steps=podracer.get_preset("ppo", "pendulum").total_steps,
                                      eval_every=2048)
    final = history["eval/return_mean"].dropna().iloc[-1]
    assert final >= -250.0, f"PPO reached only {final:.1f} on Pendulum in {int(history['global_step'].iloc[-1])} steps"
    # Stopped early at the target, and an independent evaluation (fresh seed) agrees roughly.
    assert history["global_step"].iloc[-1] < podracer.get_preset("ppo", "pendulum").total_steps
    assert podracer.evaluate(agent, eval_env, seed=123)["eval/return_mean"] > -400.0


@pytest.mark.parametrize("seed", range(5) if FULL else [0])
@pytest.mark.slow
def test_ppo_solves_cartpole(seed: int, one_thread):
    agent, history, eval_env = _train("cartpole", seed, target=475.0, total_steps=podracer.get_preset("ppo", "cartpole").total_steps,
                                      eval_every=8192)
    final = history["eval/return_mean"].dropna().iloc[-1]
    assert final > 475.0, f"PPO reached only {final:.1f} on CartPole in {int(history['global_step'].iloc[-1])} steps"
    assert history["global_step"].iloc[-1] < podracer.get_preset("ppo", "cartpole").total_steps


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


def test_agent_bootstraps_truncation_from_final_obs(monkeypatch):
    cfg = dict(num_steps=4, num_minibatches=1, update_epochs=1, gamma=0.9, gae_lambda=0.95, norm_obs=False,
               norm_reward=False)
    rollouts, critic = {}, {}
    for end in ("terminated", "truncated"):
        def spy(model, optimizer, rollout, config, generator, end=end):
            """Keep the rollout train_step hands to the update, and V(0), V(1), V(2) of its critic."""
            rollouts[end] = rollout
            with torch.no_grad():
                critic[end] = [model.value(torch.tensor([[x]])).item() for x in (0.0, 1.0, 2.0)]
            return {"loss/actor": torch.tensor(0.0)}

        monkeypatch.setattr(ppo_module, "ppo_update", spy)
        env = _TwoStepEnv(3, end)
        agent = podracer.make_agent("ppo", env, seed=0, preset=None, **cfg)  # same seed: identical critic
        obs, _ = env.reset()
        agent.train_step(env, obs)
    assert critic["terminated"] == critic["truncated"]
    v0, v1, v2 = critic["truncated"]
    ret_term = rollouts["terminated"].returns.reshape(4, 3)
    ret_trunc = rollouts["truncated"].returns.reshape(4, 3)
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


def test_gaussian_log_prob_is_torch_distributions_normal():
    """The update's written-out Gaussian log-probability and entropy are torch.distributions.Normal's,
    to the bit (their gradients too: the same ops in the same order), so writing them out (no
    distribution object per minibatch) changed no seeded result."""
    agent = _tiny_agent(PendulumVecEnv(num_envs=2), log_std_init=0.3)
    model = agent.model
    obs, actions = torch.randn(64, 3), torch.randn(64, 1)
    dist = torch.distributions.Normal(model.actor(obs), model.log_std.exp().expand(64, 1))
    assert torch.equal(gaussian_log_prob(*model.gaussian(obs), actions), dist.log_prob(actions).sum(-1))
    logprob, entropy = model.log_prob_entropy(obs, actions)
    assert torch.equal(logprob, dist.log_prob(actions).sum(-1))
    assert torch.equal(entropy, dist.entropy().sum(-1))
    # Acting uses the same log-probability: what the buffer stores is what the update's ratio starts from.
    sampled, stored = agent._sample(obs, deterministic=False)
    assert torch.equal(stored, model.log_prob_entropy(obs, sampled)[0])


# ---------------------------------------------------------------------------- interface
def _tiny_agent(env: Any, seed: int = 0, **overrides: Any) -> PPO:
    cfg = dict(num_steps=8, num_minibatches=2, update_epochs=2, hidden_sizes=(16,))
    return podracer.make_agent("ppo", env, seed=seed, preset=None, **{**cfg, **overrides})


def test_act_shapes_bounds_and_metrics():
    env = PendulumVecEnv(num_envs=5)
    agent = _tiny_agent(env, log_std_init=1.0)  # wide Gaussian: many samples land outside the bounds
    obs, _ = env.reset(seed=0)
    a = agent.act(obs)
    assert a.shape == (5, 1) and a.dtype == torch.float32
    assert float(a.abs().max()) <= 2.0
    obs, metrics = agent.train_step(env, obs)
    for key in ("env_steps", "loss/actor", "loss/critic", "charts/entropy", "charts/approx_kl", "charts/clipfrac",
                "charts/learning_rate"):
        assert isinstance(metrics[key], float) and math.isfinite(metrics[key]), key
    assert metrics["env_steps"] == 8 * 5

    cart = CartPoleVecEnv(num_envs=4)
    agent = _tiny_agent(cart)
    obs, _ = cart.reset(seed=0)
    a = agent.act(obs)
    assert a.shape == (4,) and a.dtype == torch.int64 and set(a.tolist()) <= {0, 1}
    assert torch.equal(agent.act(obs, deterministic=True), agent(obs))


def test_rollout_was_called_batch():
    """``ppo.Batch`` (the flattened rollout, renamed ``Rollout`` in 1.1: ``replay.Batch`` is the replay
    minibatch) still imports, with a FutureWarning naming the new name."""
    with pytest.warns(FutureWarning, match="renamed 'Rollout'"):
        from podracer.agents.ppo import Batch
    assert Batch is ppo_module.Rollout


def test_wrong_action_space_and_bad_config():
    env = PendulumVecEnv(num_envs=2)
    with pytest.raises(ValueError, match="lerning_rate.*valid fields"):
        podracer.make_agent("ppo", env, lerning_rate=1e-3)
    with pytest.raises(ValueError, match="clip_eps must be positive"):
        PPOConfig(clip_eps=0.0)
    with pytest.raises(ValueError, match="activation must be one of"):
        PPOConfig(activation="sigmoid")
    with pytest.raises(ValueError, match="no ppo preset 'mujoco'"):
        podracer.get_preset("ppo", "mujoco")
    with pytest.raises(ValueError, match="PPO needs a Box or Discrete"):
        PPO(env.single_observation_space, gym.spaces.MultiBinary(3))
    assert podracer.make_agent("ppo", env, preset="pendulum", learning_rate=1e-4).config.learning_rate == 1e-4


def test_set_hparams_changes_optimizer_lr_and_annealing():
    env = PendulumVecEnv(num_envs=4)
    agent = _tiny_agent(env)
    agent.set_hparams(learning_rate=1e-3, ent_coef=0.01)
    assert agent.optimizer.param_groups[0]["lr"] == 1e-3
    assert agent.config.ent_coef == 0.01
    with pytest.raises(ValueError, match="not mutable"):
        agent.set_hparams(vf_coef=0.25)

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


# ---------------------------------------------------------------------------- defaults on many sub-envs
def test_default_rollout_is_sized_to_the_sub_env_count():
    cfg = PPOConfig()
    assert [cfg.rollout_steps(n) for n in (1, 64, 100, 512, 4096)] == [2048, 32, 21, 16, 16]
    assert cfg.rollout_size(64) == 2048 and cfg.minibatch_size(64) == 64
    assert PPOConfig(num_steps=2048).rollout_steps(64) == 2048  # the paper's T, asked for explicitly
    env = PendulumVecEnv(num_envs=64)
    agent = podracer.make_agent("ppo", env, preset=None)
    assert agent.steps_per_train_step(64) == 2048
    obs, _ = env.reset(seed=0)
    _, metrics = agent.train_step(env, obs)
    assert metrics["env_steps"] == 2048


@pytest.mark.parametrize("seed", range(3) if FULL else [0])
@pytest.mark.parametrize("task,threshold", [("pendulum", -700.0), ("cartpole", 150.0)])
@pytest.mark.slow
def test_defaults_learn_on_64_sub_envs(task: str, threshold: float, seed: int, one_thread):
    """No preset: the config defaults must learn on batched envs. With the paper's T = 2048 per
    sub-env, 64 sub-envs made 131,072 env steps per update and Pendulum stayed at the random
    policy's ~-1200 after 300k steps. Random play: Pendulum about -1200, CartPole about 22."""
    env = podracer.make_env(task, num_envs=64)
    agent = podracer.make_agent("ppo", env, seed=seed, preset=None)
    podracer.train(agent, env, 24 * 2048, seed=seed, progress=False)
    result = podracer.evaluate(agent, podracer.make_env(task, num_envs=16), seed=123)["eval/return_mean"]
    assert result > threshold, f"PPO defaults reached only {result:.1f} on {task} (64 sub-envs) in {24 * 2048} steps"


# ---------------------------------------------------------------------------- runs: begin_training
def _trained(env: PendulumVecEnv, steps: int = 3, **overrides: Any) -> tuple[PPO, torch.Tensor]:
    agent = _tiny_agent(env, **overrides)
    obs, _ = env.reset(seed=0)
    for _ in range(steps):
        obs, _ = agent.train_step(env, obs)
    return agent, obs


def test_begin_training_restarts_the_running_return():
    """A loaded agent keeps the running discounted return of the episodes it was saved in; a new
    run starts on a freshly reset env, so its first scaled rewards must not continue them."""
    env = PendulumVecEnv(num_envs=6)
    agent, obs = _trained(env)
    assert agent.discounted_return.abs().min() > 0  # mid-episode everywhere: the test can bite

    def first_update_return_rms(prepare) -> dict[str, torch.Tensor]:
        loaded = PPO.from_checkpoint(agent.checkpoint())
        prepare(loaded)
        env_b = PendulumVecEnv(num_envs=6)
        obs_b, _ = env_b.reset(seed=7)
        loaded.train_step(env_b, obs_b)
        return loaded.return_rms.state_dict()

    def zero_by_hand(a: PPO) -> None:  # a fresh agent's return state, with the same return_rms
        a.discounted_return = torch.zeros(6)

    def begin(a: PPO) -> None:
        a.begin_training(10_000)
        assert torch.equal(a.discounted_return, torch.zeros(6))

    fresh, begun, carried = (first_update_return_rms(f) for f in (zero_by_hand, begin, lambda a: None))
    for key in fresh:
        torch.testing.assert_close(begun[key], fresh[key], rtol=0, atol=0)
    assert not torch.equal(carried["var"], fresh["var"])  # without begin_training the old episodes leak in

    # The pure piece: G restarts after an episode end and carries over otherwise.
    g, last = discounted_returns(torch.ones(3, 2), torch.tensor([[False, True], [False, False], [False, False]]),
                                 torch.tensor([10.0, 10.0]), gamma=0.5)
    torch.testing.assert_close(g, torch.tensor([[6.0, 6.0], [4.0, 1.0], [3.0, 1.5]]))
    torch.testing.assert_close(last, torch.tensor([3.0, 1.5]))


def test_anneal_lr_decays_over_the_run():
    env = PendulumVecEnv(num_envs=4)
    per_step = 8 * 4
    agent = _tiny_agent(env, learning_rate=1e-3, anneal_lr=True)
    agent.begin_training(4 * per_step)
    obs, _ = env.reset(seed=0)
    lrs = []
    for _ in range(4):
        obs, metrics = agent.train_step(env, obs)
        lrs.append(metrics["charts/learning_rate"])
    assert lrs == pytest.approx([1e-3, 0.75e-3, 0.5e-3, 0.25e-3])  # halfway: half
    assert agent._current_lr() == 0.0  # after the run's T steps: 0

    # The window travels with the checkpoint; a new run (global_step 128) gets its own window.
    loaded = PPO.from_checkpoint(agent.checkpoint())
    assert loaded.anneal_window == (0, 4 * per_step) and loaded._current_lr() == 0.0
    loaded.begin_training(2 * per_step)
    assert loaded.anneal_window == (4 * per_step, 6 * per_step)
    assert loaded.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)

    # Through podracer.train: the whole budget, whatever it is, from α down to ~0.
    agent = _tiny_agent(env, learning_rate=1e-3, anneal_lr=True)
    _, history = podracer.train(agent, env, 10 * per_step, progress=False)
    assert history["charts/learning_rate"].iloc[0] == pytest.approx(1e-3)
    assert history["charts/learning_rate"].iloc[5] == pytest.approx(0.5e-3)
    assert history["charts/learning_rate"].iloc[-1] == pytest.approx(0.1e-3)  # the last update's α
    assert agent._current_lr() == 0.0

    # An explicit absolute horizon wins over anneal_lr.
    both = _tiny_agent(env, learning_rate=1e-3, anneal_lr=True, anneal_steps=8 * per_step)
    both.begin_training(2 * per_step)
    both.global_step = 4 * per_step
    assert both._current_lr() == pytest.approx(0.5e-3)


def test_anneal_floor_holds_past_the_horizon():
    """α falls linearly to ``anneal_floor`` x α at ``anneal_steps`` and stays there (issue 38:
    training on past the budget neither stops learning nor restarts at full α); the same floor
    ends an ``anneal_lr`` window, and a new run's window starts again from α."""
    env = PendulumVecEnv(num_envs=4)
    per_step = 8 * 4
    agent = _tiny_agent(env, learning_rate=1e-3, anneal_steps=4 * per_step, anneal_floor=0.1)
    obs, _ = env.reset(seed=0)
    lrs = []
    for _ in range(7):
        obs, metrics = agent.train_step(env, obs)
        lrs.append(metrics["charts/learning_rate"])
    assert lrs == pytest.approx([1e-3, 0.775e-3, 0.55e-3, 0.325e-3, 0.1e-3, 0.1e-3, 0.1e-3])
    windowed = _tiny_agent(env, learning_rate=1e-3, anneal_lr=True, anneal_floor=0.2)
    windowed.begin_training(2 * per_step)
    windowed.global_step = 5 * per_step
    assert windowed._current_lr() == pytest.approx(0.2e-3)
    with pytest.raises(ValueError, match="anneal_floor must be in"):
        _tiny_agent(env, anneal_floor=1.5)


def test_anneal_lr_without_begin_training_warns():
    env = PendulumVecEnv(num_envs=4)
    agent = _tiny_agent(env, anneal_lr=True)
    obs, _ = env.reset(seed=0)
    with pytest.warns(UserWarning, match="begin_training"):
        agent.train_step(env, obs)


# ---------------------------------------------------------------------------- checkpoints across devices
def test_checkpoint_with_another_devices_generator_loads():
    """A CUDA generator state is 16 bytes and a CPU one 5056: a checkpoint saved on a GPU must still
    load on a CPU (and the other way round). Simulated here with a CUDA-sized state."""
    env = PendulumVecEnv(num_envs=4)
    agent, obs = _trained(env, steps=1)
    ckpt = agent.checkpoint()
    ckpt["state"]["generator"] = torch.arange(16, dtype=torch.uint8)
    ckpt["state"]["generator_device"] = "cuda"
    loaded = PPO.from_checkpoint(ckpt)
    again = PPO.from_checkpoint(ckpt)
    torch.testing.assert_close(loaded.act(obs, deterministic=True), agent.act(obs, deterministic=True), rtol=0,
                               atol=0)  # the weights did load
    assert torch.equal(loaded.act(obs), again.act(obs))  # reseeded deterministically from the saved state
    _, metrics = loaded.train_step(env, obs)
    assert math.isfinite(metrics["loss/actor"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_checkpoint_saved_on_cuda_loads_on_cpu(tmp_path):
    env = PendulumVecEnv(num_envs=4, device="cuda")
    agent = _tiny_agent(env)
    obs, _ = env.reset(seed=0)
    agent.train_step(env, obs)
    loaded = podracer.AgentBase.load(agent.save(tmp_path / "ppo.pt"), device="cpu")
    cpu_env = PendulumVecEnv(num_envs=4)
    obs, _ = cpu_env.reset(seed=0)
    torch.testing.assert_close(loaded.act(obs, deterministic=True), agent.act(obs.cuda(), deterministic=True).cpu())
    loaded.train_step(cpu_env, obs)


def test_loading_a_live_agents_state_copies_it():
    """``b.load_state_dict(a.state_dict())`` must not tie b's Adam moments or running return to a's."""
    env = PendulumVecEnv(num_envs=4)
    a, obs = _trained(env, steps=2)
    b = _tiny_agent(env, seed=1)
    b.load_state_dict(a.state_dict())
    moments = [s["exp_avg"].clone() for s in b.optimizer.state.values()]
    returns = b.discounted_return.clone()
    a.train_step(env, obs)
    assert all(torch.equal(m, s["exp_avg"]) for m, s in zip(moments, b.optimizer.state.values()))
    assert torch.equal(returns, b.discounted_return)


def test_running_mean_std_equals_the_statistics_of_everything_it_has_seen():
    # Chan et al.'s parallel update, batch by batch, against the mean and variance of all rows at
    # once (float64): the batch variance is computed by hand (two passes), so check it stays exact.
    from podracer.agents.common import RunningMeanStd

    g = torch.Generator().manual_seed(0)
    batches = [torch.randn(n, 3, generator=g) * torch.tensor([1.0, 10.0, 0.1]) + torch.tensor([5.0, -2.0, 0.0])
               for n in (7, 1, 300, 64)]
    rms = RunningMeanStd((3,), epsilon=0.0)
    rms.count.fill_(0.0)
    for b in batches:
        rms.update(b)
    everything = torch.cat(batches).double()
    torch.testing.assert_close(rms.mean.double(), everything.mean(0), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rms.var.double(), everything.var(0, unbiased=False), rtol=1e-5, atol=1e-6)
    assert rms.count.item() == everything.shape[0]
