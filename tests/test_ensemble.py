"""Ensembles beyond the top k by score: diverse members, score weights, votes, and their errors."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
import torch

import podracer
from podracer.agents.ppo import PPO
from podracer.tournament import (Ensemble, Tournament, action_similarity, returns_similarity, score_weights,
                                 select_diverse)

TINY_PPO = {**dict(podracer.get_preset("ppo", "pendulum").config), "hidden_sizes": (16,)}
make_env = functools.partial(podracer.make_env, "pendulum", num_envs=4)


class Fixed:
    """A stand-in agent whose action for every observation is ``action``."""

    def __init__(self, action, space):
        self.action, self.action_space, self.observation_space, self.device = action, space, space, "cpu"

    def act(self, obs, deterministic=False):
        a = torch.as_tensor(self.action)
        return a.expand(len(obs), *a.shape).clone()


BOX = gym.spaces.Box(-1.0, 1.0, (2,))
DISCRETE = gym.spaces.Discrete(3)
OBS = torch.zeros(5, 2)


def correlated_returns(seed=0, periods=250):
    """Four candidates: 0 the best, 1 a near-duplicate of 0, 2 and 3 independent of both."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=periods)
    return np.stack([base, base + 0.05 * rng.normal(size=periods), rng.normal(size=periods),
                     rng.normal(size=periods)], axis=1)


# ---------------------------------------------------------------------------- selection
def test_diverse_selection_prefers_an_uncorrelated_entry_to_a_near_duplicate():
    scores = [1.0, 0.98, 0.9, 0.2]
    sim = returns_similarity(correlated_returns())
    assert sim[0, 1] > 0.99 and abs(sim[0, 2]) < 0.2
    assert select_diverse(scores, sim, 2, penalty=0.0) == [0, 1]  # no penalty: the top 2 by score
    assert select_diverse(scores, sim, 2, penalty=1.0) == [0, 2]
    # The duplicate is half-correlated with {0, 2}: worth more than weak 3 at penalty 1, not at 10.
    assert select_diverse(scores, sim, 3, penalty=1.0) == [0, 2, 1]
    assert select_diverse(scores, sim, 3, penalty=10.0) == [0, 2, 3]


def test_returns_similarity_handles_gaps_and_constant_series():
    r = correlated_returns()
    r[:10, 2] = np.nan
    r[:, 3] = 0.0  # an agent that never trades: no correlation, counted as 0
    sim = returns_similarity(r)
    assert np.allclose(np.diag(sim), 1.0) and sim[0, 3] == 0.0 and np.isfinite(sim).all()
    with pytest.raises(ValueError, match="periods x candidates"):
        returns_similarity(np.zeros(5))


def test_action_similarity_separates_a_near_duplicate_from_another_policy():
    torch.manual_seed(0)
    env = make_env()
    a, b = (PPO(env.single_observation_space, env.single_action_space, TINY_PPO) for _ in range(2))
    twin = PPO.from_checkpoint(a.checkpoint())
    with torch.no_grad():
        for p in twin.model.actor.parameters():
            p.add_(1e-4 * torch.randn_like(p))
    obs = torch.randn(64, 3)
    sim = action_similarity([a, twin, b], obs)
    assert sim[0, 1] > 0.9 and sim[0, 2] < 0.5
    assert select_diverse([1.0, 0.99, 0.9], sim, 2, penalty=3.0) == [0, 2]
    discrete = action_similarity([Fixed(0, DISCRETE), Fixed(0, DISCRETE), Fixed(2, DISCRETE)], OBS)
    np.testing.assert_allclose(discrete, [[1, 1, 0], [1, 1, 0], [0, 0, 1]])


def test_select_diverse_rejects_bad_input():
    sim = np.eye(2)
    with pytest.raises(ValueError, match="2 x 2"):
        select_diverse([1.0, 0.5], np.eye(3), 1)
    with pytest.raises(ValueError, match="penalty"):
        select_diverse([1.0, 0.5], sim, 1, penalty=-1)
    with pytest.raises(ValueError, match="k must"):
        select_diverse([1.0, 0.5], sim, 0)
    assert select_diverse([-np.inf, 0.5, -np.inf], np.eye(3), 3) == [1, 0, 2]  # diverged entries last


# ---------------------------------------------------------------------------- weights and combination
def test_score_weights_sum_to_one_and_follow_scores():
    for method in ("softmax", "positive"):
        w = score_weights([0.5, 2.0, 1.0], method)
        assert w.sum() == pytest.approx(1.0) and w[1] > w[2] > w[0]
    np.testing.assert_allclose(score_weights([0.3, 0.3]), [0.5, 0.5])
    np.testing.assert_allclose(score_weights([-1.0, 3.0, 1.0], "positive"), [0.0, 0.75, 0.25])
    # The softmax is in units of the scores' spread: a return of -200 weighs like a Sharpe ratio of 1.
    np.testing.assert_allclose(score_weights([-200.0, -100.0]), score_weights([1.0, 2.0]))
    assert score_weights([1.0, 2.0], temperature=100.0).std() < score_weights([1.0, 2.0]).std()
    assert score_weights([1.0, -np.inf])[1] == 0.0
    with pytest.raises(ValueError, match="use 'softmax'"):
        score_weights([-1.0, 0.0], "positive")
    with pytest.raises(ValueError, match="valid: 'softmax', 'positive'"):
        score_weights([1.0], "rank")


def test_weighted_mean_and_median_of_box_actions():
    agents = [Fixed([1.0, 0.0], BOX), Fixed([0.0, 0.0], BOX), Fixed([-1.0, 1.0], BOX)]
    assert torch.allclose(Ensemble(agents)(OBS), torch.tensor([0.0, 1 / 3]).expand(5, 2))  # default: the mean
    weighted = Ensemble(agents, combine="weighted", weights=[2.0, 1.0, 1.0])
    np.testing.assert_allclose(weighted.weights, [0.5, 0.25, 0.25])
    assert torch.allclose(weighted(OBS), torch.tensor([0.25, 0.25]).expand(5, 2))
    assert torch.allclose(Ensemble(agents, combine="median")(OBS), torch.tensor([0.0, 0.0]).expand(5, 2))


def test_majority_and_weighted_vote_of_discrete_actions():
    agents = [Fixed(2, DISCRETE), Fixed(2, DISCRETE), Fixed(1, DISCRETE)]
    assert Ensemble(agents)(OBS).tolist() == [2] * 5
    assert Ensemble(agents, combine="vote")(OBS).tolist() == [2] * 5
    heavy_minority = Ensemble(agents, combine="weighted", weights=[0.2, 0.2, 0.6])
    assert heavy_minority(OBS).tolist() == [1] * 5


def test_bad_combinations_raise_clear_errors():
    box = [Fixed([0.0, 0.0], BOX)]
    with pytest.raises(ValueError, match="valid: 'auto', 'mean', 'median', 'vote', 'weighted'"):
        Ensemble(box, combine="average")
    with pytest.raises(ValueError, match="use 'median'"):
        Ensemble(box, combine="vote")
    with pytest.raises(ValueError, match="use 'vote'"):
        Ensemble([Fixed(0, DISCRETE)], combine="mean")
    with pytest.raises(ValueError, match="needs weights"):
        Ensemble(box, combine="weighted")
    with pytest.raises(ValueError, match="one weight per agent"):
        Ensemble(box, combine="weighted", weights=[0.5, 0.5])
    with pytest.raises(ValueError, match="non-negative"):
        Ensemble(box * 2, combine="weighted", weights=[1.0, -1.0])


# ---------------------------------------------------------------------------- Tournament.ensemble
@pytest.fixture
def board_run(tmp_path):
    """A tournament whose board holds 4 PPO entries with kept returns: 0 best, 1 its near-duplicate
    (same weights, returns correlated 0.999), 2 and 3 other agents with independent returns."""
    torch.manual_seed(0)
    t = Tournament(make_env, make_env, agent="ppo", pods=1, store=tmp_path / "store", agent_config=TINY_PPO)
    env = make_env()
    agents = [PPO(env.single_observation_space, env.single_action_space, TINY_PPO) for _ in range(3)]
    returns = correlated_returns().T
    for agent, score, r in zip([agents[0], agents[0], agents[1], agents[2]], [1.0, 0.98, 0.9, 0.2], returns):
        t.board.submit(agent, score, returns=r.tolist())
    return t


def test_tournament_ensemble_default_is_the_top_k_mean(board_run):
    ens = board_run.ensemble(2)
    assert ens.combine == "auto" and ens.weights is None
    assert ens.entries == [e.id for e in board_run.board.top(2)]
    obs = torch.randn(8, 3)
    members = torch.stack([a.act(obs, deterministic=True) for a in ens.agents])
    torch.testing.assert_close(ens(obs), members.mean(0))


def test_tournament_ensemble_diverse_and_weighted(board_run):
    ids = [e.id for e in board_run.board.entries()]
    assert board_run.ensemble(2, select="diverse").entries == [ids[0], ids[2]]  # returns: the duplicate skipped
    by_actions = board_run.ensemble(2, select="diverse", diversity="actions", penalty=3.0)
    assert by_actions.entries == [ids[0], ids[2]]  # identical actions: the duplicate skipped without returns too
    weighted = board_run.ensemble(3, combine="weighted", weighting="positive")
    np.testing.assert_allclose(weighted.weights, np.array([1.0, 0.98, 0.9]) / 2.88)


def test_tournament_ensemble_bad_names_list_the_valid_ones(board_run):
    with pytest.raises(ValueError, match="unknown select 'best'; valid: 'top', 'diverse'"):
        board_run.ensemble(2, select="best")
    with pytest.raises(ValueError, match="unknown combine 'avg'"):
        board_run.ensemble(2, combine="avg")
    with pytest.raises(ValueError, match="unknown diversity 'kl'; valid: 'auto', 'returns', 'actions'"):
        board_run.ensemble(2, select="diverse", diversity="kl")
    with pytest.raises(ValueError, match="pool must be"):
        board_run.ensemble(3, select="diverse", pool=2)


def test_diversity_by_returns_needs_returns(tmp_path):
    t = Tournament(make_env, make_env, agent="ppo", pods=1, store=tmp_path / "store", agent_config=TINY_PPO)
    env = make_env()
    for score in (1.0, 0.5):
        t.board.submit(PPO(env.single_observation_space, env.single_action_space, TINY_PPO), score)
    with pytest.raises(ValueError, match="use diversity='actions'"):
        t.ensemble(2, select="diverse", diversity="returns")
    assert len(t.ensemble(2, select="diverse")) == 2  # auto: actions on the eval env's observations
