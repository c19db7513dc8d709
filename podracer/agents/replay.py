"""A replay buffer that lives on the agent's device: preallocated tensors, batched adds, no loops.

One ``add`` stores a whole vector step, ``num_envs`` transitions at once, as at most two slice
copies (two when the write wraps around the end of the ring). ``sample`` draws indices with the
buffer's own ``torch.Generator`` (``generator``), so a seed fixes the minibatches on any device,
and one indexing op per field gathers them. Nothing leaves the device, so nothing syncs with the
host.

Timeouts: ``next_obs`` must be the env's ``info["final_obs"]`` (dense in Podracer: equal to
``obs`` where the sub-env did not end), never the auto-reset observation, and only
``terminated`` is stored as the "done" flag. A truncated step therefore bootstraps from
``gamma * Q(final_obs)``, a terminated one does not (the env protocol, ``podracer/envs/base.py``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from podracer.agents.common import restore_generator
from podracer.deprecation import deprecated_alias, renamed_keys


class Batch(NamedTuple):
    """A minibatch of replayed transitions; B is the batch size. (PPO's flattened on-policy
    rollout is another thing, ``ppo.Rollout``.)"""

    obs: torch.Tensor  # (B, obs_dim)
    actions: torch.Tensor  # (B, *action_shape)
    rewards: torch.Tensor  # (B,)
    next_obs: torch.Tensor  # (B, obs_dim): the true next observation (final_obs at episode ends)
    terminated: torch.Tensor  # (B,) bool: True only for real terminations, never for timeouts


class ReplayBuffer:
    """Ring buffer of ``capacity`` transitions, stored as preallocated tensors on ``device``.

    ``action_shape=()`` with ``action_dtype=torch.long`` stores discrete actions; ``(act_dim,)``
    with ``torch.float32`` continuous ones. ``seed`` seeds the sampling generator.
    """

    rng = deprecated_alias("generator")  # the 0.1 name

    def __init__(self, capacity: int, obs_dim: int, action_shape: tuple[int, ...] = (),
                 action_dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                 seed: int | None = None):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.device = torch.device(device)
        self.obs = torch.zeros(capacity, obs_dim, device=self.device)  # (C, obs_dim)
        self.actions = torch.zeros(capacity, *action_shape, dtype=action_dtype, device=self.device)  # (C, *A)
        self.rewards = torch.zeros(capacity, device=self.device)  # (C,)
        self.next_obs = torch.zeros(capacity, obs_dim, device=self.device)  # (C, obs_dim)
        self.terminated = torch.zeros(capacity, dtype=torch.bool, device=self.device)  # (C,)
        self.pos = 0  # next row to write
        self.size = 0  # rows filled so far, <= capacity
        # Transitions ever added, overwritten ones included: the agents' warm-up counts these, so a
        # buffer that starts empty (a loaded agent without its saved buffer) warms up again.
        self.num_added = 0
        self.generator = torch.Generator(device=self.device)
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(int(seed))

    def __len__(self) -> int:
        return self.size

    FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated")

    def _fields(self) -> tuple[torch.Tensor, ...]:
        return self.obs, self.actions, self.rewards, self.next_obs, self.terminated

    @torch.no_grad()
    def add(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor,
            terminated: torch.Tensor) -> None:
        """Store one batched env step: ``obs`` (N, obs_dim), ``actions`` (N, *action_shape),
        ``rewards`` (N,), ``next_obs`` (N, obs_dim) = ``info["final_obs"]``, ``terminated`` (N,)."""
        n = obs.shape[0]
        if n > self.capacity:
            raise ValueError(f"cannot add {n} transitions to a buffer of capacity {self.capacity}; "
                             f"raise buffer_size to at least num_envs")
        values = (obs.reshape(n, -1), actions, rewards, next_obs.reshape(n, -1), terminated)
        for store, value in zip(self._fields(), values):
            if tuple(value.shape[1:]) != tuple(store.shape[1:]) or value.shape[0] != n:
                raise ValueError(f"expected a batch of shape {(n, *store.shape[1:])}, got {tuple(value.shape)}")
        first = min(n, self.capacity - self.pos)  # rows that fit before the end of the ring
        for store, value in zip(self._fields(), values):
            value = value.to(device=self.device, dtype=store.dtype)
            store[self.pos:self.pos + first] = value[:first]
            if first < n:  # wrap around: the rest goes to the start, overwriting the oldest
                store[:n - first] = value[first:]
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        self.num_added += n

    @torch.no_grad()
    def sample(self, batch_size: int) -> Batch:
        """``batch_size`` transitions drawn uniformly with replacement."""
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer; add transitions first")
        idx = torch.randint(0, self.size, (batch_size,), generator=self.generator, device=self.device)
        # index_select: the same rows as store[idx], gathered several times faster on a CPU.
        return Batch(*(store.index_select(0, idx) for store in self._fields()))

    def state_dict(self) -> dict[str, Any]:
        """The filled rows, oldest first, the count of transitions ever added, and the generator
        state with its device type (a CUDA state does not fit a CPU generator)."""
        shift = self.pos if self.size == self.capacity else 0  # the oldest row once the ring is full
        state: dict[str, Any] = {name: torch.roll(store, -shift, 0)[:self.size].clone()
                                 for name, store in zip(self.FIELDS, self._fields())}
        state["num_added"] = self.num_added
        state["generator"] = self.generator.get_state()
        state["generator_device"] = self.device.type
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` wrote, saved on any device; keeps the newest rows if this
        buffer is smaller. Also reads 0.1 states (generator under ``"rng"``, no ``num_added``)."""
        state = renamed_keys(state, ReplayBuffer, "this checkpoint's replay buffer")
        size = min(int(state["obs"].shape[0]), self.capacity)
        if size:
            for name, store in zip(self.FIELDS, self._fields()):
                store[:size] = state[name][-size:].to(self.device)
        self.pos, self.size = size % self.capacity, size
        self.num_added = int(state.get("num_added", state["obs"].shape[0]))
        restore_generator(self.generator, state["generator"], state.get("generator_device"))

    def __repr__(self) -> str:
        return f"ReplayBuffer(size={self.size}, capacity={self.capacity}, device={self.device})"
