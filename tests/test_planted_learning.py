"""The planted task's setting in ``benchmarks/tournament_vs_single.py``: the env in which PPO learns a
planted signal (long-short target weights, no costs, short episodes; docs/results/selection_power.md),
and the true skill of a ``PortfolioVecEnv`` backtest. No training here."""

import inspect
import math
import pickle

import pytest
import torch

from finance.planted import PLANTED_STRENGTHS, planted_market, signal_sharpe
from finance.portfolio_env import PortfolioVecEnv
from test_benchmarks_run import script


@pytest.fixture(scope="module")
def bench():
    return script("tournament_vs_single")


@pytest.fixture(scope="module")
def market(bench):
    return planted_market(PLANTED_STRENGTHS["moderate"], seed=0, **bench.PLANTED_SPLITS, **bench.PLANTED)


def test_the_planted_arms_train_on_long_short_target_weights_without_costs(bench, market):
    assert inspect.signature(bench.planted).parameters["env"].default == "portfolio"
    make_env, make_valid, make_test, preset = bench.planted_envs(market)
    assert preset == "portfolio"  # the preset arm's config
    env, valid, test = make_env(), make_valid(), make_test()
    for e in (env, valid, test):
        assert isinstance(e, PortfolioVecEnv)
        assert e.long_short and e.cost_pct == 0.0 and e.window == 1 and e.dtype == torch.float32
        assert e.feature_names == ["signal"]
    assert env.random_start and env.episode_length == bench.PLANTED_EPISODE_DAYS == 64
    assert env.num_envs == 64  # the portfolio preset's; rollouts of 32 x 64 divide the generations
    assert bench.BUDGETS["planted"]["full"].generation_steps % (32 * env.num_envs) == 0
    assert valid.num_envs == test.num_envs == 1 and not valid.random_start
    assert valid.dates.equals(market.close["valid"].index) and test.dates.equals(market.close["test"].index)
    pickle.dumps(make_env)  # a tournament's pods get the factory pickled


def test_the_preset_arm_is_the_portfolio_preset_with_a_short_horizon(bench, market, monkeypatch):
    """γ = 0.5 for the hand-tuned arm (the preset alone equals PPO's defaults on 64 accounts); the
    default arm keeps PPO's defaults."""
    made = []

    class Built(Exception):
        pass

    def make_agent(agent, env, **kwargs):
        made.append(kwargs)
        raise Built  # stop before any training

    monkeypatch.setattr(bench.podracer, "make_agent", make_agent)
    make_env, make_valid, _, preset = bench.planted_envs(market)
    budget = bench.BUDGETS["planted"]["quick"]
    for arm in ("preset", "default"):
        with pytest.raises(Built):
            bench.train_arm(arm, make_env, make_valid, preset, budget, 0, bench.PLANTED_PRESET_CONFIG["portfolio"])
    assert made[0]["preset"] == "portfolio" and made[0]["gamma"] == 0.5
    assert made[1]["preset"] is None and "gamma" not in made[1]
    assert bench.PLANTED_PRESET_CONFIG["stock"] == {}  # the stock setting's arms as before


def test_the_stock_env_stays_an_option_and_a_bad_name_is_refused(bench, market):
    from finance import demo
    from finance.env import StockTradingVecEnv

    make_env, _, make_test, preset = bench.planted_envs(market, "stock")
    assert preset == "stock_trading" and isinstance(make_test(), StockTradingVecEnv)
    assert make_env().num_envs == demo.PRESET.num_envs
    with pytest.raises(ValueError, match="portfolio"):
        bench.planted_envs(market, "portfolios")


def test_true_skill_of_a_portfolio_backtest_reads_its_weights_on_the_fill_day(bench):
    """A policy holding w = signal / 10 in a long-short portfolio env with no costs: its true Sharpe
    ratio is the signal's best use under the next-close fill. Read as a stock env's backtest (weights
    on the decision day) it would be a day late and lower."""
    from finance.backtest import backtest

    ic = PLANTED_STRENGTHS["easy"]
    fresh = planted_market(ic, seed=bench.PLANTED_FRESH_SEED, train=("2001-01-01", "2004-12-31"), valid=None,
                           test=("2005-01-01", "2012-12-31"), **bench.PLANTED)
    make_test = bench.planted_envs(fresh)[2]
    result = backtest(lambda obs: (obs[:, -10:] * 0.1).clamp(-1, 1), make_test(), baselines=False)
    best = signal_sharpe(ic, num_stocks=10, lag=1, periods_per_year=252)  # 4.50
    fill = bench.true_skill(result, fresh.expected_return["test"], "fill")
    decision = bench.true_skill(result, fresh.expected_return["test"])
    assert math.isclose(fill, best, abs_tol=0.4), (fill, best)
    assert decision < fill - 0.2, (decision, fill)
    with pytest.raises(ValueError, match="fill"):
        bench.true_skill(result, fresh.expected_return["test"], "later")
