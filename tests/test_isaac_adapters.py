"""The Isaac Gym and Isaac Lab adapters, on CPU, against fakes of the two libraries (neither can
run here: NVIDIA tarball / RTX GPU). Each fake follows its library's step order line by line
(the lines are cited); on a toy physics whose next observation the test computes itself, so
"final_obs is the true last observation" is checked exactly. Also: ``backend="auto"``'s order,
and the errors for missing packages and for torch imported before isaacgym."""

import importlib.machinery
import logging
import math
import sys
import types

import gymnasium as gym
import numpy as np
import pytest
import torch

import locomotion
import podracer
from locomotion import make as make_module
from locomotion.isaacgym_backend import IsaacGymVecEnv, from_isaacgym_step, isaacgym_available
from locomotion.isaaclab_backend import IsaacLabVecEnv, from_isaaclab_step, isaaclab_available

ANT = locomotion.get_task("Ant")
FALL_HEIGHT = 0.3


# ---------------------------------------------------------------- a toy physics shared by both fakes
# state (N, 2) = (height, x); an action (a0, a1) in [-1, 1] moves height by 0.1 a0 - 0.05 and x by
# a1; the observation is (height, x, a0, a1), like Ant's, which ends with the last action.


def _simulate(state: torch.Tensor, actions: torch.Tensor) -> None:
    state[:, 0] += 0.1 * actions[:, 0] - 0.05
    state[:, 1] += actions[:, 1]


def _start_state(n: int) -> torch.Tensor:
    """Reset noise from torch's global generator, as IsaacGymEnvs' torch_rand_float."""
    return torch.stack([1.0 + 0.01 * torch.rand(n), torch.zeros(n)], dim=1)


def _expected_next_obs(obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """What the toy physics gives from observation ``obs`` under ``actions`` (clipped to [-1, 1])."""
    a = actions.clamp(-1.0, 1.0)
    return torch.stack([obs[:, 0] + 0.1 * a[:, 0] - 0.05, obs[:, 1] + a[:, 1], a[:, 0], a[:, 1]], dim=1)


def _is_reset_obs(rows: torch.Tensor) -> torch.Tensor:
    return (rows[:, 0] >= 1.0) & (rows[:, 0] < 1.01) & (rows[:, 1] == 0)


# ---------------------------------------------------------------- fake IsaacGymEnvs VecTask (+ Ant)


class FakeVecTask:
    """IsaacGymEnvs' ``VecTask`` with ``Ant``'s task methods, on the toy physics (IsaacGymEnvs
    at aeed298). Buffers as ``allocate_buffers`` (vec_task.py L310-324): ``reset_buf`` starts
    at ones, so a native first step resets every sub-env."""

    num_obs, num_actions = 4, 2

    def __init__(self, num_envs: int, max_episode_length: int = 1000, device: str = "cpu"):
        self.num_envs, self.device, self.rl_device = num_envs, device, device
        self.max_episode_length = max_episode_length
        self.clip_obs, self.clip_actions = 50.0, 1.0  # clipObservations, clipActions (L115-116)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.num_actions,))  # vec_task.py L113: Box(-1, 1)
        self.state = torch.zeros(num_envs, 2)  # the simulator's state (written by reset_idx, read by refresh)
        self.obs_buf = torch.zeros(num_envs, self.num_obs)
        self.rew_buf = torch.zeros(num_envs)
        self.reset_buf = torch.ones(num_envs, dtype=torch.long)
        self.timeout_buf = torch.zeros(num_envs, dtype=torch.long)
        self.progress_buf = torch.zeros(num_envs, dtype=torch.long)
        self.extras, self.obs_dict = {}, {}
        self.reset_calls = 0  # reset_idx calls (the adapter must not add any beyond one per ended batch)
        # no self.actions: Ant sets it in pre_physics_step only (ant.py L282)

    def step(self, actions):  # vec_task.py L360-408
        action_tensor = torch.clamp(actions, -self.clip_actions, self.clip_actions)  # L374
        self.pre_physics_step(action_tensor)  # L376
        _simulate(self.state, self.actions)  # L379-382: gym.simulate
        self.post_physics_step()  # L389
        self.timeout_buf = (self.progress_buf >= self.max_episode_length - 1) & (self.reset_buf != 0)  # L394
        self.extras["time_outs"] = self.timeout_buf.to(self.rl_device)  # L400
        self.obs_dict["obs"] = torch.clamp(self.obs_buf, -self.clip_obs, self.clip_obs).to(self.rl_device)  # L402
        return self.obs_dict, self.rew_buf.to(self.rl_device), self.reset_buf.to(self.rl_device), self.extras  # L408

    def reset(self):  # vec_task.py L426-438: computes nothing
        self.obs_dict["obs"] = torch.clamp(self.obs_buf, -self.clip_obs, self.clip_obs).to(self.rl_device)
        return self.obs_dict

    def pre_physics_step(self, actions):  # ant.py L281-285
        self.actions = actions.clone().to(self.device)

    def post_physics_step(self):  # ant.py L287-297
        self.progress_buf += 1
        env_ids = self.reset_buf.nonzero(as_tuple=False).flatten()
        if len(env_ids) > 0:
            self.reset_idx(env_ids)
        self.compute_observations()
        self.compute_reward(self.actions)

    def reset_idx(self, env_ids):  # ant.py L252-279
        self.reset_calls += 1
        self.state[env_ids] = _start_state(len(env_ids))
        self.progress_buf[env_ids] = 0
        self.reset_buf[env_ids] = 0

    def compute_observations(self):  # ant.py L232-242 (refresh, then observations incl. the last actions)
        self.obs_buf[:] = torch.cat([self.state, self.actions], dim=1)

    def compute_reward(self, actions):  # ant.py L214-230 and L365-371, in place as Ant's
        fell = self.obs_buf[:, 0] < FALL_HEIGHT
        self.rew_buf[:] = torch.where(fell, torch.full_like(self.rew_buf, -2.0), self.obs_buf[:, 1])
        reset = torch.where(fell, torch.ones_like(self.reset_buf), self.reset_buf)
        self.reset_buf[:] = torch.where(self.progress_buf >= self.max_episode_length - 1,
                                        torch.ones_like(self.reset_buf), reset)


def test_fake_vec_task_resets_on_the_next_step_as_isaacgymenvs():
    """The fake's native timing is IsaacGymEnvs': an ended sub-env returns its last observation
    with reset_buf 1, and the next step, whatever its action, returns its reset observation."""
    vt = FakeVecTask(2, max_episode_length=100)
    down, up = torch.tensor([[-1.0, 0.0], [1.0, 0.0]]), torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    obs_dict, _, reset_buf, _ = vt.step(down)  # first step: every sub-env reset (reset_buf starts at ones)
    assert _is_reset_obs(obs_dict["obs"]).all() and not reset_buf.any()
    for _ in range(10):
        obs_dict, rew, reset_buf, extras = vt.step(down)
        if reset_buf[0]:
            break
    assert reset_buf.tolist() == [1, 0] and obs_dict["obs"][0, 0] < FALL_HEIGHT  # the last observation
    assert not extras["time_outs"].any() and rew[0] == -2.0
    obs_dict, _, reset_buf, _ = vt.step(up)  # the action of sub-env 0 is wasted on the ended state
    assert _is_reset_obs(obs_dict["obs"][:1]).all() and reset_buf[0] == 0


def _isaacgym_env(num_envs: int = 3, max_episode_steps: int = 12, **kwargs) -> tuple[IsaacGymVecEnv, FakeVecTask]:
    vt = FakeVecTask(num_envs)
    return IsaacGymVecEnv(vt, ANT, device="cpu", max_episode_steps=max_episode_steps, **kwargs), vt


def test_isaacgym_conversion_is_a_same_step_autoreset_with_the_true_last_obs():
    env, vt = _isaacgym_env(num_envs=4, max_episode_steps=12)
    assert vt.max_episode_length == 13  # IsaacGymEnvs truncates at progress >= length - 1
    obs, info = env.reset(seed=0)
    assert obs.shape == (4, 4) and obs.dtype == torch.float32 and _is_reset_obs(obs).all() and info == {}
    assert (obs[:, 2:] == 0).all()  # no previous action at the start of an episode
    gen = torch.Generator().manual_seed(0)
    steps_in_episode = torch.zeros(4, dtype=torch.long)
    seen = {"terminated": 0, "truncated": 0}
    for _ in range(120):
        actions = torch.rand(4, 2, generator=gen) * 2 - 1
        actions[:, 0] -= 0.3  # most episodes fall, some reach the time limit
        expected = _expected_next_obs(obs, actions)  # the true next observation, for every sub-env
        calls = vt.reset_calls
        obs, rewards, terminated, truncated, info = env.step(actions)
        steps_in_episode += 1
        done = terminated | truncated
        assert rewards.dtype == torch.float32 and terminated.dtype == torch.bool and truncated.dtype == torch.bool
        torch.testing.assert_close(info["final_obs"], expected)  # dense, the true last observation
        assert torch.equal(info["_final_obs"], done)
        fell = expected[:, 0] < FALL_HEIGHT
        assert torch.equal(truncated, steps_in_episode == 12)
        assert torch.equal(terminated, fell & ~truncated)  # a fall on the last step: truncated only
        torch.testing.assert_close(rewards, torch.where(fell, torch.tensor(-2.0), expected[:, 1]))
        assert _is_reset_obs(obs[done]).all() and (obs[done][:, 2:] == 0).all()  # same-step: already reset
        torch.testing.assert_close(obs[~done], expected[~done])
        assert vt.reset_calls == calls + int(done.any())  # one reset per step with ended sub-envs, none later
        steps_in_episode[done] = 0
        seen["terminated"] += int(terminated.sum())
        seen["truncated"] += int(truncated.sum())
    assert seen["terminated"] > 5 and seen["truncated"] > 0, seen


def test_isaacgym_outputs_are_copies_of_the_reused_buffers():
    """VecTask returns its own rew_buf and reset_buf; reset_idx zeroes reset_buf in place and
    the next step overwrites rew_buf: what the adapter returned must not change."""
    env, _ = _isaacgym_env(num_envs=1, max_episode_steps=100)
    env.reset(seed=0)
    down = torch.tensor([[-1.0, 0.5]])
    for _ in range(20):
        _, rewards, terminated, _, _ = env.step(down)
        if terminated.any():
            break
    assert terminated.all() and rewards.item() == -2.0
    env.step(down)
    assert terminated.all() and rewards.item() == -2.0


def test_from_isaacgym_step_splits_time_outs_from_terminations():
    obs_dict = {"obs": torch.arange(6.0).reshape(3, 2)}
    reset_buf = torch.tensor([1, 1, 0])
    extras = {"time_outs": torch.tensor([True, False, False])}
    last_obs, rewards, terminated, truncated = from_isaacgym_step(obs_dict, torch.ones(3), reset_buf, extras,
                                                                  torch.device("cpu"))
    assert truncated.tolist() == [True, False, False] and terminated.tolist() == [False, True, False]
    assert torch.equal(last_obs, obs_dict["obs"]) and last_obs is not obs_dict["obs"]


def test_isaacgym_env_passes_the_protocol_checker_and_checks_actions():
    env, _ = _isaacgym_env(num_envs=3, max_episode_steps=30)
    podracer.check_env(env, num_steps=80)
    assert env.task == "ant" and env.backend == "isaacgym"
    assert "not gymnasium v5" in env.metadata["definitions"] and env.metadata["autoreset_mode"] == "same_step"
    env.reset(seed=1)
    with pytest.raises(ValueError, match=r"expected actions of shape \(3, 2\), got \(2,\)"):
        env.step(torch.zeros(2))
    with pytest.raises(ValueError, match="expected floating actions.*got dtype torch.int64"):
        env.step(torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="expected finite actions"):
        env.step(torch.full((3, 2), float("nan")))
    with pytest.raises(ValueError, match="expected actions as a torch.Tensor"):
        env.step(np.zeros((3, 2), np.float32))


def test_isaacgym_reset_seed_is_reproducible():
    env, _ = _isaacgym_env()
    a, _ = env.reset(seed=3)
    env.step(torch.zeros(3, 2))
    b, _ = env.reset(seed=3)
    assert torch.equal(a, b) and not torch.equal(a[0], a[1])


# ---------------------------------------------------------------- fake Isaac Lab DirectRLEnv (+ LocomotionEnv)


class FakeDirectRLEnv(gym.Env):
    """Isaac Lab's ``DirectRLEnv`` with ``LocomotionEnv``'s task methods, on the toy physics.
    Built from a config as ``gym.make(id, cfg=cfg)`` does; ``max_episode_length`` as
    ``DirectRLEnv.max_episode_length``: ceil(episode_length_s / (sim.dt * decimation))."""

    def __init__(self, cfg, render_mode=None, **kwargs):
        self.cfg, self.render_mode = cfg, render_mode
        self.num_envs, self.device = cfg.scene.num_envs, cfg.sim.device
        self.max_episode_length = math.ceil(cfg.episode_length_s / (cfg.sim.dt * cfg.decimation))
        self.single_observation_space = gym.spaces.Dict({"policy": gym.spaces.Box(-np.inf, np.inf, (4,))})
        self.single_action_space = gym.spaces.Box(-np.inf, np.inf, (2,))  # spec_to_gym_space(2): unbounded
        self.state = torch.zeros(self.num_envs, 2)
        self.actions = torch.zeros(self.num_envs, 2)  # _configure_gym_env_spaces: zeros
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.long)
        self.reset_terminated = torch.zeros(self.num_envs, dtype=torch.bool)
        self.reset_time_outs = torch.zeros(self.num_envs, dtype=torch.bool)
        self.extras = {}
        self.closed = False

    def reset(self, seed=None, options=None):  # direct_rl_env.py DirectRLEnv.reset
        if seed is not None:
            torch.manual_seed(seed)  # self.seed(seed): configure_seed, global
        self._reset_idx(torch.arange(self.num_envs, dtype=torch.int32))
        return self._get_observations(), self.extras

    def step(self, action):  # direct_rl_env.py DirectRLEnv.step, in order
        action = action.to(self.device)
        self._pre_physics_step(action)
        _simulate(self.state, self.actions)  # the `decimation` physics steps (the toy physics: one update)
        self.episode_length_buf += 1
        self.reset_terminated[:], self.reset_time_outs[:] = self._get_dones()
        self.reset_buf = self.reset_terminated | self.reset_time_outs
        self.reward_buf = self._get_rewards()
        reset_env_ids = self.reset_buf.nonzero(as_tuple=False).squeeze(-1).int()
        if len(reset_env_ids) > 0:
            self._reset_idx(reset_env_ids)
        self.obs_buf = self._get_observations()
        return self.obs_buf, self.reward_buf, self.reset_terminated, self.reset_time_outs, self.extras

    def _pre_physics_step(self, actions):  # LocomotionEnv
        self.actions = actions.clone()

    def _compute_intermediate_values(self):  # LocomotionEnv: read the state into task values
        self.torso_height, self.x = self.state[:, 0].clone(), self.state[:, 1].clone()

    def _get_observations(self):  # LocomotionEnv: reads the intermediate values only
        return {"policy": torch.cat([self.torso_height[:, None], self.x[:, None], self.actions], dim=1)}

    def _get_rewards(self):
        return torch.where(self.reset_terminated, torch.tensor(-2.0), self.x)

    def _get_dones(self):  # LocomotionEnv._get_dones
        self._compute_intermediate_values()
        time_out = self.episode_length_buf >= self.max_episode_length - 1
        died = self.torso_height < FALL_HEIGHT
        return died, time_out

    def _reset_idx(self, env_ids):  # LocomotionEnv._reset_idx: writes the start state, recomputes
        env_ids = env_ids.long()
        self.state[env_ids] = _start_state(len(env_ids))
        self.episode_length_buf[env_ids] = 0
        self._compute_intermediate_values()

    def close(self):
        self.closed = True


def _isaaclab_cfg(num_envs: int, device: str = "cpu"):
    """An Ant-like DirectRLEnvCfg: 15 s episodes at dt 1/120, decimation 2 (900 steps)."""
    return types.SimpleNamespace(episode_length_s=15.0, decimation=2, seed=None, action_scale=0.5,
                                 sim=types.SimpleNamespace(dt=1 / 120, device=device),
                                 scene=types.SimpleNamespace(num_envs=num_envs))


def _isaaclab_env(num_envs: int = 4, steps: int = 12, **kwargs) -> IsaacLabVecEnv:
    cfg = _isaaclab_cfg(num_envs)
    cfg.episode_length_s = (steps + 0.5) * cfg.sim.dt * cfg.decimation  # as make_isaaclab_env sets it
    return IsaacLabVecEnv(FakeDirectRLEnv(cfg), ANT, device="cpu", max_episode_steps=steps, **kwargs)


def _run_isaaclab(env: IsaacLabVecEnv, steps: int = 120):
    """Yield (expected next obs, step outputs, steps into the episode) under random actions."""
    obs, _ = env.reset(seed=0)
    gen = torch.Generator().manual_seed(0)
    steps_in_episode = torch.zeros(env.num_envs, dtype=torch.long)
    for _ in range(steps):
        actions = torch.rand(env.num_envs, 2, generator=gen) * 2.4 - 1.2  # some outside [-1, 1]: clipped
        actions[:, 0] -= 0.3
        expected = _expected_next_obs(obs, actions)
        out = env.step(actions)
        steps_in_episode += 1
        yield expected, out, steps_in_episode.clone()
        obs = out[0]
        steps_in_episode[out[2] | out[3]] = 0


def test_isaaclab_conversion_keeps_the_true_last_obs():
    env = _isaaclab_env(num_envs=4, steps=12)
    seen = {"terminated": 0, "truncated": 0, "both": 0}
    for expected, (obs, rewards, terminated, truncated, info), k in _run_isaaclab(env):
        done = terminated | truncated
        torch.testing.assert_close(info["final_obs"], expected)  # read before Isaac Lab's reset
        assert torch.equal(info["_final_obs"], done)
        fell = expected[:, 0] < FALL_HEIGHT
        assert torch.equal(terminated, fell) and torch.equal(truncated, k == 12)  # both when both, as gymnasium
        assert _is_reset_obs(obs[done]).all()
        torch.testing.assert_close(obs[~done], expected[~done])
        assert rewards.dtype == torch.float32 and terminated.dtype == torch.bool
        seen["terminated"] += int(terminated.sum())
        seen["truncated"] += int(truncated.sum())
        seen["both"] += int((terminated & truncated).sum())
    assert seen["terminated"] > 5 and seen["truncated"] > 0, seen


def test_isaaclab_without_capture_final_obs_is_the_reset_obs_as_documented():
    env = _isaaclab_env(num_envs=4, steps=12, capture_final_obs=False)
    saw_done = False
    for _, (obs, _, terminated, truncated, info), _ in _run_isaaclab(env, steps=60):
        done = terminated | truncated
        assert torch.equal(info["final_obs"], obs)  # all Isaac Lab exposes: the reset observation
        assert _is_reset_obs(info["final_obs"][done]).all()
        saw_done = saw_done or bool(done.any())
    assert saw_done


def test_isaaclab_outputs_are_copies_and_the_env_passes_the_checker():
    env = _isaaclab_env(num_envs=1, steps=100)
    env.reset(seed=0)
    down = torch.tensor([[-1.0, 0.5]])
    for _ in range(20):
        _, rewards, terminated, _, _ = env.step(down)
        if terminated.any():
            break
    assert terminated.all()
    env.step(down)  # Isaac Lab overwrites reset_terminated in place
    assert terminated.all() and rewards.item() == -2.0
    env = _isaaclab_env(num_envs=3, steps=30)
    podracer.check_env(env, num_steps=80)
    assert env.single_action_space == gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    assert "not gymnasium v5" in env.metadata["definitions"] and env.backend == "isaaclab"


def test_from_isaaclab_step_fills_final_obs_only_where_done():
    obs = {"policy": torch.zeros(3, 2)}
    last = torch.ones(3, 2)
    o, r, te, tr, info = from_isaaclab_step(obs, torch.ones(3, dtype=torch.float64), torch.tensor([True, False, False]),
                                            torch.tensor([False, False, True]), last, torch.device("cpu"))
    assert info["final_obs"].tolist() == [[1, 1], [0, 0], [1, 1]] and info["_final_obs"].tolist() == [True, False, True]
    assert r.dtype == torch.float32 and o is not obs["policy"]


# ---------------------------------------------------------------- make_env wiring, with fake packages


def _module(monkeypatch, name: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)  # find_spec() returns it, as for an installed one
    mod.__dict__.update(attrs)
    monkeypatch.setitem(sys.modules, name, mod)
    return mod


@pytest.fixture
def fake_isaaclab(monkeypatch):
    """isaaclab, isaaclab.app, isaaclab_tasks(.utils) as modules, and the Ant id registered with
    gymnasium for the fake env."""
    launched = []
    _module(monkeypatch, "isaaclab")
    _module(monkeypatch, "isaaclab.app", AppLauncher=lambda **kw: launched.append(kw))
    _module(monkeypatch, "isaaclab_tasks")
    made = []

    def parse_env_cfg(task_name, device="cuda:0", num_envs=None, use_fabric=None):
        made.append(task_name)
        return _isaaclab_cfg(num_envs, device)

    _module(monkeypatch, "isaaclab_tasks.utils", parse_env_cfg=parse_env_cfg)
    gym.register("Isaac-Ant-Direct-v0", entry_point=FakeDirectRLEnv, disable_env_checker=True)
    yield types.SimpleNamespace(launched=launched, made=made)
    del gym.registry["Isaac-Ant-Direct-v0"]


def test_make_env_isaaclab_builds_through_parse_env_cfg_with_the_time_limit(fake_isaaclab):
    env = locomotion.make_env("Ant", 3, device="cpu", backend="isaaclab", max_episode_steps=7)
    assert isinstance(env, IsaacLabVecEnv) and fake_isaaclab.made == ["Isaac-Ant-Direct-v0"]
    assert fake_isaaclab.launched == [{"headless": True, "device": "cpu"}]
    env.reset(seed=0)
    for t in range(1, 8):
        _, _, terminated, truncated, _ = env.step(torch.tensor([[1.0, 0.0]] * 3))  # never falls
        assert truncated.all() == (t == 7) and not terminated.any()
    with pytest.raises(ValueError, match="no field 'not_a_field'"):
        locomotion.make_env("Ant", 3, device="cpu", backend="isaaclab", not_a_field=1)
    env.close()


def test_isaac_backends_have_ant_and_humanoid_only():
    for backend, lib in (("isaaclab", "Isaac Lab"), ("isaacgym", "IsaacGymEnvs")):
        with pytest.raises(ValueError, match=f"{lib} has no HalfCheetah.*backend='envpool'"):
            locomotion.make_env("HalfCheetah", 2, device="cpu", backend=backend)


@pytest.fixture
def fake_isaacgym(monkeypatch):
    made = []

    def make(seed, task, num_envs, sim_device, rl_device, graphics_device_id=-1, headless=False, **kw):
        made.append(dict(seed=seed, task=task, sim_device=sim_device, headless=headless, **kw))
        return FakeVecTask(num_envs, device=sim_device)

    _module(monkeypatch, "isaacgym")
    _module(monkeypatch, "isaacgymenvs", make=make)
    _module(monkeypatch, "isaacgymenvs.tasks.base.vec_task", EXISTING_SIM=None)
    return made


def test_make_env_isaacgym_builds_through_isaacgymenvs_make(fake_isaacgym):
    env = locomotion.make_env("Humanoid", 2, device="cpu", backend="isaacgym", seed=5)
    assert isinstance(env, IsaacGymVecEnv) and env.task == "humanoid" and env.max_episode_steps == 1000
    assert fake_isaacgym == [dict(seed=5, task="Humanoid", sim_device="cpu", headless=True, force_render=False)]
    sys.modules["isaacgymenvs.tasks.base.vec_task"].EXISTING_SIM = object()  # what a created env leaves
    with pytest.raises(RuntimeError, match="one simulation per process"):
        locomotion.make_env("Ant", 2, device="cpu", backend="isaacgym")


# ---------------------------------------------------------------- missing packages, import order


def test_missing_packages_name_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "isaacgym", None)  # import isaacgym now raises ImportError
    with pytest.raises(ImportError, match=r"Isaac Gym Preview 4.*pip install -e isaacgym/python.*IsaacGymEnvs"):
        locomotion.make_env("Ant", 2, device="cpu", backend="isaacgym")
    monkeypatch.setitem(sys.modules, "isaaclab", None)
    with pytest.raises(ImportError, match=r'pip install "isaaclab\[isaacsim,all\]" --extra-index-url'):
        locomotion.make_env("Ant", 2, device="cpu", backend="isaaclab")
    assert not isaacgym_available() and not isaaclab_available()


def test_torch_before_isaacgym_is_explained(monkeypatch, tmp_path):
    """An installed isaacgym whose import, as Isaac Gym's gymdeps, refuses when torch came first."""
    (tmp_path / "isaacgym").mkdir()
    (tmp_path / "isaacgym" / "__init__.py").write_text(
        "import sys\nif 'torch' in sys.modules:\n"
        "    raise ImportError('PyTorch was imported before isaacgym modules.  Please import torch after isaacgym "
        "modules.')\n")
    (tmp_path / "isaacgymenvs").mkdir()
    (tmp_path / "isaacgymenvs" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not isaacgym_available(ANT)  # installed, but torch is imported and isaacgym is not: not importable
    with pytest.raises(ImportError, match=r"`import isaacgym` the first import of your script.*PyTorch was imported"):
        locomotion.make_env("Ant", 2, device="cpu", backend="isaacgym")
    assert "isaacgym" not in sys.modules
    _module(monkeypatch, "isaacgym")  # as if imported before torch
    assert isaacgym_available(ANT) and not isaacgym_available(locomotion.get_task("Hopper"))


# ---------------------------------------------------------------- backend="auto"


def _availability(monkeypatch, warp: bool, isaaclab: bool, isaacgym: bool, envpool: bool):
    _module(monkeypatch, "locomotion.warp_backend", warp_available=lambda: warp)
    monkeypatch.setattr(make_module, "isaaclab_available", lambda task: isaaclab and task.key in ("ant", "humanoid"))
    monkeypatch.setattr(make_module, "isaacgym_available", lambda task: isaacgym and task.key in ("ant", "humanoid"))
    monkeypatch.setattr(make_module, "envpool_available", lambda task: envpool)


def test_auto_order_warp_on_gpu_then_isaaclab_isaacgym_envpool_gymnasium(monkeypatch):
    choose, ant, hopper = locomotion.choose_backend, ANT, locomotion.get_task("Hopper")
    _availability(monkeypatch, warp=True, isaaclab=True, isaacgym=True, envpool=True)
    assert choose("auto", ant, "cuda") == "warp"
    assert choose("auto", ant, "cpu") == "isaaclab"  # warp only on a GPU
    _availability(monkeypatch, warp=False, isaaclab=True, isaacgym=True, envpool=True)
    assert choose("auto", ant, "cuda") == "isaaclab"
    assert choose("auto", hopper, "cuda") == "envpool"  # the Isaac backends have no Hopper
    _availability(monkeypatch, warp=False, isaaclab=False, isaacgym=True, envpool=True)
    assert choose("auto", ant, "cuda") == "isaacgym"
    _availability(monkeypatch, warp=False, isaaclab=False, isaacgym=False, envpool=True)
    assert choose("auto", ant, "cuda") == "envpool"
    _availability(monkeypatch, warp=False, isaaclab=False, isaacgym=False, envpool=False)
    assert choose("auto", ant, "cuda") == "gymnasium"
    assert locomotion.BACKENDS == ("warp", "isaaclab", "isaacgym", "envpool", "gymnasium")
    with pytest.raises(ValueError, match="valid backends.*warp.*isaaclab.*isaacgym.*envpool.*gymnasium"):
        choose("brax", ant)


def test_auto_treats_a_missing_warp_module_as_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "locomotion.warp_backend", None)
    assert not make_module._warp_available(torch.device("cuda"))


def test_auto_announces_that_isaac_tasks_are_not_v5(monkeypatch, caplog, fake_isaaclab, fake_isaacgym):
    _availability(monkeypatch, warp=False, isaaclab=True, isaacgym=True, envpool=False)
    with caplog.at_level(logging.INFO, logger="podracer"):
        env = locomotion.make_env("Ant", 2, device="cpu")
    assert env.backend == "isaaclab"
    assert "backend 'isaaclab'" in caplog.text and "not gymnasium v5" in caplog.text
    assert "backend='gymnasium' for the v5 task" in caplog.text
    _availability(monkeypatch, warp=False, isaaclab=False, isaacgym=True, envpool=False)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="podracer"):
        env = locomotion.make_env("Ant", 2, device="cpu")
    assert env.backend == "isaacgym" and "IsaacGymEnvs' own Ant, not gymnasium v5" in caplog.text
    _availability(monkeypatch, warp=False, isaaclab=False, isaacgym=False, envpool=False)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="podracer"):
        locomotion.make_env("Hopper", 2, device="cpu")
    assert "backend 'gymnasium'" in caplog.text and "not gymnasium v5" not in caplog.text
