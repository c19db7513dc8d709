"""Backend ``"warp"``: MuJoCo Warp (``mujoco-warp``, ``warp-lang``) steps all sub-envs at once as
``num_envs`` worlds of one batched ``mujoco_warp.Data``, on the GPU (or, slowly, on the CPU).

The simulator state lives in warp arrays; ``wp.to_torch`` views them as torch tensors sharing the
same memory (no copies): actions are written straight into ``ctrl``, and the tasks' observations,
rewards and terminations are computed in torch on views of ``qpos``, ``qvel``, ``xpos``,
``xipos``, ``cinert``, ``cvel``, ``qfrc_actuator`` and ``cfrc_ext``, vectorized over worlds.
Needs ``pip install "podracer-rl[warp]"`` (Python >= 3.11, as mujoco-warp).

Definitions are gymnasium v5's, read from gymnasium's own env: the same XML asset files (loaded by
``gym.make``, so ``xml_file=`` and every other v5 option given as ``task_kwargs`` apply),
``frame_skip``, observation composition, reward terms, healthy/termination rules and reset noise
scales. ``tests/test_warp_backend.py`` checks the match from the same state and actions.

Where this backend differs from gymnasium v5, and why:

- Humanoid's solver: gymnasium's ``humanoid.xml`` asks for the PGS solver, which MuJoCo Warp
  does not implement (``put_model`` rejects it); this backend switches the model to the Newton
  solver (``model.opt.solver = mjSOL_NEWTON``, keeping the XML's 50 iterations). Both solve the
  same constrained problem: from the same state, one step agrees to 5e-4 (relative) in the
  contact forces ``cfrc_ext`` and 4e-5 in every other term (measured). The other four tasks
  already use Newton.
- Ant's (and, if they touch the ground steeply, Humanoid's limbs') friction: for a capsule on a
  plane, C MuJoCo aligns the contact frame with the capsule's axis; MuJoCo Warp does too unless
  the capsule is steeper than 60 degrees, where it takes a fixed frame (as MJX does; see MuJoCo
  issue #2774). With gymnasium's pyramidal friction cone the frame's orientation changes the
  friction forces, so Ant steps with such contacts (about half of them under random actions:
  its lower legs are steep) differ from gymnasium's, by up to 100% (relative) in velocities and
  clipped contact forces. Other steps match to 1e-5, and with MuJoCo Warp patched to C's rule
  every Ant step did (2e-5): the definitions are the same, the contact model differs. We do not
  patch the library.
- Precision: MuJoCo Warp computes in float32, C MuJoCo (gymnasium) in float64. From the same
  state one step agrees to 1e-4 (relative) or better; chaotic contact dynamics amplify that over
  tens of steps, so trajectories are not identical (as between envpool's MuJoCo and gymnasium's).
- Contact forces (``cfrc_ext``, in Ant's and Humanoid's observations and contact costs): MuJoCo
  Warp computes them (``mujoco_warp.rne_postconstraint``); we call it once after the last
  substep, as gymnasium does with ``mj_rnePostConstraint``. After a reset they are zero, as in
  gymnasium (``mj_resetData`` clears them and ``mj_forward`` does not recompute them). No
  observation term is replaced.
- Reset noise has gymnasium's distributions and scales (uniform qpos noise; uniform or scaled
  standard normal qvel noise, per task) but not numpy's stream: each sub-env i draws from a
  counter-based hash of (seed + i, its episode number), computed in torch on the env's device.
  So sub-env i is seeded with seed + i, as the other backends promise, whatever ``num_envs``,
  and a reset needs no host round trip; the numbers differ from gymnasium's ``np_random``.
- No auto-recovery from divergence: C MuJoCo resets a world whose accelerations blow up (with a
  warning); MuJoCo Warp does not. A NaN state ends an Ant episode (its health check, as in v5)
  but not the others'; not seen with actions inside the action space.

Kernels: warp compiles MuJoCo Warp's kernels on first use (measured here on 2 busy CPU cores:
about 24 s for the first task, 3-6 s for each further one, which shares most kernels; ~36 s for
all five) and caches the binaries in its kernel cache (``warp.config.kernel_cache_dir``, by
default the user cache directory, ``~/.cache/warp/<warp version>``; ``WARP_CACHE_PATH`` moves
it). Later processes load them from there in well under a second per task. This module keeps
warp's default cache; a cache on a path that does not persist (a fresh container) compiles again.

Graphs: the ``frame_skip`` substeps (with the contact forces) and the forward pass of a reset are
captured once as warp graphs and replayed every step: a CUDA graph on the GPU; on the CPU warp
records the launches and replays them in C++, which skips Python's per-launch cost (measured,
one Hopper world: 18 steps/s launching kernels one by one, 2,200 with the graph).
``graph=False`` launches them one by one. On CUDA, warp's launches are ordered after torch's
pending work on the env's device and torch's after warp's with stream events, so a step has no
host synchronisation besides the action check and the autoreset's ``done.any()``.
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from locomotion.optional import import_optional
from locomotion.tasks import Task
from podracer.envs import AUTORESET_MODE, check_actions, resolve_device

WARP_INSTALL_HINT = 'pip install "podracer-rl[warp]"'


def warp_available() -> bool:
    """True when ``mujoco_warp`` and ``warp`` import."""
    try:
        import mujoco_warp  # noqa: F401
        import warp  # noqa: F401
    except Exception:  # ImportError, or a broken native library (OSError)
        return False
    return True


def _import_warp() -> tuple[Any, Any]:
    try:
        import mujoco_warp as mjw
        import warp as wp
    except ImportError as err:
        raise ImportError(f"the 'warp' locomotion backend needs the 'mujoco-warp' and 'warp-lang' packages, which are "
                          f"not installed ({err}); install them with: {WARP_INSTALL_HINT}") from err
    with wp.ScopedLogLevel(wp.LOG_WARNING):  # no banner; warp's global log level is left alone
        wp.init()  # idempotent; device_from_torch needs the runtime
    return wp, mjw


# ---------------------------------------------------------------- reset noise: a counter-based hash

_M32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (lowbias32) on int64 tensors holding values in [0, 2**32). Products
    may wrap past 2**63; the low 32 bits, all we keep, are still exact."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _M32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _M32
    return x ^ (x >> 16)


def _hash_bits(keys: torch.Tensor, counters: torch.Tensor, count: int) -> torch.Tensor:
    """(n, count) 32-bit random integers: stream ``counters[i]`` of key ``keys[i]`` (keys int64,
    the sub-env's 64-bit seed)."""
    lo, hi = keys & _M32, (keys >> 32) & _M32
    base = _mix32(lo ^ _mix32((hi + 0x9E3779B9) & _M32))
    base = _mix32(base ^ _mix32((counters * 0x85EBCA6B + 0x632BE5AB) & _M32))
    j = torch.arange(count, device=keys.device, dtype=torch.int64)
    return _mix32(base[:, None] ^ _mix32((j * 0xC2B2AE35 + 0x27D4EB2F) & _M32)[None, :])


def _unit(bits: torch.Tensor) -> torch.Tensor:
    """Uniform in [0, 1) from 32-bit integers (24 bits of them: float32's mantissa)."""
    return (bits >> 8).to(torch.float64) * 2.0**-24


# ---------------------------------------------------------------- the five tasks, in torch


class _Views:
    """Torch views (no copies) of the warp Data fields the tasks read and write."""

    def __init__(self, wp: Any, d: Any, na: int):
        t = wp.to_torch
        self.qpos, self.qvel, self.ctrl = t(d.qpos), t(d.qvel), t(d.ctrl)  # (N, nq), (N, nv), (N, nu)
        self.act = t(d.act) if na else None
        self.qacc_warmstart, self.time = t(d.qacc_warmstart), t(d.time)
        self.xpos, self.xipos = t(d.xpos), t(d.xipos)  # (N, nbody, 3)
        self.cinert = t(d.cinert)  # (N, nbody, 10)
        self.cvel, self.cfrc_ext = t(d.cvel), t(d.cfrc_ext)  # (N, nbody, 6)
        self.qfrc_actuator = t(d.qfrc_actuator)  # (N, nv)


class _TaskDef:
    """A v5 task's definitions, with its parameters read from gymnasium's env ``g``."""

    qvel_noise = "uniform"  # or "normal": init_qvel + scale * standard normal
    needs_forward_on_reset = False  # position() or the reset observation read derived quantities
    needs_cfrc_ext = False
    position_dims = 1  # x (1) or x, y (2): the quantity whose velocity is rewarded

    def __init__(self, g: Any, v: _Views, device: torch.device):
        self.v = v
        self.reset_noise_scale = float(g._reset_noise_scale)
        self.forward_reward_weight = float(g._forward_reward_weight)
        self.ctrl_cost_weight = float(g._ctrl_cost_weight)
        self.exclude_positions = bool(g._exclude_current_positions_from_observation)
        self.healthy_reward = float(getattr(g, "_healthy_reward", 0.0))
        self.terminate_when_unhealthy = bool(getattr(g, "_terminate_when_unhealthy", False))

    def position(self) -> torch.Tensor:
        return self.v.qpos[:, 0].clone()

    def obs(self) -> torch.Tensor:
        raise NotImplementedError

    def healthy(self) -> torch.Tensor | None:
        return None  # always healthy

    def reward(self, velocity: torch.Tensor, actions: torch.Tensor, healthy: torch.Tensor | None) -> torch.Tensor:
        x_velocity = velocity if velocity.dim() == 1 else velocity[:, 0]
        reward = self.forward_reward_weight * x_velocity - self.ctrl_cost_weight * actions.square().sum(1)
        if healthy is not None:
            reward = reward + self.healthy_reward * healthy.float()
        return reward

    def reset_obs_fixup(self, obs: torch.Tensor, idx: torch.Tensor) -> None:
        """Make reset rows of ``obs`` what gymnasium's reset returns, where views alone do not."""


class _HalfCheetah(_TaskDef):
    qvel_noise = "normal"

    def obs(self) -> torch.Tensor:
        skip = 1 if self.exclude_positions else 0
        return torch.cat([self.v.qpos[:, skip:], self.v.qvel], 1)


class _Hopper(_TaskDef):
    def __init__(self, g: Any, v: _Views, device: torch.device):
        super().__init__(g, v, device)
        self.state_range = tuple(map(float, g._healthy_state_range))
        self.z_range = tuple(map(float, g._healthy_z_range))
        self.angle_range = tuple(map(float, g._healthy_angle_range))

    def obs(self) -> torch.Tensor:
        skip = 1 if self.exclude_positions else 0
        return torch.cat([self.v.qpos[:, skip:], self.v.qvel.clamp(-10, 10)], 1)

    def healthy(self) -> torch.Tensor:
        z, angle = self.v.qpos[:, 1], self.v.qpos[:, 2]
        state = torch.cat([self.v.qpos[:, 2:], self.v.qvel], 1)  # state_vector()[2:]
        lo, hi = self.state_range
        ok = ((lo < state) & (state < hi)).all(1)
        ok &= (self.z_range[0] < z) & (z < self.z_range[1])
        return ok & (self.angle_range[0] < angle) & (angle < self.angle_range[1])


class _Walker2d(_Hopper):
    def __init__(self, g: Any, v: _Views, device: torch.device):
        _TaskDef.__init__(self, g, v, device)
        self.z_range = tuple(map(float, g._healthy_z_range))
        self.angle_range = tuple(map(float, g._healthy_angle_range))

    def healthy(self) -> torch.Tensor:
        z, angle = self.v.qpos[:, 1], self.v.qpos[:, 2]
        ok = (self.z_range[0] < z) & (z < self.z_range[1])
        return ok & (self.angle_range[0] < angle) & (angle < self.angle_range[1])


class _Ant(_TaskDef):
    qvel_noise = "normal"
    needs_forward_on_reset = True  # the rewarded position is a body's xpos
    needs_cfrc_ext = True
    position_dims = 2

    def __init__(self, g: Any, v: _Views, device: torch.device):
        super().__init__(g, v, device)
        self.main_body = int(g.data.body(g._main_body).id)  # an index or a name in v5
        self.contact_cost_weight = float(g._contact_cost_weight)
        self.contact_force_range = tuple(map(float, g._contact_force_range))
        self.z_range = tuple(map(float, g._healthy_z_range))
        self.include_cfrc_ext = bool(g._include_cfrc_ext_in_observation)

    def position(self) -> torch.Tensor:
        return self.v.xpos[:, self.main_body, :2].clone()

    def contact_forces(self) -> torch.Tensor:
        return self.v.cfrc_ext.clamp(*self.contact_force_range)  # (N, nbody, 6)

    def obs(self) -> torch.Tensor:
        skip = 2 if self.exclude_positions else 0
        parts = [self.v.qpos[:, skip:], self.v.qvel]
        if self.include_cfrc_ext:
            parts.append(self.contact_forces()[:, 1:].flatten(1))
        return torch.cat(parts, 1)

    def healthy(self) -> torch.Tensor:
        finite = torch.isfinite(self.v.qpos).all(1) & torch.isfinite(self.v.qvel).all(1)
        z = self.v.qpos[:, 2]
        return finite & (self.z_range[0] <= z) & (z <= self.z_range[1])

    def reward(self, velocity: torch.Tensor, actions: torch.Tensor, healthy: torch.Tensor | None) -> torch.Tensor:
        contact_cost = self.contact_cost_weight * self.contact_forces().square().sum((1, 2))
        return super().reward(velocity, actions, healthy) - contact_cost


class _Humanoid(_TaskDef):
    needs_forward_on_reset = True  # centre of mass, cinert, cvel, qfrc_actuator
    needs_cfrc_ext = True
    position_dims = 2

    def __init__(self, g: Any, v: _Views, device: torch.device):
        super().__init__(g, v, device)
        self.body_mass = torch.as_tensor(g.model.body_mass, dtype=torch.float32, device=device)  # (nbody,)
        self.contact_cost_weight = float(g._contact_cost_weight)
        self.contact_cost_range = tuple(map(float, g._contact_cost_range))
        self.z_range = tuple(map(float, g._healthy_z_range))
        self.include = (bool(g._include_cinert_in_observation), bool(g._include_cvel_in_observation),
                        bool(g._include_qfrc_actuator_in_observation), bool(g._include_cfrc_ext_in_observation))

    def position(self) -> torch.Tensor:
        """gymnasium's mass_center: the mass-weighted mean of the bodies' centres of mass, x and y."""
        return (self.body_mass[None, :, None] * self.v.xipos).sum(1)[:, :2] / self.body_mass.sum()

    def obs(self) -> torch.Tensor:
        skip = 2 if self.exclude_positions else 0
        parts = [self.v.qpos[:, skip:], self.v.qvel]
        cinert, cvel, qfrc, cfrc = self.include
        if cinert:
            parts.append(self.v.cinert[:, 1:].flatten(1))
        if cvel:
            parts.append(self.v.cvel[:, 1:].flatten(1))
        if qfrc:
            parts.append(self.v.qfrc_actuator[:, 6:])
        if cfrc:
            parts.append(self.v.cfrc_ext[:, 1:].flatten(1))
        return torch.cat(parts, 1)

    def healthy(self) -> torch.Tensor:
        z = self.v.qpos[:, 2]
        return (self.z_range[0] < z) & (z < self.z_range[1])

    def reward(self, velocity: torch.Tensor, actions: torch.Tensor, healthy: torch.Tensor | None) -> torch.Tensor:
        contact_cost = (self.contact_cost_weight * self.v.cfrc_ext.square().sum((1, 2))).clamp(*self.contact_cost_range)
        return super().reward(velocity, actions, healthy) - contact_cost


_TASK_DEFS: dict[str, type[_TaskDef]] = {"halfcheetah": _HalfCheetah, "hopper": _Hopper, "walker2d": _Walker2d,
                                         "ant": _Ant, "humanoid": _Humanoid}


# ---------------------------------------------------------------- the env


class WarpVecEnv:
    """``num_envs`` copies of a MuJoCo task as the worlds of one MuJoCo Warp simulation, in the
    batched-tensor protocol (same-step autoreset, dense ``final_obs``).

    ``task_kwargs`` are the gymnasium v5 env's options (``reset_noise_scale=0.0``,
    ``xml_file=...``): the env is built by ``gym.make`` once to read its model and definitions.
    ``nconmax`` and ``njmax`` (contacts and constraint rows per world) default to MuJoCo Warp's
    guesses (48 and 64), well above what these tasks use (measured with gymnasium: at most 4
    contacts and 21 rows); ``graph=False`` launches kernels one by one instead of replaying
    captured graphs. See the module docstring for what differs from gymnasium v5.
    """

    metadata: dict[str, Any] = {"autoreset_mode": AUTORESET_MODE}
    backend = "warp"

    def __init__(self, task: Task, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                 max_episode_steps: int | None = None, validate_actions: bool = True, nconmax: int | None = None,
                 njmax: int | None = None, graph: bool = True, warp_logs: bool = False, **task_kwargs: Any):
        wp, mjw = _import_warp()
        mujoco = import_optional("mujoco", "warp")
        if isinstance(num_envs, bool) or not isinstance(num_envs, numbers.Integral) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive whole number, got {num_envs!r}")
        self._wp, self._mjw = wp, mjw
        self._task = task
        self.task = task.key  # make_agent picks presets by this name
        self.num_envs = int(num_envs)
        self.device = resolve_device(device)
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"the 'warp' backend runs on 'cpu' or 'cuda' devices, got {str(self.device)!r}")
        self.validate_actions = validate_actions
        self.max_episode_steps = int(max_episode_steps or task.max_episode_steps)

        # gymnasium's own v5 env: its XML asset, frame_skip, spaces and task parameters.
        g = gym.make(task.gym_id, **task_kwargs).unwrapped
        mjm = g.model
        if mjm.opt.solver == mujoco.mjtSolver.mjSOL_PGS:  # MuJoCo Warp has no PGS (Humanoid): module docstring
            mjm.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
        self.frame_skip = int(g.frame_skip)
        self.dt = float(mjm.opt.timestep * self.frame_skip)
        self.single_observation_space = g.observation_space  # float64 Box, as gymnasium's
        self.single_action_space = g.action_space  # float32 Box from the actuators' ctrlrange
        self._nq, self._nv, self._nu, self._na = mjm.nq, mjm.nv, mjm.nu, mjm.na

        self._log_level = wp.config.log_level if warp_logs else max(wp.config.log_level, wp.LOG_WARNING)
        self._wp_device = wp.device_from_torch(self.device)
        with wp.ScopedDevice(self._wp_device), wp.ScopedLogLevel(self._log_level):
            self._m = mjw.put_model(mjm)
            self._d = mjw.make_data(mjm, nworld=self.num_envs, nconmax=nconmax, njmax=njmax)
        self._v = _Views(wp, self._d, self._na)
        self._def = _TASK_DEFS[task.key](g, self._v, self.device)
        self._init_qpos = torch.as_tensor(g.init_qpos, dtype=torch.float32, device=self.device)
        self._init_qvel = torch.as_tensor(g.init_qvel, dtype=torch.float32, device=self.device)
        g.close()

        self._stream = wp.get_stream(self._wp_device) if self._wp_device.is_cuda else None
        self._use_graph = bool(graph)
        self._graphs: dict[str, Any] = {}  # "step", "forward": captured launch sequences
        self._torch_streams: dict[int, Any] = {}  # CUDA: torch streams seen, as warp streams
        self._first_seed = seed
        self._check_seed(seed)
        self._keys = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)  # sub-env seeds
        self._episodes = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)  # resets so far
        self._set_seed(seed)
        self._elapsed = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._position = torch.zeros(self.num_envs, self._def.position_dims, device=self.device).squeeze(1)
        self._all = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)

    # -- seeding

    @staticmethod
    def _check_seed(seed: Any) -> None:
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
            raise ValueError(f"seed must be a whole number or None, got {seed!r}")

    def _set_seed(self, seed: int | None) -> None:
        """Sub-env i draws its reset noise from the key seed + i (mod 2**64); unseeded, random."""
        if seed is None:
            seed = int(np.random.SeedSequence().entropy % 2**63)
        keys = [((int(seed) + i) % 2**64) for i in range(self.num_envs)]
        keys = [k - 2**64 if k >= 2**63 else k for k in keys]  # two's complement into int64
        self._keys = torch.tensor(keys, dtype=torch.int64, device=self.device)
        self._episodes.zero_()

    # -- simulation

    def _launch(self, fn: Any) -> None:
        """Run warp work ``fn()`` on the env's device, ordered after torch's pending work and before
        torch's next (CUDA: stream events, no host sync; CPU: launches are synchronous)."""
        wp = self._wp
        if self._stream is None:
            with wp.ScopedDevice(self._wp_device), wp.ScopedLogLevel(self._log_level):
                fn()
            return
        current = torch.cuda.current_stream(self.device)
        torch_stream = self._torch_streams.get(current.cuda_stream)
        if torch_stream is None:  # one warp wrapper per torch stream, made once
            torch_stream = self._torch_streams[current.cuda_stream] = wp.stream_from_torch(current)
        self._stream.wait_stream(torch_stream)
        with wp.ScopedDevice(self._wp_device), wp.ScopedStream(self._stream), wp.ScopedLogLevel(self._log_level):
            fn()
        torch_stream.wait_stream(self._stream)

    def _run(self, name: str, fn: Any) -> None:
        """``fn()`` (a fixed sequence of warp launches on this env's arrays), replayed from a graph
        captured on its first call when ``graph`` is on."""
        wp = self._wp
        if not self._use_graph:
            self._launch(fn)
            return
        graph = self._graphs.get(name)
        if graph is not None:
            self._launch(lambda: wp.capture_launch(graph, stream=self._stream))
            return
        self._launch(fn)  # this call's work, eagerly; it also compiles and loads every kernel

        def capture() -> None:  # recorded, not run (CPU and CUDA alike)
            with wp.ScopedCapture(device=self._wp_device, stream=self._stream) as cap:
                fn()
            self._graphs[name] = cap.graph

        try:
            self._launch(capture)
        except Exception as err:  # pragma: no cover - depends on the driver
            warnings.warn(f"warp backend: graph capture failed ({err}); launching kernels one by one (slower)",
                          RuntimeWarning, stacklevel=3)
            self._use_graph = False

    def _substeps(self) -> None:
        for _ in range(self.frame_skip):
            self._mjw.step(self._m, self._d)
        if self._def.needs_cfrc_ext:
            self._mjw.rne_postconstraint(self._m, self._d)  # as gymnasium's mj_rnePostConstraint

    def _simulate(self) -> None:
        self._run("step", self._substeps)

    def _forward(self) -> None:
        self._run("forward", lambda: self._mjw.forward(self._m, self._d))

    def _reset_worlds(self, mask: torch.Tensor) -> None:
        """Re-initialise the worlds in ``mask`` as gymnasium's reset does: ``mj_resetData`` (state
        cleared), then ``qpos``/``qvel`` = initial + noise, then ``mj_forward``."""
        idx = mask.nonzero().squeeze(1)
        v, nq, nv, scale = self._v, self._nq, self._nv, self._def.reset_noise_scale
        normal = self._def.qvel_noise == "normal"
        bits = _hash_bits(self._keys[idx], self._episodes[idx], nq + (2 * nv if normal else nv))
        u = _unit(bits)
        qpos = self._init_qpos + (scale * (2 * u[:, :nq] - 1)).float()
        if normal:  # Box-Muller: u1 in (0, 1], u2 in [0, 1)
            u1, u2 = 1.0 - u[:, nq:nq + nv], u[:, nq + nv:]
            z = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * torch.pi * u2)
            qvel = self._init_qvel + (scale * z).float()
        else:
            qvel = self._init_qvel + (scale * (2 * u[:, nq:] - 1)).float()
        v.qpos[idx] = qpos
        v.qvel[idx] = qvel
        v.ctrl[idx] = 0.0
        v.qacc_warmstart[idx] = 0.0
        v.time[idx] = 0.0
        v.cfrc_ext[idx] = 0.0  # mj_resetData zeroes it; mj_forward leaves it
        if v.act is not None:
            v.act[idx] = 0.0
        self._episodes[idx] += 1
        self._elapsed[idx] = 0

    # -- the protocol

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[torch.Tensor, dict]:
        """Reset every sub-env; ``seed`` (or the one given at construction, for the first reset)
        seeds sub-env i with seed + i."""
        if seed is None:
            seed, self._first_seed = self._first_seed, None
            if seed is not None:
                self._set_seed(seed)
        else:
            self._check_seed(seed)
            self._first_seed = None
            self._set_seed(seed)
        self._reset_worlds(self._all)
        self._forward()
        self._position = self._def.position()
        return self._def.obs().float(), {}

    def set_state(self, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        """Every world's joint positions ``(num_envs, nq)`` and velocities ``(num_envs, nv)``, as
        gymnasium's ``MujocoEnv.set_state`` (then ``mj_forward``); returns the observation. The
        episodes' step counts are kept."""
        qpos = torch.as_tensor(qpos, dtype=torch.float32, device=self.device)
        qvel = torch.as_tensor(qvel, dtype=torch.float32, device=self.device)
        for name, x, dim in (("qpos", qpos, self._nq), ("qvel", qvel, self._nv)):
            if tuple(x.shape) != (self.num_envs, dim):
                raise ValueError(f"expected {name} of shape {(self.num_envs, dim)}, got {tuple(x.shape)}")
        self._v.qpos.copy_(qpos)
        self._v.qvel.copy_(qvel)
        self._forward()
        self._position = self._def.position()
        return self._def.obs().float()

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        """One step of every sub-env; ``info`` holds ``final_obs`` and ``_final_obs``."""
        if self.validate_actions:
            check_actions(actions, self.num_envs, self.single_action_space, self.device)
        actions = actions.detach().to(torch.float32)
        self._v.ctrl.copy_(actions)  # written straight into the simulation's ctrl
        self._simulate()
        position = self._def.position()
        velocity = (position - self._position) / self.dt
        self._position = position
        obs = self._def.obs()  # a new tensor: later writes to the simulation do not change it
        healthy = self._def.healthy()
        rewards = self._def.reward(velocity, actions, healthy)
        if healthy is not None and self._def.terminate_when_unhealthy:
            terminated = ~healthy
        else:
            terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        self._elapsed += 1
        truncated = self._elapsed >= self.max_episode_steps  # gymnasium's TimeLimit: may be set with terminated
        done = terminated | truncated
        final_obs = obs.clone()  # rows of ended sub-envs keep their last observation
        if bool(done.any()):  # same-step autoreset of exactly the ended worlds
            self._reset_worlds(done)
            if self._def.needs_forward_on_reset:
                self._forward()  # recomputes every world's derived quantities; only reset rows are read
                self._position = torch.where(done[:, None] if self._position.dim() == 2 else done,
                                             self._def.position(), self._position)
            else:
                self._position = torch.where(done, self._def.position(), self._position)
            obs = torch.where(done[:, None], self._def.obs(), obs)
        info = {"final_obs": final_obs, "_final_obs": done}
        return obs, rewards.float(), terminated, truncated, info

    def close(self) -> None:
        self._graphs.clear()

    def __repr__(self) -> str:
        return f"WarpVecEnv({self._task.gym_id}, num_envs={self.num_envs}, device={self.device})"


__all__ = ["WARP_INSTALL_HINT", "WarpVecEnv", "warp_available"]
