"""Backend ``"isaaclab"``: Isaac Lab's direct-workflow Ant and Humanoid (``Isaac-Ant-Direct-v0``,
``Isaac-Humanoid-Direct-v0``; Isaac Sim's PhysX on an NVIDIA RTX GPU) in the batched-tensor
protocol.

**Not gymnasium v5.** Isaac Lab's Ant and Humanoid are its own tasks, ported from IsaacGymEnvs:
other models, observations (Ant 36 numbers, Humanoid 75, against v5's 105 and 348) and rewards
(progress towards a far target, heading and up bonuses, energy costs). Returns do not compare
with backend ``"envpool"``, ``"gymnasium"`` or ``"warp"``; ``env.metadata["definitions"]`` says
so. Isaac Lab has no HalfCheetah, Hopper or Walker2d.

**What it takes to run.** ``pip install "isaaclab[isaacsim,all]" --extra-index-url
https://pypi.nvidia.com`` (Isaac Lab 2.2/2.3: Python 3.11, with Isaac Sim 5; Linux with GLIBC
2.35+), an NVIDIA RTX GPU and its driver. It cannot run here (no GPU); what is tested is the
conversion, against a fake ``DirectRLEnv`` that follows Isaac Lab's step order line by line
(``tests/test_isaac_adapters.py``). Isaac Sim must be started (``AppLauncher``) before Isaac
Lab's task modules are imported; ``make_isaaclab_env`` does that, headless, unless an app is
already running.

Autoreset timing, read from Isaac Lab (``source/isaaclab/isaaclab/envs/direct_rl_env.py``,
``DirectRLEnv.step``; ``direct/locomotion/locomotion_env.py`` for Ant and Humanoid):

- ``step`` applies the action for ``decimation`` physics steps, ``episode_length_buf += 1``,
  ``reset_terminated[:], reset_time_outs[:] = _get_dones()`` (``LocomotionEnv._get_dones``:
  ``died = torso height < termination_height``, ``time_out = episode_length_buf >=
  max_episode_length - 1``), ``reward_buf = _get_rewards()``, then ``_reset_idx`` of the ended
  sub-envs, then ``obs_buf = _get_observations()`` and returns ``(obs_buf, reward_buf,
  reset_terminated, reset_time_outs, extras)``: ``reset_terminated`` and ``reset_time_outs``
  are the env's own buffers, overwritten in place next step.
- So the autoreset is already *same-step*: an ended sub-env's row of ``obs["policy"]`` is its
  reset observation. Isaac Lab does not return the last observation of the ended episode
  (nothing in ``extras``; its RL wrappers bootstrap time-outs from the value of the reset
  observation).

What this module does:

- ``terminated``, ``truncated`` are Isaac Lab's ``reset_terminated``, ``reset_time_outs``
  (copied). As in gymnasium, a fall on the last allowed step sets both.
- ``final_obs``: ``_get_observations`` of ``LocomotionEnv`` only reads values that
  ``_get_dones`` computed, so calling it just before ``_reset_idx`` gives the ended sub-envs'
  true last observations. We wrap the env's ``_reset_idx`` (an instance attribute; the class is
  untouched) to do that during our ``step``. ``capture_final_obs=False`` turns this off; then
  ``info["final_obs"]`` holds, for ended sub-envs, their *reset* observation (what Isaac Lab
  exposes), so a learner bootstrapping truncations with V(final_obs) uses the reset state's
  value, as Isaac Lab's own wrappers do: a biased target at every time-out.
- Actions: Isaac Lab declares an unbounded action space, and its rl_games configs for these
  tasks clip actions to [-1, 1] (``clip_actions: 1.0``); we declare ``Box(-1, 1)`` and clip.
- Time limit: ``episode_length_s`` is set so that episodes are ``max_episode_steps`` steps
  (default 1000; Isaac Lab's own is 15 s, 900 steps).
- Seeding: ``reset(seed=s)`` is Isaac Lab's ``reset(seed=s)``, which seeds torch, numpy and
  Python globally (Ant's and Humanoid's resets have no noise anyway).
- One env per process: Isaac Lab keeps one simulation context per process; a second env (an
  eval env) must live in another process, or after ``close()`` of the first.
"""

from __future__ import annotations

import importlib
import importlib.util
import numbers
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from locomotion.tasks import Task
from podracer.envs import AUTORESET_MODE, check_actions, resolve_device

ISAACLAB_TASKS = {"ant": "Isaac-Ant-Direct-v0", "humanoid": "Isaac-Humanoid-Direct-v0"}  # our key -> Isaac Lab id
ISAACLAB_INSTALL_HINT = ('pip install "isaaclab[isaacsim,all]" --extra-index-url https://pypi.nvidia.com '
                         "(Python 3.11, an NVIDIA RTX GPU; see https://isaac-sim.github.io/IsaacLab)")
_APP: list[Any] = []  # the AppLauncher we started, kept alive for the process


def isaaclab_definitions(task: Task) -> str:
    """What ``task`` is on this backend: Isaac Lab's own, not gymnasium v5."""
    return (f"Isaac Lab's own {task.name} ({ISAACLAB_TASKS.get(task.key, '?')}), not gymnasium v5 (other model, "
            f"observations and rewards): returns do not compare with backend 'envpool', 'gymnasium' or 'warp'")


def isaaclab_task_id(task: Task) -> str:
    """Isaac Lab's id for ``task``; a task it lacks is an error saying which it has."""
    if task.key not in ISAACLAB_TASKS:
        raise ValueError(f"Isaac Lab has no {task.name} (it has Ant and Humanoid among ours); "
                         f"use backend='envpool', 'gymnasium' or 'warp' for {task.name}")
    return ISAACLAB_TASKS[task.key]


def isaaclab_available(task: Task | None = None) -> bool:
    """True when ``isaaclab`` and ``isaaclab_tasks`` are installed (found without importing
    them) and ``task`` (if given) is one Isaac Lab has."""
    if task is not None and task.key not in ISAACLAB_TASKS:
        return False
    return importlib.util.find_spec("isaaclab") is not None and importlib.util.find_spec("isaaclab_tasks") is not None


def _import_isaaclab(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"the 'isaaclab' locomotion backend needs Isaac Lab on Isaac Sim ({err}); install it "
                          f"with: {ISAACLAB_INSTALL_HINT}") from err


def _simulation_app_running() -> bool:
    """True when an Isaac Sim app already runs in this process (``omni.kit.app`` is only loaded
    once one has started; nothing is imported here)."""
    kit = sys.modules.get("omni.kit.app")
    try:
        app = kit.get_app() if kit is not None else None
        return app is not None and bool(app.is_running())
    except Exception:  # an app module in a state we do not know: assume none runs
        return False


# ---------------------------------------------------------------- the conversion (pure)


def from_isaaclab_step(obs_dict: dict, reward: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor,
                       last_obs: torch.Tensor | None, device: torch.device
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """``DirectRLEnv.step``'s outputs in the protocol, copied onto ``device`` (Isaac Lab reuses
    its buffers). Isaac Lab's autoreset is already same-step: ``obs`` holds the reset
    observation of each ended sub-env. ``last_obs`` ((N, obs_dim), every sub-env's observation
    just before the reset, or ``None``) fills ``info["final_obs"]`` for the ended sub-envs;
    with ``None`` those rows are their reset observation (all Isaac Lab itself exposes)."""
    obs = obs_dict["policy"].to(device=device, dtype=torch.float32, copy=True)  # (N, obs_dim)
    rewards = reward.to(device=device, dtype=torch.float32, copy=True)  # (N,)
    terminated = terminated.to(device=device, dtype=torch.bool, copy=True)  # (N,)
    truncated = truncated.to(device=device, dtype=torch.bool, copy=True)  # (N,)
    done = terminated | truncated
    final_obs = obs.clone()  # (N, obs_dim)
    if last_obs is not None:
        final_obs[done] = last_obs.to(device=device, dtype=torch.float32)[done]
    return obs, rewards, terminated, truncated, {"final_obs": final_obs, "_final_obs": done}


# ---------------------------------------------------------------- the env


class IsaacLabVecEnv:
    """An Isaac Lab direct-workflow env (Ant or Humanoid) in the batched-tensor protocol (see
    the module docstring for the autoreset, ``final_obs`` and why its tasks are not gymnasium
    v5's). Build it with ``locomotion.make_env(task, n, backend="isaaclab")``; this class takes
    a created env (``gym.make`` of an Isaac Lab task)."""

    backend = "isaaclab"

    def __init__(self, env: Any, task: Task, device: str | torch.device = "cuda", seed: int | None = None,
                 max_episode_steps: int | None = None, validate_actions: bool = True, capture_final_obs: bool = True):
        self._env = env
        self._direct = env.unwrapped  # the DirectRLEnv under gymnasium's wrappers
        self._task = task
        self.task = task.key  # make_agent picks presets by this name (tuned on v5: a starting point here)
        self.num_envs = int(self._direct.num_envs)
        self.device = resolve_device(device)
        self.validate_actions = validate_actions
        self.max_episode_steps = int(max_episode_steps or task.max_episode_steps)
        self.metadata: dict[str, Any] = {"autoreset_mode": AUTORESET_MODE, "definitions": isaaclab_definitions(task)}
        obs_shape = self._direct.single_observation_space["policy"].shape
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, obs_shape, np.float32)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, self._direct.single_action_space.shape, np.float32)
        self._first_seed = seed
        self._capturing = False
        self._last_obs: torch.Tensor | None = None
        if capture_final_obs:
            self._keep_last_obs_at_reset()

    def _keep_last_obs_at_reset(self) -> None:
        """Wrap the env's ``_reset_idx`` so that, during our ``step``, every sub-env's
        observation is read just before the ended ones are reset (module docstring)."""
        direct, reset_idx = self._direct, self._direct._reset_idx

        def reset_idx_keeping_last_obs(env_ids: Any) -> Any:
            if self._capturing:
                self._last_obs = direct._get_observations()["policy"].clone()  # (N, obs_dim), before the reset
            return reset_idx(env_ids)

        direct._reset_idx = reset_idx_keeping_last_obs

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[torch.Tensor, dict]:
        """Reset every sub-env (Isaac Lab's reset; ``seed`` seeds torch, numpy and Python
        globally; the seed given at construction applies to the first reset)."""
        if seed is None:
            seed = self._first_seed
        self._first_seed = None
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
            raise ValueError(f"seed must be a whole number or None, got {seed!r}")
        obs_dict, _ = self._env.reset(seed=None if seed is None else int(seed))
        return obs_dict["policy"].to(device=self.device, dtype=torch.float32, copy=True), {}

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        """One step of every sub-env; ``info`` holds only ``final_obs`` and ``_final_obs``
        (Isaac Lab's extras are dropped)."""
        if self.validate_actions:
            check_actions(actions, self.num_envs, self.single_action_space, self.device)
        self._last_obs, self._capturing = None, True
        try:
            obs_dict, reward, terminated, truncated, _ = self._env.step(actions.clamp(-1.0, 1.0))
        finally:
            self._capturing = False
        return from_isaaclab_step(obs_dict, reward, terminated, truncated, self._last_obs, self.device)

    def close(self) -> None:
        """Close the Isaac Lab env (its simulation context); the Isaac Sim app keeps running
        until the process ends."""
        self._env.close()

    def __repr__(self) -> str:
        return f"IsaacLabVecEnv({ISAACLAB_TASKS[self.task]}, num_envs={self.num_envs}, device={self.device})"


def make_isaaclab_env(task: Task, num_envs: int, device: str | torch.device = "cuda", seed: int | None = None,
                      max_episode_steps: int | None = None, headless: bool = True,
                      **cfg_overrides: Any) -> IsaacLabVecEnv:
    """``task`` (Ant or Humanoid) as Isaac Lab's direct env on ``device``: starts Isaac Sim
    (``AppLauncher``, headless) unless it runs, then ``gym.make(id, cfg=parse_env_cfg(...))``.
    ``cfg_overrides`` set fields of the task's config (``action_scale=0.5``...)."""
    task_id = isaaclab_task_id(task)
    if isinstance(num_envs, bool) or not isinstance(num_envs, numbers.Integral) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive whole number, got {num_envs!r}")
    device = resolve_device(device)
    app_launcher = _import_isaaclab("isaaclab.app")
    if not _simulation_app_running():
        _APP.append(app_launcher.AppLauncher(headless=headless, device=str(device)))
    _import_isaaclab("isaaclab_tasks")  # registers the tasks with gymnasium
    parse_env_cfg = _import_isaaclab("isaaclab_tasks.utils").parse_env_cfg
    cfg = parse_env_cfg(task_id, device=str(device), num_envs=int(num_envs))
    steps = int(max_episode_steps or task.max_episode_steps)
    # Isaac Lab truncates when episode_length_buf >= ceil(episode_length_s / step_dt) - 1: this gives `steps`.
    cfg.episode_length_s = (steps + 0.5) * cfg.sim.dt * cfg.decimation
    if seed is not None:
        cfg.seed = int(seed)
    for key, value in cfg_overrides.items():
        if not hasattr(cfg, key):
            raise ValueError(f"{task_id}'s config has no field {key!r}")
        setattr(cfg, key, value)
    env = gym.make(task_id, cfg=cfg)
    return IsaacLabVecEnv(env, task, device=device, seed=seed, max_episode_steps=steps)


__all__ = ["ISAACLAB_TASKS", "IsaacLabVecEnv", "from_isaaclab_step", "isaaclab_available", "make_isaaclab_env"]
