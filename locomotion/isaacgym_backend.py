"""Backend ``"isaacgym"``: IsaacGymEnvs' Ant and Humanoid (NVIDIA Isaac Gym Preview 4, PhysX on
the GPU) in the batched-tensor protocol.

**Not gymnasium v5.** IsaacGymEnvs' Ant and Humanoid are its own tasks: other models
(``nv_ant.xml``, ``nv_humanoid.xml``), other observations (Ant 60 numbers, Humanoid 108, against
v5's 105 and 348) and other rewards (progress towards a far target, heading and up bonuses,
energy costs). Returns do not compare with backend ``"envpool"``, ``"gymnasium"`` or
``"warp"``; ``env.metadata["definitions"]`` says so. IsaacGymEnvs has no HalfCheetah, Hopper or
Walker2d.

**What it takes to run.** Isaac Gym Preview 4 is a tarball from NVIDIA with binaries for
Python 3.6-3.8 only (IsaacGymEnvs' ``setup.py`` lists 3.6, 3.7, 3.8), while Podracer needs
Python >= 3.10: as released the two do not share an environment, so this adapter runs only with
an Isaac Gym build for a newer Python. It cannot run here (no GPU, no Isaac Gym); what is tested
is the conversion, against a fake ``VecTask`` that follows IsaacGymEnvs' step order line by line
(``tests/test_isaac_adapters.py``). Isaac Gym must also be imported before torch (its
``gymdeps`` check raises "PyTorch was imported before isaacgym modules"), and ``locomotion``
imports torch, so ``import isaacgym`` has to be the first import of the script.

Autoreset timing, read from IsaacGymEnvs (github.com/isaac-sim/IsaacGymEnvs at aeed298, 2023-10-18):

- ``VecTask.step`` (``tasks/base/vec_task.py`` L360-408): ``pre_physics_step(actions)``, the
  physics substeps, ``post_physics_step()``, then ``timeout_buf = (progress_buf >=
  max_episode_length - 1) & (reset_buf != 0)`` (L394), ``extras["time_outs"] = timeout_buf``
  (L400), and it returns ``({"obs": clamp(obs_buf)}, rew_buf, reset_buf, extras)`` (L402-408):
  its own ``rew_buf`` and ``reset_buf`` tensors, not copies.
- ``Ant.post_physics_step`` (``tasks/ant.py`` L287-297; ``humanoid.py`` L287-296 is the same):
  ``progress_buf += 1``, then ``reset_idx`` of the sub-envs *already* flagged in ``reset_buf``,
  then ``compute_observations()`` and ``compute_reward()``, which flags a sub-env that fell or
  whose ``progress_buf >= max_episode_length - 1`` (``ant.py`` L365-369). ``reset_idx``
  (L252-279) writes the start state and zeroes ``progress_buf`` and ``reset_buf`` of those
  sub-envs.

So a sub-env that ends at step t comes back with its *last* observation and ``reset_buf`` 1; it
is reset inside step t+1, after that step's action was simulated on the ended state (wasted),
and step t+1 returns its reset observation with a reward computed on it: a *next-step*
autoreset, as envpool's. (``VecTask.reset()``, L426-438, computes nothing; it returns whatever
``obs_buf`` holds.)

What this module does, to give the protocol's *same-step* autoreset:

- After ``VecTask.step`` it copies the outputs first (``reset_idx`` zeroes ``reset_buf`` in
  place), keeps the returned observations as ``info["final_obs"]`` (the true last ones), and
  resets the ended sub-envs at once the way ``post_physics_step`` would one step later:
  ``task.reset_idx(ids)`` then ``task.compute_observations()``, taking their rows of
  ``obs_buf`` (clamped as ``VecTask`` does) as ``obs``. ``reset_idx`` zeroed their
  ``reset_buf``, so the next ``VecTask.step`` steps them as ordinary sub-envs: no wasted
  action, no second reset. The extra ``compute_observations`` recomputes the other sub-envs'
  observations from an unchanged state (the same values) and sets their ``prev_potentials``
  to ``potentials``; the next step sets ``prev_potentials`` from ``potentials`` again before
  its progress reward, so rewards are unchanged.
- ``reset()`` resets every sub-env the same way (``VecTask.reset()`` would return stale
  buffers). Reset observations report a zero previous action (Ant's and Humanoid's
  observations end with the last action; the task has no ``actions`` before its first step).
- ``terminated = reset_buf & ~time_outs``, ``truncated = time_outs``. An episode that falls on
  its last allowed step is reported as truncated only (``time_outs`` cannot tell).
- Time limit: with this reset a sub-env's ``progress_buf`` is k after k steps, and
  IsaacGymEnvs truncates at ``max_episode_length - 1``; we set ``max_episode_length`` to
  ``max_episode_steps + 1`` so that episodes are ``max_episode_steps`` steps (default 1000).
- Seeding: IsaacGymEnvs draws reset noise from torch's global generator (``torch_rand_float``)
  and ``isaacgymenvs.make`` does not seed it; ``reset(seed=s)`` calls ``torch.manual_seed(s)``
  (global, as IsaacGymEnvs' own ``set_seed``). Sub-envs are not seeded one by one.
- One env per process: IsaacGymEnvs keeps one simulation per process (``_create_sim_once``,
  L58-64), so a second env (an eval env) is refused; evaluate in another process.
- Observation noise from domain randomization (off by default) is not added to reset rows;
  force-sensor readings in a reset observation are from the last simulated step, as in
  IsaacGymEnvs' own reset observations.
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

ISAACGYM_TASKS = {"ant": "Ant", "humanoid": "Humanoid"}  # our task key -> IsaacGymEnvs' task name
ISAACGYM_INSTALL_HINT = (
    "download Isaac Gym Preview 4 from https://developer.nvidia.com/isaac-gym (a tarball; binaries for "
    "Python 3.6-3.8 only, while Podracer needs >= 3.10), then: pip install -e isaacgym/python; "
    "git clone https://github.com/isaac-sim/IsaacGymEnvs && pip install -e IsaacGymEnvs"
)
IMPORT_ORDER_HINT = (
    "Isaac Gym must be imported before torch: make `import isaacgym` the first import of your script, before "
    "torch, podracer and locomotion (which import torch), then call locomotion.make_env(..., backend='isaacgym')"
)


def isaacgym_definitions(task: Task) -> str:
    """What ``task`` is on this backend: IsaacGymEnvs' own, not gymnasium v5."""
    return (f"IsaacGymEnvs' own {task.name}, not gymnasium v5 (other model, observations and rewards): "
            f"returns do not compare with backend 'envpool', 'gymnasium' or 'warp'")


def isaacgym_task_name(task: Task) -> str:
    """IsaacGymEnvs' name for ``task``; a task it lacks is an error saying which it has."""
    if task.key not in ISAACGYM_TASKS:
        raise ValueError(f"IsaacGymEnvs has no {task.name} (it has {sorted(ISAACGYM_TASKS.values())} among ours); "
                         f"use backend='envpool', 'gymnasium' or 'warp' for {task.name}")
    return ISAACGYM_TASKS[task.key]


def isaacgym_available(task: Task | None = None) -> bool:
    """True when ``isaacgym`` and ``isaacgymenvs`` are installed (found without importing them),
    ``task`` (if given) is one IsaacGymEnvs has, and Isaac Gym can still be imported in this
    process: it was imported before torch, or torch is not imported yet."""
    if task is not None and task.key not in ISAACGYM_TASKS:
        return False
    if importlib.util.find_spec("isaacgym") is None or importlib.util.find_spec("isaacgymenvs") is None:
        return False
    return "isaacgym" in sys.modules or "torch" not in sys.modules


def import_isaacgymenvs() -> Any:
    """``isaacgymenvs`` (after ``isaacgym``), or an ``ImportError`` that says how to install them
    or, when torch came first, how to order the imports."""
    try:
        importlib.import_module("isaacgym")
        return importlib.import_module("isaacgymenvs")
    except ImportError as err:
        if "imported before isaacgym" in str(err):
            raise ImportError(f"{IMPORT_ORDER_HINT} (isaacgym said: {err})") from err
        raise ImportError(f"the 'isaacgym' locomotion backend needs NVIDIA Isaac Gym Preview 4 and IsaacGymEnvs "
                          f"({err}); install: {ISAACGYM_INSTALL_HINT}") from err


# ---------------------------------------------------------------- the conversion (pure)


def from_isaacgym_step(obs_dict: dict, rew_buf: torch.Tensor, reset_buf: torch.Tensor, extras: dict,
                       device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``VecTask.step``'s outputs as ``(last_obs, rewards, terminated, truncated)``, copied onto
    ``device`` before anything resets: ``VecTask`` returns its own buffers and ``reset_idx``
    zeroes ``reset_buf`` in place. ``last_obs`` holds every sub-env's observation after the
    step, the last one of those that ended (IsaacGymEnvs resets them one step later)."""
    last_obs = obs_dict["obs"].to(device=device, dtype=torch.float32, copy=True)  # (N, obs_dim)
    rewards = rew_buf.to(device=device, dtype=torch.float32, copy=True)  # (N,)
    done = reset_buf.to(device) != 0  # (N,) bool, a new tensor
    truncated = (extras["time_outs"].to(device) != 0) & done  # vec_task.py L394 already ands with reset_buf
    terminated = done & ~truncated
    return last_obs, rewards, terminated, truncated


def same_step_autoreset(last_obs: torch.Tensor, done: torch.Tensor,
                        reset_obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``(obs, info)`` of a same-step autoreset: ``obs`` holds the reset observation of each
    ended sub-env (``done``) and ``last_obs`` elsewhere; ``info["final_obs"]`` is ``last_obs``
    (dense, (N, obs_dim)) and ``info["_final_obs"]`` the mask."""
    obs = torch.where(done.unsqueeze(-1), reset_obs, last_obs)  # (N, obs_dim), a new tensor
    return obs, {"final_obs": last_obs, "_final_obs": done}


# ---------------------------------------------------------------- the env


class IsaacGymVecEnv:
    """An IsaacGymEnvs ``VecTask`` (Ant or Humanoid) in the batched-tensor protocol, with
    same-step autoreset and a dense ``final_obs`` (see the module docstring for how, and why
    its tasks are not gymnasium v5's). Build it with
    ``locomotion.make_env(task, n, backend="isaacgym")``; this class takes a created task."""

    backend = "isaacgym"

    def __init__(self, vec_task: Any, task: Task, device: str | torch.device = "cpu", seed: int | None = None,
                 max_episode_steps: int | None = None, validate_actions: bool = True):
        self._vec_task = vec_task
        self._task = task
        self.task = task.key  # make_agent picks presets by this name (tuned on v5: a starting point here)
        self.num_envs = int(vec_task.num_envs)
        self.device = resolve_device(device)
        self.validate_actions = validate_actions
        self.max_episode_steps = int(max_episode_steps or task.max_episode_steps)
        vec_task.max_episode_length = self.max_episode_steps + 1  # truncates at progress >= length - 1
        self.metadata: dict[str, Any] = {"autoreset_mode": AUTORESET_MODE, "definitions": isaacgym_definitions(task)}
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (int(vec_task.num_obs),), np.float32)
        act = vec_task.action_space  # an old-gym Box(-1, 1) (vec_task.py L113); step clamps to clipActions
        self.single_action_space = gym.spaces.Box(np.asarray(act.low, np.float32), np.asarray(act.high, np.float32),
                                                  dtype=np.float32)
        self._first_seed = seed

    def _observe_reset(self, ids: torch.Tensor) -> torch.Tensor:
        """Reset sub-envs ``ids`` as ``post_physics_step`` does (``reset_idx``, then
        ``compute_observations``) and return every sub-env's observation, (N, obs_dim)."""
        vt = self._vec_task
        vt.reset_idx(ids)
        if getattr(vt, "actions", None) is None:  # set by pre_physics_step: absent before the first step
            vt.actions = torch.zeros(self.num_envs, int(vt.num_actions), device=vt.device)
        vt.actions[ids] = 0.0  # a new episode's first observation reports no previous action
        vt.compute_observations()
        return torch.clamp(vt.obs_buf, -vt.clip_obs, vt.clip_obs).to(device=self.device, dtype=torch.float32,
                                                                       copy=True)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[torch.Tensor, dict]:
        """Reset every sub-env; ``seed`` seeds torch's global generator, from which IsaacGymEnvs
        draws its reset noise (the seed given at construction applies to the first reset)."""
        if seed is None:
            seed = self._first_seed
        self._first_seed = None
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
                raise ValueError(f"seed must be a whole number or None, got {seed!r}")
            torch.manual_seed(int(seed))
        ids = torch.arange(self.num_envs, device=self._vec_task.device)
        return self._observe_reset(ids), {}

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        """One step of every sub-env; ``info`` holds only ``final_obs`` and ``_final_obs``
        (IsaacGymEnvs' extras are dropped)."""
        if self.validate_actions:
            check_actions(actions, self.num_envs, self.single_action_space, self.device)
        obs_dict, rew_buf, reset_buf, extras = self._vec_task.step(actions)
        last_obs, rewards, terminated, truncated = from_isaacgym_step(obs_dict, rew_buf, reset_buf, extras,
                                                                      self.device)
        done = terminated | truncated  # (N,)
        reset_obs = last_obs
        if done.any():  # reset the ended sub-envs now, not inside the next step (module docstring)
            reset_obs = self._observe_reset(done.to(self._vec_task.device).nonzero(as_tuple=False).flatten())
        obs, info = same_step_autoreset(last_obs, done, reset_obs)
        return obs, rewards, terminated, truncated, info

    def close(self) -> None:
        """Drop the task. IsaacGymEnvs has no way to free its simulation: it lasts until the
        process ends."""
        self._vec_task = None

    def __repr__(self) -> str:
        return f"IsaacGymVecEnv({ISAACGYM_TASKS[self.task]}, num_envs={self.num_envs}, device={self.device})"


def make_isaacgym_env(task: Task, num_envs: int, device: str | torch.device = "cuda", seed: int | None = None,
                      max_episode_steps: int | None = None, **make_kwargs: Any) -> IsaacGymVecEnv:
    """``task`` (Ant or Humanoid) from ``isaacgymenvs.make``, headless, simulated and returned
    on ``device``. ``make_kwargs`` go to ``isaacgymenvs.make`` (``cfg=``, ``graphics_device_id=``,
    ``force_render=``...)."""
    name = isaacgym_task_name(task)
    if isinstance(num_envs, bool) or not isinstance(num_envs, numbers.Integral) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive whole number, got {num_envs!r}")
    isaacgymenvs = import_isaacgymenvs()
    vec_task_module = importlib.import_module("isaacgymenvs.tasks.base.vec_task")
    if getattr(vec_task_module, "EXISTING_SIM", None) is not None:
        raise RuntimeError("IsaacGymEnvs keeps one simulation per process (vec_task.py _create_sim_once) and this "
                           "process already has one: a second env would share it. Evaluate on the same env, or "
                           "build the second env in another process")
    device = resolve_device(device)
    kwargs = {"graphics_device_id": -1, "headless": True, "force_render": False, **make_kwargs}
    vec_task = isaacgymenvs.make(seed=-1 if seed is None else int(seed), task=name, num_envs=int(num_envs),
                                 sim_device=str(device), rl_device=str(device), **kwargs)
    return IsaacGymVecEnv(vec_task, task, device=device, seed=seed, max_episode_steps=max_episode_steps)


__all__ = ["ISAACGYM_TASKS", "IsaacGymVecEnv", "from_isaacgym_step", "isaacgym_available", "make_isaacgym_env",
           "same_step_autoreset"]
