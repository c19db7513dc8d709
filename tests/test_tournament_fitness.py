"""The tournament's fitness setting: what a pod scores each generation on (podracer.tournament.fitness),
the board's per-window scores and returns (and stores written before them), the paired exploit
rule, and finance's windowed fitness on a tiny market with planted skill."""

import functools
import math
import random
import sqlite3

import numpy as np
import pytest
import torch

import finance
import podracer
from finance.fitness import WindowedFitness
from podracer.agents.common import mutable_bounds
from podracer.tournament import Leaderboard, Pod, PodSpec, TournamentConfig
from podracer.tournament import fitness as fitness_module
from podracer.tournament.fitness import EvalReturn, make_fitness, paired_difference
from podracer.tournament.schema import SCHEMA

SPANS = dict(train=("2001-01-01", "2002-12-31"), valid=("2003-01-01", "2003-12-31"), test=None,
             history_start="2000-01-01", indicators=())
TINY_PPO = {**podracer.get_preset("ppo", "stock_trading").config, "hidden_sizes": (8,), "update_epochs": 1}
TINY_PENDULUM = {"hidden_sizes": (8,), "num_steps": 16, "update_epochs": 1, "num_minibatches": 2}


@functools.lru_cache(maxsize=None)
def tiny_market():
    """Three stocks, two training years and one validation year (261 days, 260 returns: 4 windows of 64)."""
    return finance.planted_market(finance.PLANTED_STRENGTHS["easy"], tickers=3, seed=0, **SPANS)


def tiny_train_env():
    return tiny_market().env("train", 4, random_start=True, episode_length=32)


def tiny_eval_env():
    return tiny_market().env("valid")


def pendulum_env(num_envs=4):
    return podracer.make_env("pendulum", num_envs=num_envs)


# ---------------------------------------------------------------------------- the setting
def test_bad_fitness_settings_fail_at_once_with_the_fix():
    for bad, message in [({"name": "nope"}, "unknown fitness 'nope'; registered: .*windowed"),
                         ({"name": "windowed", "score": "sortino"}, "unknown score 'sortino'"),
                         ({"name": "windowed", "scheme": "kfold"}, "unknown scheme 'kfold'"),
                         ({"name": "windowed", "n_windowz": 3}, "does not take \\['n_windowz'\\]"),
                         ({"name": "windowed", "n_windows": 0}, "n_windows must be >= 1"),
                         ({"name": "return", "window": 2}, "does not take the settings \\['window'\\]"),
                         ({"scheme": "windows"}, "a mapping \\{'name': ..., \\*\\*settings\\}"), (3, "got 3")]:
        with pytest.raises(ValueError, match=message):
            TournamentConfig(fitness=bad)


def test_the_setting_round_trips_and_older_stores_keep_the_mean_eval_return():
    config = TournamentConfig(fitness={"name": "windowed", "n_windows": 4, "score": "sharpe"})
    assert TournamentConfig.from_yaml(config.to_yaml()).fitness == config.fitness
    assert TournamentConfig(fitness="windowed").fitness == {"name": "windowed"}
    old = {k: v for k, v in TournamentConfig().to_dict().items() if k != "fitness"}
    assert TournamentConfig.from_dict(old).fitness is None  # written before the setting: as it scored then
    assert TournamentConfig().differences(TournamentConfig(fitness=None)) == ["fitness: 'auto' != None"]


def test_auto_means_the_eval_envs_task_default_else_the_mean_eval_return():
    assert isinstance(make_fitness("auto", pendulum_env()), EvalReturn)
    assert isinstance(make_fitness(None, tiny_eval_env()), EvalReturn)
    assert isinstance(make_fitness("return", tiny_eval_env()), EvalReturn)  # the old score, by name
    for env in (tiny_eval_env(), finance.PortfolioVecEnv(tiny_market().close["valid"])):  # both trading tasks
        auto = make_fitness("auto", env)
        assert isinstance(auto, WindowedFitness) and finance.DEFAULT_FITNESS["name"] == "windowed"
        assert (auto.scheme, auto.score, auto.annualize) == ("windows", "sharpe", True)
        assert auto.settings == {"n_windows": 4}
    fitness = make_fitness({"name": "windowed", "n_windows": 3, "score": "mean"})
    assert (fitness.scheme, fitness.score, fitness.settings) == ("windows", "mean", {"n_windows": 3})
    assert fitness.describe() == "annualised mean return, mean of 3 consecutive windows"
    assert make_fitness("auto", tiny_eval_env()).describe(260) == \
        "annualised Sharpe ratio, mean of 4 consecutive windows of 64 days"


def test_the_windowed_fitness_refuses_an_env_it_cannot_backtest_or_a_split_too_short():
    with pytest.raises(TypeError, match="backtests a trading env.*fitness=None"):
        WindowedFitness()(lambda obs: obs, pendulum_env())
    with pytest.raises(ValueError, match="260 daily returns, too few.*window_size=100"):
        WindowedFitness(n_windows=4, window_size=100)(lambda obs: torch.zeros(1, 3), tiny_eval_env())


# ---------------------------------------------------------------------------- finance's fitness
def test_windowed_fitness_is_the_mean_sharpe_ratio_of_consecutive_windows_of_the_backtest():
    env = tiny_eval_env()

    def policy(obs):  # follows the planted signal (the last feature per stock): buys what it predicts up
        return torch.tanh(obs[:, -3:] * 5.0)

    per_period = WindowedFitness("windows", "sharpe", annualize=False, n_windows=4)(policy, env)
    run = finance.backtest(policy, env, baselines=False)
    r = run.returns().to_numpy()
    w = (len(r) - 1) // 4
    windows = r[len(r) - 4 * w:].reshape(4, w)
    sharpe = windows.mean(axis=1) / windows.std(axis=1, ddof=1)
    assert per_period.window_scores == pytest.approx(sharpe) and per_period.score == pytest.approx(sharpe.mean())
    assert per_period.score_std == pytest.approx(sharpe.std(ddof=1)) and per_period.returns == pytest.approx(r)
    # By default in the units of every Sharpe ratio the reports show: annualised, sqrt(252) here.
    annual = WindowedFitness("windows", "sharpe", n_windows=4)(policy, env)
    assert run.bars_per_year == 252 and annual.score == pytest.approx(sharpe.mean() * math.sqrt(252))
    assert annual.window_scores == pytest.approx(sharpe * math.sqrt(252))
    mean = WindowedFitness("single", "mean", annualize=False)(policy, env)
    assert len(mean.window_scores) == 1 and mean.score == pytest.approx(r[1:].mean()) and mean.score_std is None
    assert WindowedFitness("single", "mean")(policy, env).score == pytest.approx(252 * r[1:].mean())
    with pytest.raises(ValueError, match="annualize must be True or False"):
        WindowedFitness(annualize="yes")


# ---------------------------------------------------------------------------- a pod scores as configured
@pytest.mark.slow  # about 7 s on a busy 2-core machine: two generations and three backtests
def test_a_pods_entry_carries_the_configured_fitness_of_its_agent(tmp_path):
    config = TournamentConfig(agent_config=TINY_PPO, pods=1, generation_steps=128, generations=1, seed=3,
                              fitness={"name": "windowed", "n_windows": 4, "score": "sharpe"})
    pod = Pod(PodSpec(str(tmp_path), 0, config, tiny_train_env, tiny_eval_env))
    entry = pod.run_generation(pod.board.claim(0))
    direct = WindowedFitness(n_windows=4, score="sharpe")(pod.board.load_agent(entry), tiny_eval_env())
    assert entry.score == pytest.approx(direct.score) and entry.window_scores == pytest.approx(direct.window_scores)
    assert entry.score_std == pytest.approx(direct.score_std) and len(entry.window_scores) == 4
    # The board's trials matrix comes from the board itself, and equals a re-run on the validation split.
    pod.run_generation(pod.board.claim(0))
    stored = finance.trial_returns_from_leaderboard(pod.board)
    rerun = finance.trial_returns_from_leaderboard(pod.board, tiny_eval_env())
    assert stored.shape == rerun.shape == (260, 2)
    np.testing.assert_allclose(stored.to_numpy(), rerun.to_numpy(), rtol=1e-9)


def test_a_pod_with_the_default_fitness_submits_the_mean_eval_return(tmp_path):
    config = TournamentConfig(agent_config=TINY_PENDULUM, preset=None, pods=1,
                              generation_steps=64, generations=1, fitness=None)
    pod = Pod(PodSpec(str(tmp_path), 0, config, pendulum_env, pendulum_env))
    entry = pod.run_generation(pod.board.claim(0))
    direct = podracer.evaluate(pod.board.load_agent(entry), pendulum_env(), seed=config.eval_seed)
    assert entry.score == pytest.approx(direct["eval/return_mean"])
    assert entry.score_std == pytest.approx(direct["eval/return_std"])
    assert entry.window_scores is None and entry.returns is None
    pod.board.submit(pod.board.load_agent(entry), -1.0)  # a second trial, as a board without returns has
    with pytest.raises(ValueError, match="kept no validation returns.*market.env\\('valid'\\)"):
        finance.trial_returns_from_leaderboard(pod.board)


def test_a_trading_pod_scores_on_windows_by_default_and_as_told_otherwise(tmp_path):
    auto = TournamentConfig(agent_config=TINY_PPO, pods=1, generations=1)  # fitness="auto", the default
    default = Pod(PodSpec(str(tmp_path / "auto"), 0, auto, tiny_train_env, tiny_eval_env))
    assert isinstance(default.fitness, WindowedFitness) and default.fitness.settings == {"n_windows": 4}
    config = TournamentConfig(agent_config=TINY_PPO, pods=1, generation_steps=128, generations=1, seed=3,
                              fitness="return")  # the score before the windows: the mean eval return, by name
    pod = Pod(PodSpec(str(tmp_path / "return"), 0, config, tiny_train_env, tiny_eval_env))
    entry = pod.run_generation(pod.board.claim(0))
    direct = podracer.evaluate(pod.board.load_agent(entry), tiny_eval_env(), seed=config.eval_seed)
    assert isinstance(pod.fitness, EvalReturn) and entry.score == pytest.approx(direct["eval/return_mean"])
    assert entry.window_scores is None and entry.returns is None


def test_a_tournament_keeps_the_fitness_it_began_with_when_resumed(tmp_path, monkeypatch):
    factories = dict(make_env=tiny_train_env, make_eval_env=tiny_eval_env)
    settings = dict(agent_config=TINY_PPO, pods=1, generations=1, generation_steps=128)
    run = tmp_path / "run"
    t = podracer.Tournament(tiny_train_env, tiny_eval_env, store=run, **settings)
    assert t.config.fitness == finance.DEFAULT_FITNESS  # "auto", resolved once for the eval env's task
    assert TournamentConfig.from_yaml(run / "tournament.yaml").fitness == finance.DEFAULT_FITNESS
    # A later release changes the task's default: the store goes on as it began.
    monkeypatch.setitem(fitness_module._TASK_DEFAULTS, "stock_trading", {"name": "return"})
    assert podracer.Tournament.from_store(run, **factories).config.fitness == finance.DEFAULT_FITNESS
    with pytest.raises(ValueError, match="different tournament \\(fitness: .*from_store"):
        podracer.Tournament(tiny_train_env, tiny_eval_env, store=run, **settings)  # "auto" now means another
    # A store written before tasks had defaults says "auto": it meant the mean eval return, and still does.
    old = TournamentConfig.from_yaml(run / "tournament.yaml")
    old.fitness = "auto"
    (tmp_path / "old").mkdir()
    old.to_yaml(tmp_path / "old" / "tournament.yaml")
    assert podracer.Tournament.from_store(tmp_path / "old", **factories).config.fitness is None
    assert podracer.Tournament(pendulum_env, pendulum_env, store=tmp_path / "p", generations=1).config.fitness == \
        {"name": "return"}


# ---------------------------------------------------------------------------- the board
OLD_ENTRIES = """
CREATE TABLE entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT, parent_id INTEGER, generation INTEGER NOT NULL, pod INTEGER NOT NULL,
    agent TEXT NOT NULL, hparams TEXT NOT NULL, changes TEXT NOT NULL, env_steps INTEGER NOT NULL,
    wall_time REAL NOT NULL, score REAL NOT NULL, score_std REAL, checkpoint TEXT NOT NULL, checksum TEXT NOT NULL,
    created_at REAL NOT NULL, corrupt INTEGER NOT NULL DEFAULT 0, ticket INTEGER UNIQUE);
INSERT INTO entries (generation, pod, agent, hparams, changes, env_steps, wall_time, score, checkpoint, checksum,
                     created_at) VALUES (0, 0, 'ppo', '{}', '{}', 10, 1.0, -5.0, 'checkpoints/x.pt', 'abc', 0.0);
"""


def test_a_store_written_before_window_scores_opens_read_only_and_migrated(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    with sqlite3.connect(tmp_path / "board.sqlite") as db:
        db.executescript(OLD_ENTRIES)
        db.executescript(SCHEMA)  # the other tables; entries exists already, without the new columns
    (old,) = Leaderboard(tmp_path, read_only=True).entries()  # not migrated: the columns are absent
    assert (old.score, old.global_step, old.window_scores, old.returns) == (-5.0, 10, None, None)
    board = Leaderboard(tmp_path)  # writable: the columns are added, empty in the old rows
    assert board.get(old.id) == old and board.validation_returns().empty
    new = board._insert("checkpoints/y.pt", "def", 1.0, agent_name="ppo", window_scores=[0.1, float("nan")],
                        returns=[0.01, -0.02, 0.0])
    assert new.window_scores[0] == 0.1 and math.isnan(new.window_scores[1]) and new.returns == (0.01, -0.02, 0.0)
    assert list(board.validation_returns().columns) == [new.id]
    assert "returns" not in board.to_frame().columns and "window_scores" in board.to_frame().columns


# ---------------------------------------------------------------------------- the exploit rule
def test_a_pod_copies_the_leader_only_when_the_paired_window_difference_survives_its_noise(tmp_path):
    config = TournamentConfig(agent_config={"hidden_sizes": (8,)}, preset=None, pods=2, keep_top=1,
                              exploit_margin=2.0, explore_prob=0.0)
    pod = Pod(PodSpec(str(tmp_path), 0, config, pendulum_env, pendulum_env))  # 4 eval episodes
    agent = pod.start_agent(random.Random(0), seed=0)[0]
    hp = {k: getattr(agent.config, k) for k in mutable_bounds(agent.config)}
    ckpt = agent.checkpoint()

    def submit(windows):
        return pod.board.submit(ckpt, float(np.mean(windows)), score_std=float(np.std(windows, ddof=1)),
                                window_scores=windows, hparams=hp)

    leader = submit([0.30, -0.10, 0.20, 0.00])
    noisy = submit([0.00, 0.10, 0.10, 0.12])  # 0.02 behind, paired differences .30 -.20 .10 -.12: noise
    behind = submit([0.20, -0.20, 0.10, -0.10])  # 0.1 behind in every window: beyond any noise
    assert paired_difference(leader.window_scores, behind.window_scores) == pytest.approx((0.1, 0.0))
    candidates = pod.board.top(5)
    pod.last = noisy
    assert pod.leading(candidates) == noisy  # trains on, unchanged
    pod.last = behind
    assert pod.leading(candidates) is None  # copies the leader and mutates
    # Without window scores the same entries fall back to Welch over the eval episodes: their spread
    # across windows (0.17 and 0.18) puts 0.1 within the margin, and it would have trained on.
    plain = [pod.board.submit(ckpt, e.score, score_std=e.score_std, hparams=hp) for e in (leader, behind)]
    pod.last = plain[1]
    assert pod.leading([plain[0], plain[1]]) == plain[1]


def test_window_scores_and_returns_reach_the_board_through_the_ray_client_and_server(tmp_path):
    """The pod's submission under the Ray backend, its actor called directly (no Ray started)."""
    ray_backend = pytest.importorskip("podracer.tournament.ray_backend", reason="the ray extra is not installed")
    server = ray_backend.LeaderboardServer(str(tmp_path))
    client = ray_backend.RemoteLeaderboard(server)
    client._call = lambda method, *args, **kwargs: getattr(server, method)(*args, **kwargs)
    agent = podracer.make_agent("ppo", pendulum_env(), preset=None, hidden_sizes=(8,), verbose=False)
    entry = client.submit(agent, 0.2, score_std=0.1, window_scores=(0.1, 0.3), returns=(0.01, 0.02, -0.01),
                          agent_name="ppo")
    assert (entry.window_scores, entry.returns) == ((0.1, 0.3), (0.01, 0.02, -0.01))
    assert client.top(1)[0] == entry == Leaderboard(tmp_path).get(entry.id)
