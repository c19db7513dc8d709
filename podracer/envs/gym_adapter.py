"""Turn any gymnasium vector env (numpy) into the batched-tensor protocol.

Every gymnasium task then works with Podracer's agents and training loop. The adapter asks
gymnasium for same-step autoreset and converts its object-array ``final_obs`` into the dense
tensor the protocol uses. Sub-env i is seeded with seed + i (gymnasium's rule). gymnasium's other
info keys pass through as numpy arrays; on a row whose episode ended they describe the reset, and
the ended step's own are in ``info["final_info"]`` (gymnasium's, with its ``_`` masks).
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch

from podracer.envs.base import AUTORESET_MODE, check_actions, resolve_device


class GymVecEnvAdapter:
    metadata: dict[str, Any] = {"autoreset_mode": AUTORESET_MODE}
    task: str | None = None  # no Podracer preset: make_agent uses the agents' batched-env defaults

    def __init__(self, vec_env: gym.vector.VectorEnv, device: str | torch.device = "cpu", validate_actions: bool = True):
        mode = vec_env.metadata.get("autoreset_mode")
        if mode not in (gym.vector.AutoresetMode.SAME_STEP, AUTORESET_MODE):
            raise ValueError(
                f"expected a gymnasium vector env with autoreset_mode=SAME_STEP, got {mode}; create it with "
                f"gym.make_vec(..., vector_kwargs={{'autoreset_mode': gym.vector.AutoresetMode.SAME_STEP}}) "
                f"or use podracer.envs.make_gym_env"
            )
        self.vec_env = vec_env
        self.num_envs = vec_env.num_envs
        self.device = resolve_device(device)
        self.validate_actions = validate_actions
        self.single_observation_space = vec_env.single_observation_space
        self.single_action_space = vec_env.single_action_space
        self._obs_shape = (self.num_envs, int(np.prod(self.single_observation_space.shape)))

    def _to_tensor(self, x: np.ndarray, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.as_tensor(np.asarray(x), dtype=dtype, device=self.device)

    def reset(self, seed: int | None = None, options: dict | None = None):
        obs, info = self.vec_env.reset(seed=seed, options=options)
        return self._to_tensor(obs).reshape(self._obs_shape), info

    def step(self, actions: torch.Tensor):
        if self.validate_actions:
            check_actions(actions, self.num_envs, self.single_action_space, self.device)
        obs, rewards, terminated, truncated, info = self.vec_env.step(actions.detach().cpu().numpy())
        obs_t = self._to_tensor(obs).reshape(self._obs_shape)
        mask = np.asarray(info.get("_final_obs", np.zeros(self.num_envs, dtype=bool)))
        final_obs = obs_t.clone()
        if mask.any():
            dense = np.stack([np.asarray(info["final_obs"][i]).reshape(-1) for i in np.flatnonzero(mask)])
            final_obs[torch.as_tensor(np.flatnonzero(mask), device=self.device)] = self._to_tensor(dense)
        # gymnasium's final_info stays (the ended step's own extras: on an ending row the other keys
        # already hold the reset's); final_obs becomes the protocol's dense tensor.
        info = {k: v for k, v in info.items() if k not in ("final_obs", "_final_obs")}
        info["final_obs"] = final_obs
        info["_final_obs"] = self._to_tensor(mask, torch.bool)
        return (obs_t, self._to_tensor(rewards), self._to_tensor(terminated, torch.bool),
                self._to_tensor(truncated, torch.bool), info)

    def close(self) -> None:
        self.vec_env.close()

    def __repr__(self) -> str:
        return f"GymVecEnvAdapter({self.vec_env}, device={self.device})"


def same_step_vector_env(env_id: str | Callable[[], gym.Env], num_envs: int = 1, vectorization_mode: str = "sync",
                         **kwargs: Any) -> gym.vector.VectorEnv:
    """A gymnasium vector env with same-step autoreset (the protocol's), from a registered id
    (``gym.make_vec``, ``kwargs`` to the env) or an env constructor. The one place both
    ``make_gym_env`` and a domain's gymnasium-backed envs build one."""
    vector_kwargs = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    if callable(env_id):
        cls = gym.vector.SyncVectorEnv if vectorization_mode == "sync" else gym.vector.AsyncVectorEnv
        return cls([env_id] * num_envs, **vector_kwargs)
    return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=vectorization_mode,
                        vector_kwargs=vector_kwargs, **kwargs)


def make_gym_env(env_id: str | Callable[[], gym.Env], num_envs: int = 1, device: str | torch.device = "cpu",
                 vectorization_mode: str = "sync", **kwargs: Any) -> GymVecEnvAdapter:
    """``gym.make_vec`` with same-step autoreset, wrapped into the tensor protocol."""
    return GymVecEnvAdapter(same_step_vector_env(env_id, num_envs, vectorization_mode, **kwargs), device=device)
