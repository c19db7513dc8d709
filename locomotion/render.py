"""Watch a policy: one episode of a MuJoCo task rendered offscreen, as frames, a GIF or a notebook
animation::

    frames = locomotion.render_rollout(agent, train_env, steps=300)  # (T, H, W, 3) uint8
    locomotion.show_frames(frames)                                   # HTML5 animation in a notebook
    locomotion.save_gif(frames, "runs/cheetah.gif")

The episode runs in gymnasium's own v5 env (``render_mode="rgb_array"``), the reference
definition every backend matches, one step at a time: rendering is for watching, not for speed.

MuJoCo renders offscreen through OpenGL, chosen by the ``MUJOCO_GL`` variable. On a machine
without a display that is ``egl`` (GPU drivers, or Mesa's software renderer) or ``osmesa``
(software only). ``gl_backend()`` tries each in a separate process, because a failed attempt can
leave PyOpenGL bound to the wrong platform in this one, then sets ``MUJOCO_GL`` to the first that
works (or checks the one you set). If none does, the error names the Debian/Ubuntu package to add.
"""

from __future__ import annotations

import functools
import numbers
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from locomotion.optional import import_optional
from locomotion.tasks import get_task
from podracer.evaluate import as_policy

GL_BACKENDS = ("egl", "osmesa")  # headless OpenGL platforms MuJoCo supports, tried in this order
GL_INSTALL_HINT = ("install an OpenGL library for offscreen rendering: `apt install libegl1 libgl1-mesa-dri` "
                   "(EGL; Mesa's software renderer when there is no GPU) or `apt install libosmesa6` (OSMesa), "
                   "or with conda `conda install -c conda-forge mesalib`")

# Renders one frame of an empty model with MUJOCO_GL set: the whole path rendering takes.
_PROBE = ("import mujoco; m = mujoco.MjModel.from_xml_string('<mujoco/>'); r = mujoco.Renderer(m, 8, 8); "
          "r.update_scene(mujoco.MjData(m)); r.render(); r.close()")


def _probe(backend: str) -> str:
    """'' when MuJoCo renders with ``MUJOCO_GL=backend`` in a fresh process, else why not."""
    env = {k: v for k, v in os.environ.items() if k != "PYOPENGL_PLATFORM"}  # mujoco sets it per backend
    env["MUJOCO_GL"] = backend
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "timed out after 120 s"
    if done.returncode == 0:
        return ""
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"exit code {done.returncode}"


@functools.lru_cache(maxsize=None)
def _find(candidates: tuple[str, ...]) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    tried = []
    for backend in candidates:
        why = _probe(backend)
        if not why:
            return backend, tuple(tried)
        tried.append((backend, why))
    return None, tuple(tried)


def gl_backend() -> str:
    """The OpenGL backend MuJoCo renders with here (``"egl"`` or ``"osmesa"``), set in
    ``MUJOCO_GL`` for this process. A ``MUJOCO_GL`` you set is checked and kept. Probed once
    per process (about a second each). None working is a ``RuntimeError`` that lists the
    backends tried, why each failed, and what to install."""
    chosen = os.environ.get("MUJOCO_GL")
    if chosen:
        candidates: tuple[str, ...] = (chosen.lower(),)
    elif os.environ.get("PYOPENGL_PLATFORM", "").lower() in GL_BACKENDS:
        candidates = (os.environ["PYOPENGL_PLATFORM"].lower(),)  # PyOpenGL is bound to it in this process
    else:
        candidates = GL_BACKENDS
    backend, tried = _find(candidates)
    if backend is None:
        reasons = "; ".join(f"MUJOCO_GL={name}: {why}" for name, why in tried)
        unset = " (MUJOCO_GL is set; unset it to let Podracer try egl and osmesa)" if chosen else ""
        raise RuntimeError(f"MuJoCo cannot render offscreen here: tried {reasons}{unset}. To fix, {GL_INSTALL_HINT}")
    os.environ["MUJOCO_GL"] = backend  # read by gymnasium's renderer when the env first renders
    return backend


def _check_positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    return int(value)


def _normalizer(obs_normalizer: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """The training env's observation transform: a ``NormalizeObservation`` env, its
    ``obs_rms`` (``RunningMeanStd``), any callable, or None for raw observations."""
    if obs_normalizer is None:
        return lambda obs: obs
    if hasattr(obs_normalizer, "obs_rms"):
        return obs_normalizer.obs_rms.normalize
    if hasattr(obs_normalizer, "normalize"):
        return obs_normalizer.normalize
    if callable(obs_normalizer):
        return obs_normalizer
    raise TypeError("obs_normalizer must be a NormalizeObservation env, a RunningMeanStd, a callable obs -> obs or "
                    f"None, got {type(obs_normalizer).__name__}")


def _camera_kwargs(camera: str | int | None) -> dict[str, Any]:
    if camera is None:
        return {}  # gymnasium's default view (a free camera; it does not follow HalfCheetah or Ant)
    if isinstance(camera, str):
        return {"camera_name": camera}
    if isinstance(camera, numbers.Integral) and not isinstance(camera, bool):
        return {"camera_id": int(camera)}
    raise TypeError(f"camera must be a camera name (str), a camera id (int) or None, got {camera!r}")


def _check_camera(model: Any, camera: str | int | None, task: str) -> None:
    """An unknown camera is an error listing the model's: MuJoCo would fall back to the free
    camera without a word."""
    import mujoco

    names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) or str(i) for i in range(model.ncam)]
    if isinstance(camera, str) and mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera) < 0:
        raise ValueError(f"{task} has no camera {camera!r}; its cameras: {names} (or None for the default view)")
    if isinstance(camera, int) and not -1 <= camera < model.ncam:
        raise ValueError(f"{task} has no camera id {camera}; ids -1 (free) to {model.ncam - 1}: {names}")


def _check_obs_shape(task: str | Any, shape: tuple[int, ...], name: str) -> None:
    """The rendered env must give the policy what the training env gave it."""
    trained = getattr(task, "single_observation_space", None)
    if trained is not None and tuple(trained.shape) != tuple(shape):
        raise ValueError(f"the training env's observations have shape {tuple(trained.shape)}, the rendered {name}-v5 "
                         f"env's {tuple(shape)}: pass render_rollout the task_kwargs you gave make_env (Isaac "
                         f"backends' own task definitions cannot be rendered here)")


@torch.no_grad()
def render_rollout(policy: Any, task: str | Any, steps: int = 1000, seed: int | None = 0, width: int = 480,
                   height: int = 320, camera: str | int | None = "track", obs_normalizer: Any = None,
                   device: str | torch.device | None = None, **task_kwargs: Any) -> np.ndarray:
    """Frames of one episode of ``task`` with the deterministic ``policy``: ``(T, height, width, 3)``
    uint8, the reset state first, so ``T = steps + 1``, or fewer if the episode ends sooner.

    - ``policy``: an agent (its deterministic ``act``) or a callable ``obs -> actions`` on
      ``(1, obs_dim)`` float32 tensors on ``device`` (default: ``policy.device``, else the CPU).
    - ``task``: a task name (``"HalfCheetah"``) or the training env itself; an env made with
      ``normalize_obs=True`` also lends its observation statistics, so the policy sees what it
      saw in training (frozen: rendering does not update them).
    - ``obs_normalizer``: that transform, given explicitly (a ``NormalizeObservation`` env, its
      ``obs_rms``, a callable); agents that normalise inside (PPO) need nothing.
    - ``camera``: a camera of the model's XML (every task has ``"track"``, which follows the body),
      a camera id, or None for gymnasium's default view.
    - ``task_kwargs``: the v5 env's options, as given to ``make_env`` (``reset_noise_scale=0.0``);
      an env passed as ``task`` does not carry them, so give them again.
    """
    name = task if isinstance(task, str) else getattr(task, "task", None)
    if name is None:
        raise TypeError(f"task must be a task name or a locomotion env (with .task), got {type(task).__name__}")
    spec = get_task(name)
    steps, width, height = (_check_positive(k, v) for k, v in (("steps", steps), ("width", width), ("height", height)))
    if obs_normalizer is None and not isinstance(task, str) and hasattr(task, "obs_rms"):
        obs_normalizer = task
    normalize = _normalizer(obs_normalizer)
    act = as_policy(policy)
    device = torch.device(device if device is not None else getattr(policy, "device", "cpu"))
    gl_backend()
    gym = import_optional("gymnasium", "gymnasium")
    import_optional("mujoco", "gymnasium")
    max_steps = getattr(task, "max_episode_steps", None) or spec.max_episode_steps
    env = gym.make(spec.gym_id, render_mode="rgb_array", width=width, height=height, max_episode_steps=max_steps,
                   **_camera_kwargs(camera), **task_kwargs)
    try:
        _check_camera(env.unwrapped.model, camera, spec.name)
        _check_obs_shape(task, env.observation_space.shape, spec.name)
        obs, _ = env.reset(seed=seed)
        frames = [env.render()]
        for _ in range(steps):
            obs_t = torch.as_tensor(obs, dtype=torch.float32, device=device).unsqueeze(0)  # (1, obs_dim)
            actions = act(normalize(obs_t))  # (1, act_dim)
            obs, _, terminated, truncated, _ = env.step(actions.reshape(-1).cpu().numpy())
            frames.append(env.render())
            if terminated or truncated:
                break
    finally:
        env.close()
    return np.stack(frames)


def _check_frames(frames: Any) -> np.ndarray:
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8 or len(frames) == 0:
        raise ValueError(f"expected frames of shape (T, H, W, 3) and dtype uint8 with T >= 1, "
                         f"got shape {frames.shape} and dtype {frames.dtype}")
    return frames


def save_gif(frames: np.ndarray, path: str | Path, fps: int = 30) -> Path:
    """Write ``frames`` ``(T, H, W, 3)`` uint8 as a looping GIF (with Pillow, which matplotlib
    installs); returns the path. GIFs hold 256 colours, enough for MuJoCo's flat shading."""
    from PIL import Image

    frames = _check_frames(frames)
    fps = _check_positive("fps", fps)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    images = [Image.fromarray(frame) for frame in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=round(1000 / fps), loop=0)
    return path


def show_frames(frames: np.ndarray, fps: int = 30) -> Any:
    """``frames`` as an HTML5 animation with play controls, for a notebook cell's output
    (matplotlib's ``to_jshtml``: frames embedded as PNGs, no ffmpeg needed). Keep it short, or
    take every k-th frame (``frames[::2]``, ``fps=15``): matplotlib drops frames beyond
    ``rcParams["animation.embed_limit"]`` (20 MB)."""
    import matplotlib.pyplot as plt
    from IPython.display import HTML
    from matplotlib import animation

    frames = _check_frames(frames)
    fps = _check_positive("fps", fps)
    height, width = frames.shape[1:3]
    fig = plt.figure(figsize=(width / 100, height / 100), dpi=100)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_axis_off()
    image = ax.imshow(frames[0])

    def draw(i: int) -> tuple[Any, ...]:
        image.set_data(frames[i])
        return (image,)

    anim = animation.FuncAnimation(fig, draw, frames=len(frames), interval=1000 / fps, blit=True)
    html = anim.to_jshtml(fps=fps, default_mode="loop")
    plt.close(fig)  # or the notebook shows the first frame again as a still image
    return HTML(html)


__all__ = ["GL_BACKENDS", "GL_INSTALL_HINT", "gl_backend", "render_rollout", "save_gif", "show_frames"]
