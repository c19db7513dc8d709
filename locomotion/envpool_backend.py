"""Backend ``"envpool"``: envpool's C++ MuJoCo tasks, converted to the batched-tensor protocol.

envpool (1.2.x) registers gymnasium's v5 MuJoCo tasks under the same ids (``"HalfCheetah-v5"``).
What we checked, and what this module changes (``tests/test_locomotion.py`` covers each point):

- Definitions: from the same start state (``reset_noise_scale=0``) and the same actions,
  Hopper and Walker2d match gymnasium v5 to float precision for hundreds of steps, terminations
  included; HalfCheetah for the first ~50 (then it drifts: 1e-5 at step 60, 1e-2 by step 200,
  cleared at each reset). Ant and Humanoid match on the first steps and then drift apart: they
  are contact-rich and chaotic, and envpool embeds its own MuJoCo (3.6) while gymnasium runs the
  ``mujoco`` package (4.0 here). Same definitions; the trajectories are not bit-identical.
- Autoreset: envpool's is *next-step* (the step after an episode ends ignores its action and
  returns the reset observation with reward 0). The protocol is *same-step*, so when sub-envs
  end we reset exactly those at once (``pool.reset(env_ids)``), return their first observation
  in ``obs`` and the true last one in ``info["final_obs"]``. The next step is then an ordinary
  step for every sub-env; no action is wasted.
- Truncation: envpool reports ``trunc`` *instead of* termination when an episode terminates on
  its last allowed step; gymnasium reports both. We count episode steps ourselves and give
  envpool a time limit it never reaches, so ``terminated`` is the task's own termination and
  ``truncated`` the time limit, both set when both happen, as in gymnasium.
- Seeding: envpool seeds sub-env i with seed + i when the pool is built and ignores
  ``reset(seed=)``; so ``reset(seed=s)`` here rebuilds the pool with seed s.
"""

from __future__ import annotations

import numbers
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from locomotion.optional import import_optional
from locomotion.tasks import Task
from podracer.envs import AUTORESET_MODE, check_actions, resolve_device

_NEVER = 2**30  # the time limit handed to envpool: we truncate ourselves (see the module docstring)


def envpool_available(task: Task | None = None) -> bool:
    """True when envpool imports and registers the v5 tasks (``task``'s, or HalfCheetah's)."""
    try:
        import envpool
    except ImportError:
        return False
    return (task.gym_id if task else "HalfCheetah-v5") in envpool.list_all_envs()


def _random_seed() -> int:
    """An unseeded env is randomly seeded, as in gymnasium (envpool alone would use 42)."""
    return int(np.random.SeedSequence().entropy % 2**30)  # room for seed + i in an int32


class EnvpoolVecEnv:
    """``num_envs`` copies of a MuJoCo task in one envpool, in the batched-tensor protocol."""

    metadata: dict[str, Any] = {"autoreset_mode": AUTORESET_MODE}
    backend = "envpool"

    def __init__(self, task: Task, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                 max_episode_steps: int | None = None, num_threads: int = 0, validate_actions: bool = True,
                 **task_kwargs: Any):
        envpool = import_optional("envpool", "envpool")
        if task.gym_id not in envpool.list_all_envs():
            raise ValueError(f"envpool {envpool.__version__} has no {task.gym_id!r} (gymnasium v5 definitions); "
                             f"upgrade with: pip install 'envpool>=1.2', or use backend='gymnasium'")
        if isinstance(num_envs, bool) or not isinstance(num_envs, numbers.Integral) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive whole number, got {num_envs!r}")
        self._envpool = envpool
        self._task = task
        self._task_kwargs = {"num_threads": num_threads, **task_kwargs}
        self.task = task.key  # make_agent picks presets by this name
        self.num_envs = int(num_envs)
        self.device = resolve_device(device)
        self.validate_actions = validate_actions
        self.max_episode_steps = int(max_episode_steps or task.max_episode_steps)
        self._pool = self._make_pool(seed)
        self.single_observation_space = self._pool.single_observation_space  # float64 Box, as gymnasium's
        act = self._pool.single_action_space
        self.single_action_space = gym.spaces.Box(act.low.astype(np.float32), act.high.astype(np.float32),
                                                  dtype=np.float32)  # float32, as gymnasium's
        self._elapsed = np.zeros(self.num_envs, dtype=np.int64)  # (N,) steps into the current episode

    def _make_pool(self, seed: int | None) -> Any:
        if seed is None:
            seed = _random_seed()
        elif isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise ValueError(f"seed must be a whole number or None, got {seed!r}")
        return self._envpool.make_gymnasium(self._task.gym_id, num_envs=self.num_envs, seed=int(seed),
                                            max_episode_steps=_NEVER, **self._task_kwargs)

    def _tensor(self, x: np.ndarray, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.as_tensor(np.asarray(x), dtype=dtype).to(self.device)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[torch.Tensor, dict]:
        """Reset every sub-env; ``seed`` rebuilds the pool so that sub-env i is seeded with seed + i."""
        if seed is not None:
            old, self._pool = self._pool, self._make_pool(seed)
            old.close()
        obs, info = self._pool.reset()
        obs = obs[np.argsort(info["env_id"])]
        self._elapsed[:] = 0
        return self._tensor(obs), {}

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        """One step of every sub-env; ``info`` holds only ``final_obs`` and ``_final_obs`` (envpool's
        per-step extras are dropped)."""
        if self.validate_actions:
            check_actions(actions, self.num_envs, self.single_action_space, self.device)
        obs, rewards, terminated, _, info = self._pool.step(actions.detach().cpu().numpy().astype(np.float64))
        order = np.argsort(info["env_id"])  # sub-env order (envpool may return them out of order)
        # Copies: envpool's arrays may be overwritten by the reset below.
        obs_t = self._tensor(obs[order])  # (N, obs_dim)
        rewards_t = self._tensor(rewards[order])  # (N,)
        terminated = terminated[order]
        self._elapsed += 1
        truncated = self._elapsed >= self.max_episode_steps  # gymnasium's TimeLimit: may be set with terminated
        done = terminated | truncated
        final_obs = obs_t.clone()  # (N, obs_dim); rows of ended sub-envs keep their last observation
        if done.any():
            ended = np.flatnonzero(done).astype(np.int32)
            reset_obs, reset_info = self._pool.reset(ended)  # same-step autoreset (module docstring)
            obs_t[torch.as_tensor(reset_info["env_id"], dtype=torch.long).to(self.device)] = self._tensor(reset_obs)
            self._elapsed[ended] = 0
        info_out = {"final_obs": final_obs, "_final_obs": self._tensor(done, torch.bool)}
        return obs_t, rewards_t, self._tensor(terminated, torch.bool), self._tensor(truncated, torch.bool), info_out

    def close(self) -> None:
        self._pool.close()

    def __repr__(self) -> str:
        return f"EnvpoolVecEnv({self._task.gym_id}, num_envs={self.num_envs}, device={self.device})"


__all__ = ["EnvpoolVecEnv", "envpool_available"]
