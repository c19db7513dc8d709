"""The ``warp`` locomotion backend (MuJoCo Warp) on the CPU device: the protocol for every task,
truncation and same-step autoreset, and gymnasium v5's observations, rewards and terminations from
the same state and actions.

The first run compiles MuJoCo Warp's kernels; warp caches them (``warp.config.kernel_cache_dir``)
and later runs load them from there. Measured here (2 busy cores): this file takes ~50 s cold
(~36 s of it compiling), ~18 s warm.
"""

import sys

import numpy as np
import pytest
import torch

pytest.importorskip("mujoco")
pytest.importorskip("mujoco_warp", reason='mujoco-warp is not installed: pip install "podracer-rl[warp]"')
pytest.importorskip("warp", reason='warp-lang is not installed: pip install "podracer-rl[warp]"')

import gymnasium as gym  # noqa: E402
import mujoco  # noqa: E402

import podracer  # noqa: E402
from locomotion.tasks import get_task  # noqa: E402
from locomotion.warp_backend import WarpVecEnv, warp_available  # noqa: E402

TASKS = ["HalfCheetah", "Hopper", "Walker2d", "Ant", "Humanoid"]
CPU = torch.device("cpu")
# leading qpos entries left out of the observation (exclude_current_positions_from_observation)
SKIPPED = {"HalfCheetah": 1, "Hopper": 1, "Walker2d": 1, "Ant": 2, "Humanoid": 2}


def make(task: str, num_envs: int = 3, **kwargs) -> WarpVecEnv:
    return WarpVecEnv(get_task(task), num_envs, CPU, kwargs.pop("seed", 0), kwargs.pop("max_episode_steps", None),
                      **kwargs)


def uniform_actions(space, steps: int, n: int, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.as_tensor(rng.uniform(space.low, space.high, (steps, n, *space.shape)) * scale, dtype=torch.float32)


def assert_is_reset_obs(obs: torch.Tensor, env: WarpVecEnv, task: str) -> None:
    """The joint positions in ``obs`` are the initial ones plus noise within reset_noise_scale."""
    gym_env = gym.make(f"{task}-v5").unwrapped
    skip, scale = SKIPPED[task], gym_env._reset_noise_scale
    init = torch.as_tensor(gym_env.init_qpos[skip:], dtype=torch.float32)
    assert ((obs[..., :init.shape[0]] - init).abs() <= scale + 1e-6).all()


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.slow
def test_protocol_shapes_dtypes_and_action_checks(task):
    env = make(task, 3, max_episode_steps=5)
    reference = gym.make(f"{task}-v5")
    assert env.task == task.lower() and env.backend == "warp" and env.num_envs == 3 and env.device == CPU
    assert env.single_observation_space == reference.observation_space  # float64 Box, as gymnasium's
    assert env.single_action_space == reference.action_space
    obs_dim, act_dim = env.single_observation_space.shape[0], env.single_action_space.shape[0]
    obs, info = env.reset()
    assert obs.shape == (3, obs_dim) and obs.dtype == torch.float32 and obs.device == CPU and info == {}
    obs, rewards, terminated, truncated, info = env.step(torch.zeros(3, act_dim))
    assert obs.shape == (3, obs_dim) and obs.dtype == torch.float32
    assert rewards.shape == (3,) and rewards.dtype == torch.float32
    assert terminated.dtype == torch.bool and truncated.dtype == torch.bool and terminated.shape == (3,)
    assert info["final_obs"].shape == (3, obs_dim) and info["final_obs"].dtype == torch.float32
    assert info["_final_obs"].dtype == torch.bool and info["_final_obs"].shape == (3,)
    before = obs.clone()
    with pytest.raises(ValueError, match=rf"expected actions of shape \(3, {act_dim}\), got \(2, {act_dim}\)"):
        env.step(torch.zeros(2, act_dim))
    with pytest.raises(ValueError, match="expected floating actions.*got dtype torch.int64"):
        env.step(torch.zeros(3, act_dim, dtype=torch.int64))
    with pytest.raises(ValueError, match="expected actions as a torch.Tensor.*got ndarray"):
        env.step(np.zeros((3, act_dim), dtype=np.float32))
    with pytest.raises(ValueError, match="expected finite actions"):
        env.step(torch.full((3, act_dim), float("nan")))
    assert torch.equal(env._def.obs(), before)  # a rejected action leaves the worlds untouched
    podracer.check_env(env, num_steps=12)  # 12 steps: every sub-env hits the 5-step limit
    env.close()


@pytest.mark.parametrize("task", TASKS)
def test_truncates_at_max_episode_steps_with_dense_final_obs(task):
    env = make(task, 3, max_episode_steps=5)
    untruncated = make(task, 3)  # same seed, gymnasium's limit of 1000 steps
    assert untruncated.max_episode_steps == 1000
    obs, _ = env.reset()
    untruncated.reset()
    zeros = torch.zeros(3, env.single_action_space.shape[0])
    for t in range(1, 6):
        obs, _, terminated, truncated, info = env.step(zeros)
        continued = untruncated.step(zeros)[0]
        assert not terminated.any(), "no task falls in 5 steps without actions"
        assert bool(truncated.any()) == bool(truncated.all()) == (t == 5), t
        assert torch.equal(info["_final_obs"], truncated)
        if t < 5:
            assert torch.equal(info["final_obs"], obs)
    # final_obs: the episode's last observation (as if it went on); obs: a new episode's first
    assert torch.equal(info["final_obs"], continued)
    assert not torch.equal(obs, continued)
    assert_is_reset_obs(obs, env, task)
    for _ in range(4):  # the new episode runs its own 5 steps
        _, _, _, truncated, info = env.step(zeros)
        assert not truncated.any() and not info["_final_obs"].any()
    assert env.step(zeros)[3].all()


def test_autoreset_on_termination_is_same_step():
    """Hopper falls within tens of steps under random full-range actions: the ended world's obs is
    already its next episode's first; the fall is in final_obs; the others are untouched."""
    env = make("Hopper", 4, seed=1)
    env.reset()
    for t, actions in enumerate(uniform_actions(env.single_action_space, 300, 4, seed=1)):
        obs, _, terminated, truncated, info = env.step(actions)
        if terminated.any():
            break
    else:
        pytest.fail("no Hopper fell in 300 steps")
    assert not truncated.any() and torch.equal(info["_final_obs"], terminated)
    final, ended = info["final_obs"], terminated
    z, angle = final[ended, 0], final[ended, 1]  # Hopper: obs = qpos[1:] (z, angle, ...), qvel
    state = final[ended, 1:]  # qpos[2:] and qvel (clipped to +-10 in obs, and the range is +-100)
    unhealthy = (z <= 0.7) | (angle.abs() >= 0.2) | (state.abs() >= 100).any(1)
    assert unhealthy.all(), final[ended]
    assert_is_reset_obs(obs[ended], env, "Hopper")
    assert (obs[ended, 5:].abs() <= 5e-3 + 1e-6).all()  # reset velocities: uniform noise of 5e-3
    assert torch.equal(final[~ended], obs[~ended])
    assert (env._elapsed[ended] == 0).all() and (env._elapsed[~ended] == t + 1).all()


def test_termination_on_the_last_step_is_both_terminated_and_truncated():
    actions = uniform_actions(gym.make("Hopper-v5").action_space, 200, 1)
    env = make("Hopper", 1, reset_noise_scale=0.0)
    env.reset()
    for t, a in enumerate(actions, 1):
        if env.step(a)[2].any():
            break
    else:
        pytest.fail("Hopper should fall under random actions")
    env = make("Hopper", 1, reset_noise_scale=0.0, max_episode_steps=t)
    env.reset()
    for a in actions[:t]:
        _, _, terminated, truncated, info = env.step(a)
    assert terminated.all() and truncated.all() and info["_final_obs"].all()


def test_seeding_sub_env_i_gets_seed_plus_i():
    a, b = make("Hopper", 3, seed=7), make("Hopper", 3, seed=None)
    obs_a, _ = a.reset()
    assert torch.equal(obs_a, b.reset(seed=7)[0])
    assert not torch.equal(obs_a[0], obs_a[1])
    assert torch.equal(make("Hopper", 1, seed=8).reset()[0][0], obs_a[1])
    assert not torch.equal(a.reset()[0], obs_a)  # reset() without a seed: new episodes, new noise
    assert not torch.equal(make("Hopper", 3, seed=None).reset()[0], make("Hopper", 3, seed=None).reset()[0])
    with pytest.raises(ValueError, match="seed must be a whole number"):
        make("Hopper", 1, seed=1.5)


def test_humanoid_runs_newton_instead_of_pgs():
    """MuJoCo Warp has no PGS solver; gymnasium's humanoid.xml asks for it."""
    assert gym.make("Humanoid-v5").unwrapped.model.opt.solver == mujoco.mjtSolver.mjSOL_PGS
    env = make("Humanoid", 1)
    assert int(env._m.opt.solver) == int(mujoco.mjtSolver.mjSOL_NEWTON)


# ----------------------------------------------------------------------------------------- parity

# From the same state and action, one step. MuJoCo Warp runs in float32 and C MuJoCo in float64,
# through 4-5 substeps with contacts and a constraint solve, so we compare with
# |warp - gymnasium| <= 1e-3 + 1e-3 |gymnasium|. Measured worst relative error per task (over
# 150-300 steps of random actions): HalfCheetah 5e-5, Hopper 2e-6, Walker2d 8e-5, Ant 7e-6
# (steps without steep capsule contacts, below), Humanoid 5e-4 (its contact forces cfrc_ext:
# Newton vs gymnasium's PGS; every other Humanoid term within 4e-5). Terminations must be equal.
TOL = dict(rtol=1e-3, atol=1e-3)
PARITY_STEPS = {"HalfCheetah": 100, "Hopper": 200, "Walker2d": 200, "Ant": 160, "Humanoid": 150}


class SteepCapsuleContacts:
    """Records whether C MuJoCo saw a plane-capsule contact with the capsule steeper than ~55
    degrees, at any stage of a step (``mjcb_control`` runs in every forward pass, RK4 stages
    included, after collision detection).

    There MuJoCo Warp (as MJX; mujoco issue #2774) takes a fixed contact frame where C MuJoCo
    aligns the frame's first tangent with the capsule axis: the pyramidal friction cone is then
    rotated and the friction forces differ. Ant's lower legs are often that steep. Measured with
    mujoco_warp patched to C's rule: Ant matches to 2e-5 on every step; unpatched, its steps with
    such contacts differ by up to 100% (relative) in velocities and clipped contact forces, and the
    others match to 7e-6. So in 3D tasks (Ant, Humanoid) we compare only steps without them.
    """

    def __init__(self, model):
        self.plane = model.geom_type == mujoco.mjtGeom.mjGEOM_PLANE
        self.capsule = model.geom_type == mujoco.mjtGeom.mjGEOM_CAPSULE
        self.seen = False

    def __call__(self, m, d):
        for c in range(d.ncon):
            g1, g2 = d.contact.geom[c]
            if self.plane[g1] and self.capsule[g2]:
                n, axis = d.geom_xmat[g1].reshape(3, 3)[:, 2], d.geom_xmat[g2].reshape(3, 3)[:, 2]
                if np.linalg.norm(axis - n * n.dot(axis)) < 0.6:  # MuJoCo Warp's switch is at 0.5
                    self.seen = True


@pytest.mark.parametrize("task", TASKS)
def test_matches_gymnasium_v5_from_the_same_state(task):
    """Two gymnasium v5 envs and a 2-world warp env; before every step both sides are set to the
    gymnasium envs' states (``set_state``: qpos, qvel, then forward), then take the same actions."""
    refs = [gym.make(f"{task}-v5").unwrapped for _ in range(2)]
    for i, ref in enumerate(refs):
        ref.reset(seed=i)
    env = make(task, 2)
    env.reset()
    steep = SteepCapsuleContacts(refs[0].model) if task in ("Ant", "Humanoid") else None
    compared = terminations = 0
    actions = uniform_actions(env.single_action_space, PARITY_STEPS[task], 2, seed=3)
    try:
        if steep is not None:
            mujoco.set_mjcb_control(steep)
        for a in actions:
            for ref in refs:
                ref.set_state(ref.data.qpos.copy(), ref.data.qvel.copy())
            env.set_state(torch.as_tensor(np.stack([r.data.qpos for r in refs])),
                          torch.as_tensor(np.stack([r.data.qvel for r in refs])))
            if steep is not None:
                steep.seen = False
            expected = [ref.step(a[i].numpy()) for i, ref in enumerate(refs)]
            obs, rewards, terminated, truncated, info = env.step(a)
            exp_obs = torch.as_tensor(np.stack([e[0] for e in expected]), dtype=torch.float32)
            exp_rew = torch.as_tensor([e[1] for e in expected], dtype=torch.float32)
            exp_term = torch.as_tensor([e[2] for e in expected])
            if steep is None or not steep.seen:
                torch.testing.assert_close(info["final_obs"], exp_obs, **TOL)
                torch.testing.assert_close(rewards, exp_rew, **TOL)
                assert torch.equal(terminated, exp_term)
                compared += 1
            assert not truncated.any()
            for i, ref in enumerate(refs):
                if expected[i][2]:
                    terminations += 1
                    ref.reset(seed=100 + terminations)
    finally:
        if steep is not None:
            mujoco.set_mjcb_control(None)
    assert compared >= len(actions) // 4, f"only {compared} of {len(actions)} steps compared"
    if task in ("Hopper", "Walker2d", "Humanoid"):
        assert terminations > 0, "these actions should end some episodes, so terminations get compared"


@pytest.mark.parametrize("task", ["HalfCheetah", "Hopper", "Walker2d", "Humanoid"])
def test_matches_gymnasium_v5_for_a_few_steps_unsynchronised(task):
    """Without re-setting the state between steps, the rewarded displacement is measured, as in
    gymnasium, from positions computed before the last substep's integration (Humanoid's centre
    of mass): they agree for the first steps, before float32 vs float64 drift shows. Not Ant: its
    legs land on steep capsule contacts in the first steps (see SteepCapsuleContacts)."""
    ref = gym.make(f"{task}-v5").unwrapped
    ref.reset(seed=0)
    env = make(task, 1)
    env.reset()
    env.set_state(torch.as_tensor(ref.data.qpos[None]), torch.as_tensor(ref.data.qvel[None]))
    for a in uniform_actions(env.single_action_space, 4, 1, seed=5):
        obs, reward, terminated, _, _ = ref.step(a[0].numpy())
        w_obs, w_reward, w_terminated, _, _ = env.step(a)
        torch.testing.assert_close(w_obs[0], torch.as_tensor(obs, dtype=torch.float32), **TOL)
        torch.testing.assert_close(w_reward[0], torch.tensor(reward, dtype=torch.float32), **TOL)
        assert bool(w_terminated[0]) == terminated


def test_missing_packages_name_the_extra(monkeypatch):
    assert warp_available()
    monkeypatch.setitem(sys.modules, "mujoco_warp", None)  # import mujoco_warp now raises ImportError
    assert not warp_available()
    with pytest.raises(ImportError, match=r'mujoco-warp.*pip install "podracer-rl\[warp\]"'):
        make("Hopper", 1)


def test_kernels_are_cached_on_disk():
    import os

    import warp as wp

    make("Hopper", 1).reset()
    cache = wp.config.kernel_cache_dir
    assert cache and os.path.isdir(cache) and any(name.startswith("wp_") for name in os.listdir(cache))
