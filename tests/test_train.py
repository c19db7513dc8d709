"""The one-pod loop with PPO: logs, checkpoints, early stop, history columns; the CLI and the demo."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

import podracer
from podracer.envs import PendulumVecEnv

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(num_steps=8, num_minibatches=2, update_epochs=2, hidden_sizes=(16,))


def _tiny_agent(env, seed: int = 0):
    return podracer.make_agent("ppo", env, seed=seed, **TINY)


def test_train_writes_logs_and_checkpoints(tmp_path):
    env, eval_env = PendulumVecEnv(num_envs=8, max_episode_steps=40), PendulumVecEnv(num_envs=2)
    # Time limits in step (not staggered), so that the episodes end on known steps.
    agent, history = podracer.train(_tiny_agent(env), env, 64 * 10, eval_env=eval_env, eval_every=256, seed=0,
                                    log_dir=tmp_path, checkpoint_every=320, progress=False, stagger_time_limits=False)
    assert len(history) == 10 and history["global_step"].tolist() == [64.0 * (i + 1) for i in range(10)]
    for col in ("global_step", "env_steps", "loss/actor", "loss/critic", "charts/entropy", "charts/approx_kl",
                "charts/clipfrac", "charts/learning_rate", "charts/steps_per_second", "time/wall_s", "time/train_s",
                "eval/return_mean", "eval/return_std", "eval/episodes", "charts/episodic_return"):
        assert col in history, col
    # Evaluations at the first step past each 256 and at the end.
    assert history.dropna(subset=["eval/return_mean"])["global_step"].tolist() == [256.0, 512.0, 640.0]
    # 40-step episodes, 8 steps per train_step: episodes end in train steps 5 and 10 only.
    assert history.dropna(subset=["charts/episodic_return"])["global_step"].tolist() == [320.0, 640.0]
    assert (history["charts/episodic_length"].dropna() == 40).all()

    csv = pd.read_csv(tmp_path / "progress.csv")
    assert len(csv) == 10 and list(csv.columns) == list(history.columns)
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    ckpts = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert ckpts == ["last.pt", "step_320.pt", "step_640.pt"]
    loaded = podracer.AgentBase.load(tmp_path / "checkpoints" / "last.pt")
    obs, _ = eval_env.reset(seed=1)
    torch.testing.assert_close(loaded.act(obs, deterministic=True), agent.act(obs, deterministic=True))


def test_target_return_stops_early(tmp_path):
    env, eval_env = PendulumVecEnv(num_envs=8), PendulumVecEnv(num_envs=2)
    _, history = podracer.train(_tiny_agent(env), env, 100_032, eval_env=eval_env, eval_every=128, seed=0,
                                log_dir=tmp_path, progress=False, target_return=-1e9)
    assert history["global_step"].tolist() == [64.0, 128.0]  # stopped at the first evaluation
    assert (tmp_path / "checkpoints" / "last.pt").is_file()
    assert len(pd.read_csv(tmp_path / "progress.csv")) == 2


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "podracer", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300)


def _refused(capsys: pytest.CaptureFixture, *args: str) -> str:
    """Run the command in this process and return what it says on refusing ``args``. It must stop
    with a SystemExit: a message (which ``python -m podracer`` prints without a traceback, exit
    status 1) or argparse's usage error (status 2, its message on stderr). Any other exception is
    the traceback a user would see, and fails here. In this process because each refusal in a
    subprocess cost a Python with torch (~4 s of CPU); the subprocess runs above and below check
    ``python -m podracer`` itself."""
    from podracer.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    code = exit_.value.code
    if isinstance(code, str):
        return code
    assert code not in (0, None)
    return capsys.readouterr().err


@pytest.mark.slow
def test_cli_train_then_eval(tmp_path, capsys):
    log_dir = tmp_path / "run"
    res = _run("train", "ppo", "pendulum", "--steps", "256", "--num-envs", "8", "--seed", "1", "--log-dir",
               str(log_dir), "--device", "cpu", "--eval-every", "128", "--eval-episodes", "2", "--no-progress",
               "--set", "num_steps=8", "--set", "hidden_sizes=[16]")
    assert res.returncode == 0, res.stderr
    assert "final eval after 256 steps" in res.stdout
    assert (log_dir / "progress.csv").is_file() and (log_dir / "checkpoints" / "last.pt").is_file()
    assert podracer.AgentBase.load(log_dir / "checkpoints" / "last.pt").config.hidden_sizes == (16,)

    from podracer.cli import main  # eval in this process: the command itself was run just above

    assert main(["eval", str(log_dir / "checkpoints" / "last.pt"), "pendulum", "--episodes", "3"]) == 0
    assert "over 3 episodes" in capsys.readouterr().out


def test_cli_errors_name_the_fix(tmp_path, capsys):
    err = _refused(capsys, "train", "ppo", "pendulum", "--steps", "64", "--set", "lerning_rate=1e-3", "--log-dir",
                   str(tmp_path))
    assert "lerning_rate" in err and "valid fields" in err
    assert "no checkpoint at" in _refused(capsys, "eval", str(tmp_path / "missing.pt"), "pendulum")
    assert "unknown env 'no-such-env'" in _refused(capsys, "train", "ppo", "no-such-env", "--steps", "64")
    assert "not an agent class" in _refused(capsys, "train", "os:system", "pendulum", "--steps", "64")
    (tmp_path / "garbage.pt").write_bytes(b"not a checkpoint")
    err = _refused(capsys, "eval", str(tmp_path / "garbage.pt"), "pendulum")
    assert "cannot be loaded: not a file written by agent.save" in err


@pytest.mark.parametrize("argv, message", [
    (["train", "ppo", "pendulum", "--steps", "-5"], "argument --steps: must be a positive whole number, got -5"),
    (["train", "ppo", "pendulum", "--num-envs", "0"], "argument --num-envs: must be a positive whole number, got 0"),
    (["train", "ppo", "pendulum", "--steps", "1.5"], "argument --steps: expected a whole number, got '1.5'"),
    (["eval", "x.pt", "pendulum", "--episodes", "0"], "argument --episodes: must be a positive whole number"),
    (["tournament", "ppo", "pendulum", "--generation-steps", "0"], "argument --generation-steps: must be a positive"),
    (["tournament", "ppo", "pendulum", "--pods", "many"],
     "argument --pods: expected a positive whole number or 'auto', got 'many'"),  # was a traceback from int()
    # Found by probing: --device gpu was torch's RuntimeError listing every backend it knows, from deep in make_env.
    (["train", "ppo", "pendulum", "--device", "gpu"], "argument --device: unknown device 'gpu': use 'cpu', 'cuda'"),
    (["eval", "x.pt", "pendulum", "--device", "gpu"], "argument --device: unknown device 'gpu'"),
    (["tournament", "ppo", "pendulum", "--device", "gpu"], "argument --device: unknown device 'gpu'"),
])
def test_cli_counts_below_one_are_usage_errors(argv, message, capsys):
    """Found by probing: ``--steps -5`` ended in a traceback from train(), and ``--num-envs 0`` trained
    silently on the preset's sub-env count (0 read as "not given")."""
    from podracer.cli import build_parser

    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a CUDA GPU")
def test_cli_device_is_checked_here_except_for_a_tournaments_pods(capsys):
    """train and eval run here, so --device cuda on a machine without one is a usage error; a
    tournament's pods may run on GPU nodes of a cluster whose driver has none: the name alone is checked."""
    from podracer.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "ppo", "pendulum", "--device", "cuda"])
    assert "argument --device: device 'cuda' asked for, but this torch" in capsys.readouterr().err
    assert build_parser().parse_args(["tournament", "ppo", "pendulum", "--device", "cuda:1"]).device == "cuda:1"


def test_cli_counts_take_whole_numbers_in_any_notation():
    from podracer.cli import build_parser

    args = build_parser().parse_args(["train", "ppo", "pendulum", "--steps", "1e6", "--eval-every", "20_000"])
    assert (args.steps, args.eval_every) == (1_000_000, 20_000)
    assert build_parser().parse_args(["tournament", "ppo", "pendulum", "--pods", "auto"]).pods == "auto"
    assert build_parser().parse_args(["tournament", "ppo", "pendulum"]).pods == 4


def test_cli_accepts_module_class_agents(tmp_path):
    from podracer.cli import main

    assert main(["train", "podracer.agents.ppo:PPO", "pendulum", "--steps", "128", "--num-envs", "8", "--log-dir",
                 str(tmp_path), "--eval-episodes", "2", "--no-progress", "--set", "num_steps=16"]) == 0
    assert podracer.load_agent(tmp_path / "checkpoints" / "last.pt").name == "ppo"


@pytest.mark.slow
def test_cli_tournament_runs_resumes_and_explains_bad_settings(tmp_path, capsys):
    store = tmp_path / "store"
    args = ("tournament", "ppo", "pendulum", "--pods", "2", "--generations", "1", "--generation-steps", "1024",
            "--num-envs", "8", "--eval-episodes", "2", "--threads-per-pod", "1", "--store", str(store),
            "--no-progress", "--set", "hidden_sizes=[16]", "--set", "update_epochs=1")
    res = _run(*args)
    assert res.returncode == 0, res.stderr
    assert "best: entry" in res.stdout and len(podracer.Leaderboard(store)) == 2
    res = _run(*args[:-4], "--generations", "2", "--no-progress", "--set", "hidden_sizes=[16]", "--set",
               "update_epochs=1")  # resume with a bigger budget: two more entries
    assert res.returncode == 0, res.stderr
    assert len(podracer.Leaderboard(store)) == 4
    for bad, message in [(("--pods", "auto"), "entries=N"), (("--set", "hidden_sizes=[32]"), "different tournament"),
                         (("--pods", "0"), "argument --pods: expected a positive whole number or 'auto'"),
                         (("--backend", "ray", "--address", "ray://head:10001"), "Ray Client address")]:
        assert message in _refused(capsys, *args, *bad)  # argparse: the last --pods / --set wins


def test_cli_main_in_process(tmp_path, capsys):
    from podracer.cli import main

    assert main(["train", "ppo", "cartpole", "--steps", "128", "--num-envs", "4", "--log-dir", str(tmp_path),
                 "--eval-episodes", "2", "--no-progress", "--set", "num_steps=16"]) == 0
    assert "preset 'cartpole'" in capsys.readouterr().out


def test_demo_writes_csv_and_plot(tmp_path, capsys):
    from podracer.demo import main

    assert main(["--out", str(tmp_path), "--steps", "3072"]) == 0  # two rollouts of the preset
    out = capsys.readouterr().out
    assert (tmp_path / "progress.csv").is_file() and str(tmp_path / "learning_curve.png") in out
    assert (tmp_path / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("bad", [0, -5, 2.5, True, "100"])
def test_train_rejects_nonpositive_steps(bad):
    env = PendulumVecEnv(num_envs=2)
    with pytest.raises(ValueError, match="total_steps must be a positive whole number"):
        podracer.train(_tiny_agent(env), env, bad, progress=False)
