"""Off-policy agents (SAC, TD3, DDPG, DQN, Double DQN, D3QN): learning, timeouts, save/load, errors.

The learning tests train through the unchanged ``podracer.train`` with each agent's preset
(``podracer/presets/*.yaml``) and assert a deterministic evaluation on a fresh seed. PODRACER_SIZE=full also runs them on
more seeds.
"""

import copy
import importlib
import math
import os
from typing import Any

import gymnasium as gym

import pytest
import torch

import podracer
from podracer import evaluate, make_agent, train
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
@pytest.mark.slow
def test_learns(name, task, stop_at, threshold, seed):
    preset = podracer.get_preset(name, task)
    env_cls = ENVS[task]
    podracer.seed_everything(seed)
    env, eval_env = env_cls(num_envs=preset.num_envs), env_cls(num_envs=10)
    agent = make_agent(name, env, seed=seed, preset=task)
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
    mod, model = module_of(agent.name), agent.model
    if agent.name == "sac":
        return mod.soft_value(model, next_obs, agent.generator)
    if agent.name == "td3":
        return mod.smoothed_target_value(model, next_obs, agent.config, agent.generator)
    if agent.name == "ddpg":
        return mod.target_value(model, next_obs)
    return mod.target_value(model, next_obs, agent.config.double)


def critic_mse(agent: Any, batch: Batch, targets: torch.Tensor) -> float:
    with torch.no_grad():
        if agent.name in DISCRETE:
            q = agent.model.q(batch.obs).gather(-1, batch.actions[:, None]).squeeze(-1)
            return (q - targets).pow(2).mean().item()
        q = agent.model.critic(batch.obs, batch.actions)  # (K, B) or (B,)
        return (q - targets).pow(2).mean(dim=-1).sum().item()




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

    state = agent.generator.get_state()
    v_final = bootstrap_value(agent, final_obs)
    v_reset = bootstrap_value(agent, torch.full((3, 2), -3.0))
    agent.generator.set_state(state)
    expected = torch.tensor([1.0 + gamma * v_final[0].item(),  # truncated: r + gamma * V(final_obs)
                             2.0,  # terminated: r alone
                             3.0 + gamma * v_final[2].item()])  # running: r + gamma * V(s')
    targets = module_of(name).td_target(batch.rewards, batch.terminated, v_final, gamma)
    torch.testing.assert_close(targets, expected)
    assert abs(v_final[0] - v_reset[0]) > 1e-4  # the test could tell the two observations apart

    # The update itself regresses onto exactly these targets (its loss is measured before the step).
    want = critic_mse(agent, batch, expected)
    info = agent.update(batch)  # with agent.updates == 0: TD3's actor steps too
    got = info["loss/critic"].item()
    assert got == pytest.approx(want, rel=1e-5)


# ---------------------------------------------------------------------------- the fused update
# SAC, TD3 and DDPG sum their losses and take one backward pass and one Adam step (offpolicy.py's
# docstring). These tests hold that to what it claims: each loss moves only its own parameters,
# and one update is the same as the textbook one with separate optimizers.
def _batches(agent: Any, n: int, size: int = 32) -> list[Batch]:
    """``n`` random minibatches in the agent's spaces, some transitions terminated."""
    g = torch.Generator().manual_seed(1)
    low, high = agent.action_low, agent.action_high
    return [Batch(obs=torch.randn(size, agent.obs_dim, generator=g),
                  actions=low + (high - low) * torch.rand(size, agent.act_dim, generator=g),
                  rewards=torch.randn(size, generator=g), next_obs=torch.randn(size, agent.obs_dim, generator=g),
                  terminated=torch.rand(size, generator=g) < 0.2) for _ in range(n)]


def _actor_loss(name: str, agent: Any, obs: torch.Tensor) -> torch.Tensor:
    m = agent.model
    if name == "sac":
        actions, logprob = m.actor.sample(obs, agent.generator)
        return module_of(name).actor_loss(m, obs, actions, logprob)[0]
    return module_of(name).actor_loss(m, obs)[0]


@pytest.mark.parametrize("name", CONTINUOUS)
def test_the_actor_loss_puts_no_gradient_on_any_critic_parameter(name):
    agent, _ = small_agent(name)
    batch = _batches(agent, 1)[0]
    agent.optimizer.zero_grad(set_to_none=True)
    _actor_loss(name, agent, batch.obs).backward()
    critic = list(agent.model.critic.parameters()) + ([agent.model.log_alpha] if name == "sac" else [])
    assert [p.grad for p in critic] == [None] * len(critic), "the actor's loss reached a critic (or alpha) parameter"
    assert all(p.grad is not None for p in agent.model.actor.parameters())
    assert sum(p.grad.abs().sum() for p in agent.model.actor.parameters()) > 0  # it did backpropagate


def _polyak(target: torch.nn.Module, source: torch.nn.Module, tau: float) -> None:
    with torch.no_grad():
        for t, s in zip(target.parameters(), source.parameters()):
            t.mul_(1 - tau).add_(tau * s)


class TwoOptimizers:
    """The textbook update, written plainly: an Adam per network, each loss backpropagated on its
    own into its own parameters only, all from the weights before this update, then each optimizer
    steps and the targets follow. (Sequential implementations step the critic first; the fused
    update's actor sees the critic from before the step, and so does this reference.)"""

    def __init__(self, name: str, agent: Any):
        self.name, self.cfg = name, agent.config
        self.model = copy.deepcopy(agent.model)
        self.generator = torch.Generator().manual_seed(0)
        self.generator.set_state(agent.generator.get_state())  # the same noise, draw for draw
        self.target_entropy = getattr(agent, "target_entropy", None)
        self.updates = agent.updates
        m = self.model
        self.critic_opt = torch.optim.Adam(m.critic.parameters(), lr=self.cfg.critic_lr)
        self.actor_opt = torch.optim.Adam(m.actor.parameters(), lr=self.cfg.actor_lr)
        self.alpha_opt = torch.optim.Adam([m.log_alpha], lr=self.cfg.alpha_lr) if name == "sac" else None

    def target(self, b: Batch) -> torch.Tensor:
        """y = r + gamma (1 - terminated) V(s'), V from the target networks (and SAC's entropy term)."""
        m, cfg = self.model, self.cfg
        with torch.no_grad():
            if self.name == "sac":
                a2, logp2 = m.actor.sample(b.next_obs, self.generator)
                v = m.critic_target(b.next_obs, a2).min(dim=0).values - m.log_alpha.exp() * logp2
            elif self.name == "td3":
                actor = m.actor_target
                a2 = actor(b.next_obs)
                eps = (torch.randn(a2.shape, generator=self.generator) * cfg.policy_noise).clamp(-cfg.noise_clip,
                                                                                                 cfg.noise_clip)
                a2 = (a2 + eps * actor.action_scale).clamp(actor.action_low, actor.action_high)
                v = m.critic_target(b.next_obs, a2).min(dim=0).values
            else:
                v = m.critic_target(b.next_obs, m.actor_target(b.next_obs))
            return b.rewards + cfg.gamma * (1.0 - b.terminated.float()) * v

    def update(self, b: Batch) -> dict[str, float]:
        m, cfg = self.model, self.cfg
        self.updates += 1
        y = self.target(b)
        q = m.critic(b.obs, b.actions)  # (2, B) twin critics, (B,) DDPG's one
        critic_loss = ((q - y) ** 2).mean(dim=-1).sum()
        self.critic_opt.zero_grad()
        critic_loss.backward(inputs=list(m.critic.parameters()))
        losses = {"loss/critic": critic_loss.item()}
        update_actor = self.name != "td3" or self.updates % cfg.policy_delay == 0
        if update_actor:
            if self.name == "sac":
                a, logp = m.actor.sample(b.obs, self.generator)
                alpha = m.log_alpha.exp().detach()
                actor_loss = (alpha * logp - m.critic(b.obs, a).min(dim=0).values).mean()
                alpha_loss = -(m.log_alpha * (logp.detach() + self.target_entropy)).mean()
                self.alpha_opt.zero_grad()
                alpha_loss.backward(inputs=[m.log_alpha])
                losses["loss/alpha"] = alpha_loss.item()
            elif self.name == "td3":
                actor_loss = -m.critic(b.obs, m.actor(b.obs))[0].mean()  # through the first critic
            else:
                actor_loss = -m.critic(b.obs, m.actor(b.obs)).mean()
            self.actor_opt.zero_grad()
            actor_loss.backward(inputs=list(m.actor.parameters()))  # the critic's weights get nothing
            losses["loss/actor"] = actor_loss.item()
        self.critic_opt.step()
        if update_actor:
            self.actor_opt.step()
        if self.alpha_opt is not None:
            self.alpha_opt.step()
        if update_actor:  # TD3's targets follow on delayed updates, SAC's and DDPG's on every one
            _polyak(m.critic_target, m.critic, cfg.tau)
            if self.name != "sac":
                _polyak(m.actor_target, m.actor, cfg.tau)
        return losses


@pytest.mark.parametrize("name", CONTINUOUS)
def test_one_fused_update_equals_two_optimizers_on_the_same_batch(name):
    """Four updates (TD3: two delayed actor steps among them), each on the same batch for both,
    from the same weights and generator state: every weight, Adam moment aside, and every loss
    agree to 1e-6."""
    agent, _ = small_agent(name)
    reference = TwoOptimizers(name, agent)
    before = copy.deepcopy(agent.model.state_dict())
    for batch in _batches(agent, 4):
        agent.updates += 1  # as train_step counts it before the update (TD3's delay reads it)
        info = {k: v.item() for k, v in agent.update(batch).items()}
        expected = reference.update(batch)
        for key, value in expected.items():
            assert info[key] == pytest.approx(value, abs=1e-6), key
        assert ("loss/actor" in info) == ("loss/actor" in expected)
    mine, theirs = agent.model.state_dict(), reference.model.state_dict()
    assert list(mine) == list(theirs)
    for key in mine:
        torch.testing.assert_close(mine[key], theirs[key], atol=1e-6, rtol=0, msg=key)
    moved = sum((mine[k] - before[k]).abs().sum() for k in mine if mine[k].is_floating_point())
    assert moved > 1e-3  # the updates did change the weights: agreeing is not both standing still


def test_soft_update_is_polyak_averaging():
    """theta' <- tau theta + (1 - tau) theta' for every parameter (one _foreach_lerp_ call), tau = 1 a copy."""
    source, target = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    expected = [t.detach() + 0.1 * (s.detach() - t.detach()) for t, s in zip(target.parameters(), source.parameters())]
    podracer.agents.soft_update(target, source, 0.1)
    for t, e in zip(target.parameters(), expected):
        torch.testing.assert_close(t.detach(), e)
    podracer.agents.soft_update(target, source, 1.0)
    assert all(torch.equal(t, s) for t, s in zip(target.parameters(), source.parameters()))


@pytest.mark.parametrize("name", ["td3", "ddpg"])
def test_deterministic_agents_share_acting_and_groups(name):
    """DDPG and TD3 act through ``DeterministicPolicyAgent`` and take ``OffPolicyAgent``'s actor and
    critic groups: deterministic actions in the bounds, noisy ones clipped to them."""
    from podracer.agents.offpolicy import DeterministicPolicyAgent

    agent, env = small_agent(name, exploration_noise=5.0)  # noise far past the bounds
    assert isinstance(agent, DeterministicPolicyAgent)
    assert [g["name"] for g in agent.optimizer.param_groups] == ["actor", "critic"]
    obs, _ = env.reset(seed=0)
    mu, noisy = agent.act(obs, deterministic=True), agent.act(obs)
    assert mu.shape == noisy.shape == (4, 1) and torch.equal(agent(obs), mu)
    assert float(noisy.abs().max()) <= 2.0 and not torch.equal(noisy, mu)


# ---------------------------------------------------------------------------- interface
def small_agent(name: str, device: str = "cpu", **overrides: Any):
    env_cls = CartPoleVecEnv if name in DISCRETE else PendulumVecEnv
    env = env_cls(num_envs=4, device=device)
    cfg = dict(hidden_sizes=(16, 16), learning_starts=32, batch_size=16, num_steps=8, buffer_size=1_000)
    return make_agent(name, env, seed=0, preset=None, **{**cfg, **overrides}), env


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
    loss_keys = {"loss/critic"} if name in DISCRETE else {"loss/critic", "loss/actor"}
    assert loss_keys <= set(last), sorted(last)
    assert all(isinstance(v, float) for v in last.values())
    if name == "sac":
        assert "charts/alpha" in last and "loss/alpha" in last
    if name in DISCRETE:
        assert 0.0 <= last["charts/epsilon"] <= 1.0


@pytest.mark.parametrize("name", ["sac", "td3", "ddpg", "dqn"])
def test_the_shared_deviations_are_written_once_and_each_agent_points_to_them(name):
    """offpolicy.py's docstring holds the deviations the four agents share; each agent's docstring
    points there in one line and lists only its own."""
    from podracer.agents import offpolicy

    shared = offpolicy.__doc__.split("Our deviations from the papers")[1].split("\nAlso here:")[0]
    bullets = [b.split("\n")[0].strip() for b in shared.split("\n- ")[1:]]
    assert len(bullets) >= 4, bullets
    doc = module_of(name).__doc__
    assert [line for line in doc.splitlines() if "``offpolicy.py``'s docstring" in line] == [
        f"Deviations shared by every off-policy agent: ``offpolicy.py``'s docstring. {name.upper()}'s own:"]
    assert not [b for b in bullets if b in doc], f"{name}.py repeats a shared deviation"


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


def test_sac_refuses_a_fixed_action_dimension_that_td3_and_ddpg_take():
    """Found by re-deriving SAC: a Box dimension with low == high has (high - low) / 2 = 0 in the
    squashing's Jacobian, log π = +inf, and every loss, α and weight NaN after one update."""
    obs_space = gym.spaces.Box(-1.0, 1.0, (3,))
    fixed = gym.spaces.Box(low=torch.tensor([-1.0, 0.5]).numpy(), high=torch.tensor([1.0, 0.5]).numpy())
    with pytest.raises(ValueError, match=r"SAC needs low < high on every action dimension; dimension\(s\) \[1\]"):
        podracer.resolve_agent("sac")(obs_space, fixed)
    for name in ("td3", "ddpg"):
        actions = podracer.resolve_agent(name)(obs_space, fixed).act(torch.zeros(4, 3))
        assert torch.isfinite(actions).all() and (actions[:, 1] == 0.5).all()


@pytest.mark.parametrize("name", DISCRETE)
def test_discrete_agents_reject_box_actions(name):
    with pytest.raises(ValueError, match="needs a Discrete action space"):
        make_agent(name, PendulumVecEnv(num_envs=2))


@pytest.mark.parametrize("name", ALL)
def test_unknown_and_invalid_config_keys(name):
    env = CartPoleVecEnv(num_envs=2) if name in DISCRETE else PendulumVecEnv(num_envs=2)
    with pytest.raises(ValueError, match=r"unknown \w+Config field\(s\) \['lerning_rate'\]"):
        make_agent(name, env, lerning_rate=1e-3)
    with pytest.raises(ValueError, match="gamma must be in"):
        make_agent(name, env, gamma=1.5)


@pytest.mark.parametrize("name", ALL)
def test_set_hparams_reaches_the_optimizer(name):
    agent, _ = small_agent(name)
    lr_field = "learning_rate" if name in DISCRETE else "actor_lr"
    agent.set_hparams(**{lr_field: 1.234e-4})
    groups = agent.optimizer.param_groups
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
    assert d3qn.model.q.dueling and not ddqn.model.q.dueling


def test_dqn_epsilon_decays_linearly():
    agent, _ = small_agent("dqn", start_e=1.0, end_e=0.1, exploration_steps=1_000)
    for steps, eps in [(0, 1.0), (500, 0.55), (1_000, 0.1), (5_000, 0.1)]:
        agent.global_step = steps
        assert agent.epsilon == pytest.approx(eps)


def test_old_names_still_work_with_a_warning():
    """0.1 names (config ``hidden``, DQN ``lr``; attributes ``nets``, ``optim``, ``rng``,
    ``env_steps``) keep working for one minor version, with a FutureWarning."""
    with pytest.warns(FutureWarning, match="SACConfig.hidden is renamed 'hidden_sizes'"):
        sac = make_agent("sac", PendulumVecEnv(num_envs=2), seed=0, preset=None, hidden=(8, 8))
    assert sac.config.hidden_sizes == (8, 8)
    with pytest.warns(FutureWarning, match="DQNConfig.lr is renamed 'learning_rate'"):
        dqn = make_agent("dqn", CartPoleVecEnv(num_envs=2), seed=0, preset=None, lr=1e-3)
    assert dqn.config.learning_rate == 1e-3 and dqn.optimizer.param_groups[0]["lr"] == 1e-3
    for agent in (sac, dqn):
        for old, new in [("nets", "model"), ("optim", "optimizer"), ("rng", "generator"), ("env_steps", "global_step")]:
            with pytest.warns(FutureWarning, match=f"OffPolicyAgent.{old} is renamed '{new}'"):
                assert getattr(agent, old) is getattr(agent, new)
    with pytest.warns(FutureWarning, match="ReplayBuffer.rng is renamed 'generator'"):
        assert sac.buffer.rng is sac.buffer.generator


def _as_checkpoint_0_1(ckpt: dict[str, Any], name: str) -> dict[str, Any]:
    """The checkpoint ``ckpt`` as podracer 0.1 wrote it: old config and state keys, no
    ``generator_device``, the buffer's generator under ``rng``."""
    old = {"model": "nets", "optimizer": "optim", "generator": "rng", "global_step": "env_steps"}
    config = {("hidden" if k == "hidden_sizes" else "lr" if k == "learning_rate" else k): v
              for k, v in ckpt["config"].items()}
    state = {old.get(k, k): v for k, v in ckpt["state"].items() if k != "generator_device"}
    if "buffer" in state:
        buffer = {k: v for k, v in state["buffer"].items() if k not in ("generator_device", "num_added")}
        buffer["rng"] = buffer.pop("generator")
        state["buffer"] = buffer
    return {**ckpt, "agent": name, "config": config, "state": state}


@pytest.mark.parametrize("name", ALL)
def test_checkpoint_from_0_1_loads(name):
    agent, env = small_agent(name, save_buffer=True)
    obs, _ = env.reset(seed=0)
    for _ in range(2):
        obs, _ = agent.train_step(env, obs)
    with pytest.warns(FutureWarning, match="save it again") as caught:  # it loads, and says until when
        loaded = AgentBase.from_checkpoint(_as_checkpoint_0_1(agent.checkpoint(), name))
    assert any("replay buffer uses old names" in str(w.message) and "ReplayBuffer.rng is renamed 'generator'"
               in str(w.message) for w in caught)
    assert loaded.config == agent.config and loaded.global_step == agent.global_step == 64
    assert len(loaded.buffer) == len(agent.buffer) == loaded.buffer.num_added
    assert torch.equal(loaded.act(obs), agent.act(obs))  # same device type: the very same generator state
    _, m_a = agent.train_step(*_fresh_env(env))
    _, m_b = loaded.train_step(*_fresh_env(env))
    assert m_a == m_b


def _fresh_env(env: Any) -> tuple[Any, torch.Tensor]:
    twin = type(env)(num_envs=env.num_envs)
    obs, _ = twin.reset(seed=5)
    return twin, obs


@pytest.mark.parametrize("name", ALL)
def test_loaded_agent_refills_its_buffer_before_updating(name, tmp_path, monkeypatch):
    """A checkpoint without its buffer (save_buffer=False: every tournament generation) used to
    resume past learning_starts and sample batches of 16 from the first 4 transitions. It must
    warm up again: random actions and no update until the buffer holds learning_starts."""
    agent, env = small_agent(name, learning_starts=64, updates_per_step=1.0)  # 32 transitions per train_step
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        obs, metrics = agent.train_step(env, obs)
    assert metrics["charts/updates"] > 0 and agent.global_step == 96  # past warm-up

    loaded = AgentBase.load(agent.save(tmp_path / f"{name}.pt"))
    assert len(loaded.buffer) == 0 and loaded.global_step == 96 and loaded.updates == agent.updates

    warmup_flags: list[bool] = []
    explore = loaded.explore
    monkeypatch.setattr(loaded, "explore", lambda o, w: (warmup_flags.append(w), explore(o, w))[1])

    obs, metrics = loaded.train_step(env, obs)
    assert metrics["charts/updates"] == 0 and len(loaded.buffer) == 32
    assert warmup_flags == [True] * 8  # uniform random actions while the buffer refills
    obs, metrics = loaded.train_step(env, obs)
    assert warmup_flags == [True] * 16
    assert metrics["charts/updates"] == 4  # the last vector step filled it to 64: its 4 transitions' updates
    obs, metrics = loaded.train_step(env, obs)
    assert warmup_flags[16:] == [False] * 8 and metrics["charts/updates"] == 32
    assert loaded.global_step == 96 + 3 * 32


@pytest.mark.parametrize("name", ["sac", "dqn"])
def test_updates_wait_for_a_full_batch(name):
    """learning_starts below batch_size: no update samples a batch from fewer transitions."""
    agent, env = small_agent(name, learning_starts=0, batch_size=48, updates_per_step=1.0)
    obs, _ = env.reset(seed=0)
    obs, metrics = agent.train_step(env, obs)  # 32 transitions
    assert metrics["charts/updates"] == 0
    obs, metrics = agent.train_step(env, obs)  # 48 after its 4th vector step: updates for 5 steps of 4
    assert metrics["charts/updates"] == 20


@pytest.mark.parametrize("name", ALL)
def test_checkpoint_with_another_devices_generators_loads(name):
    """A CUDA generator state is 16 bytes and a CPU one 5056, so a checkpoint saved on a GPU did not
    load on a CPU. Simulated with CUDA-sized states for the agent's and the buffer's generators."""
    agent, env = small_agent(name, save_buffer=True)
    obs, _ = env.reset(seed=0)
    obs, _ = agent.train_step(env, obs)
    ckpt = agent.checkpoint()
    for state in (ckpt["state"], ckpt["state"]["buffer"]):
        state["generator"] = torch.arange(16, dtype=torch.uint8)
        state["generator_device"] = "cuda"
    loaded, again = AgentBase.from_checkpoint(ckpt), AgentBase.from_checkpoint(ckpt)
    assert torch.equal(loaded.act(obs, deterministic=True), agent.act(obs, deterministic=True))
    assert torch.equal(loaded.act(obs), again.act(obs))  # reseeded deterministically from the saved bytes
    assert len(loaded.buffer) == len(agent.buffer)
    _, metrics = loaded.train_step(*_fresh_env(env))
    assert metrics["charts/updates"] > 0 and math.isfinite(metrics["loss/critic"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ALL)
def test_checkpoint_saved_on_cuda_loads_on_cpu(name, tmp_path):
    agent, env = small_agent(name, device="cuda", save_buffer=True)
    obs, _ = env.reset(seed=0)
    agent.train_step(env, obs)
    loaded = AgentBase.load(agent.save(tmp_path / f"{name}.pt"), device="cpu")
    cpu_env, cpu_obs = _fresh_env(type(env)(num_envs=4))
    torch.testing.assert_close(loaded.act(cpu_obs, deterministic=True),
                               agent.act(cpu_obs.cuda(), deterministic=True).cpu())
    loaded.train_step(cpu_env, cpu_obs)


@pytest.mark.parametrize("name", ["td3", "dqn"])
def test_loading_a_live_agents_state_copies_it(name):
    """``b.load_state_dict(a.state_dict())`` must not tie b's Adam moments to a's: torch's optimizer
    loader keeps the tensors it is given, so a's next updates used to change b."""
    a, env = small_agent(name)
    obs, _ = env.reset(seed=0)
    for _ in range(2):
        obs, _ = a.train_step(env, obs)
    b, _ = small_agent(name)
    b.load_state_dict(a.state_dict())
    moments = [s["exp_avg"].clone() for s in b.optimizer.state.values()]
    a.train_step(env, obs)
    assert all(torch.equal(m, s["exp_avg"]) for m, s in zip(moments, b.optimizer.state.values()))
