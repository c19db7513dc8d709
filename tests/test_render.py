"""Rendered rollouts: frames, the policy's view of observations, GIF and notebook output.

Rendering needs an offscreen OpenGL backend (EGL or OSMesa); where none works these tests skip,
and the skip message lists the backends tried and what to install.
"""

import numpy as np
import pytest
import torch
from PIL import Image

import locomotion
import podracer

pytest.importorskip("mujoco")
SMALL = {"width": 64, "height": 48}


@pytest.fixture(scope="module")
def gl():
    try:
        return locomotion.gl_backend()
    except RuntimeError as err:
        pytest.skip(f"no OpenGL backend for MuJoCo rendering on this machine: {err}")


def sine_policy(act_dim):
    """A fixed open-loop gait: moves the body, the same every run."""
    t = {"step": 0}

    def act(obs):
        t["step"] += 1
        return torch.full((obs.shape[0], act_dim), float(np.sin(t["step"] / 5)))
    return act


def test_unknown_task_and_bad_sizes_are_clear_errors():
    with pytest.raises(ValueError, match="unknown locomotion task 'Cheetah'.*HalfCheetah"):
        locomotion.render_rollout(lambda obs: obs, "Cheetah")
    with pytest.raises(ValueError, match="steps must be a positive whole number"):
        locomotion.render_rollout(lambda obs: obs, "HalfCheetah", steps=0)
    with pytest.raises(TypeError, match="task name or a locomotion env"):
        locomotion.render_rollout(lambda obs: obs, 3)


def test_frames_have_the_right_shape_and_change_over_time(gl):
    frames = locomotion.render_rollout(sine_policy(6), "HalfCheetah", steps=20, seed=0, **SMALL)
    assert frames.shape == (21, 48, 64, 3) and frames.dtype == np.uint8  # reset frame + one per step
    assert frames.std() > 10  # a scene, not a blank image
    diffs = [np.abs(frames[i].astype(int) - frames[i - 1]).mean() for i in range(1, len(frames))]
    assert min(diffs[5:]) > 0.1  # the cheetah moves every step


def test_episode_end_stops_the_rollout(gl):
    fall = lambda obs: torch.ones(1, 3)  # noqa: E731 - every joint pushed to its limit: Hopper falls
    frames = locomotion.render_rollout(fall, "Hopper", steps=500, seed=0, **SMALL)
    assert 2 <= len(frames) < 501


def test_unknown_camera_is_an_error_listing_the_cameras(gl):
    with pytest.raises(ValueError, match="no camera 'side'.*'track'"):
        locomotion.render_rollout(sine_policy(6), "HalfCheetah", steps=1, camera="side", **SMALL)


def test_policy_sees_observations_normalised_as_in_training(gl):
    env = locomotion.make_env("HalfCheetah", 4, backend="gymnasium", seed=0, normalize_obs=True, verbose=False)
    env.reset()
    for _ in range(20):  # statistics away from their initial (0, 1)
        env.step(torch.rand(4, 6) * 2 - 1)
    seen = {"raw": [], "env": []}

    def recorder(key):
        def act(obs):
            seen[key].append(obs.clone())
            return torch.zeros(1, 6)
        return act

    locomotion.render_rollout(recorder("raw"), "HalfCheetah", steps=5, **SMALL)
    locomotion.render_rollout(recorder("env"), env, steps=5, **SMALL)  # the env lends its obs_rms
    raw, normed = torch.cat(seen["raw"]), torch.cat(seen["env"])
    assert not torch.allclose(raw, normed)
    torch.testing.assert_close(normed, env.obs_rms.normalize(raw))


def test_agent_rollouts_are_deterministic(gl):
    env = locomotion.make_env("HalfCheetah", 2, backend="gymnasium", seed=0, verbose=False)
    agent = podracer.make_agent("sac", env, seed=0, verbose=False)
    first = locomotion.render_rollout(agent, env, steps=10, seed=3, **SMALL)
    again = locomotion.render_rollout(agent, "HalfCheetah", steps=10, seed=3, **SMALL)
    np.testing.assert_array_equal(first, again)


def test_gl_error_names_what_was_tried_and_what_to_install(monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "no_such_backend")
    with pytest.raises(RuntimeError, match="MUJOCO_GL=no_such_backend.*apt install"):
        locomotion.gl_backend()


def test_save_gif_and_show_frames(tmp_path):
    frames = np.random.default_rng(0).integers(0, 256, (6, 24, 32, 3), dtype=np.uint8)
    path = locomotion.save_gif(frames, tmp_path / "sub" / "roll.gif", fps=10)
    with Image.open(path) as gif:
        assert gif.n_frames == 6 and gif.size == (32, 24) and gif.info["duration"] == 100
    html = locomotion.show_frames(frames, fps=10).data
    assert "<img" in html and html.count("data:image/png;base64") == 6  # every frame embedded
    with pytest.raises(ValueError, match=r"expected frames of shape \(T, H, W, 3\) and dtype uint8"):
        locomotion.save_gif(frames.astype(np.float32), tmp_path / "x.gif")


def test_env_with_other_task_options_is_a_clear_error(gl):
    env = locomotion.make_env("HalfCheetah", 1, backend="gymnasium", verbose=False,
                              exclude_current_positions_from_observation=False)  # 18 numbers, not 17
    with pytest.raises(ValueError, match=r"shape \(18,\).*\(17,\).*task_kwargs"):
        locomotion.render_rollout(lambda obs: torch.zeros(1, 6), env, steps=1, **SMALL)
    frames = locomotion.render_rollout(lambda obs: torch.zeros(1, 6), env, steps=1,
                                       exclude_current_positions_from_observation=False, **SMALL)
    assert frames.shape == (2, 48, 64, 3)
