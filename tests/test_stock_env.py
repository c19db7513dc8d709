"""StockTradingVecEnv: protocol, accounting invariants, batching, no look-ahead, turbulence, errors.

Synthetic markets only (no network, no bundled data needed): a few random-walk stocks with
features and a turbulence series shaped like finance.data / finance.features output.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from finance.env import StockTradingVecEnv
from podracer.envs import check_env


def synthetic_market(T: int = 80, S: int = 5, F: int = 3, seed: int = 0):
    """close (T x S), features (MultiIndex (feature, ticker)), turbulence (T,), as the data helpers return."""
    rng = np.random.default_rng(seed)
    dates = pd.bdate_range("2015-01-02", periods=T, name="date")
    tickers = [f"T{i}" for i in range(S)]
    close = pd.DataFrame(rng.uniform(20, 300, S) * np.exp(np.cumsum(rng.normal(0, 0.02, (T, S)), axis=0)),
                         index=dates, columns=tickers)
    feats = {f"f{j}": pd.DataFrame(rng.normal(size=(T, S)), index=dates, columns=tickers) for j in range(F)}
    features = pd.concat(feats, axis=1, names=["feature", "ticker"])
    turbulence = pd.Series(rng.gamma(2.0, 10.0, T), index=dates, name="turbulence")
    return close, features, turbulence


def random_actions(n: int, s: int, gen: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    # A little beyond [-1, 1] on purpose: the env clips.
    return (torch.rand(n, s, generator=gen, dtype=dtype) * 2.4 - 1.2)


# ---------------------------------------------------------------------------- protocol
def test_check_env_passes_training_and_eval_configs():
    close, features, turb = synthetic_market()
    train = StockTradingVecEnv(close, features, turb, num_envs=8, episode_length=20, random_start=True,
                               cash_range=(1e4, 2e6), turbulence_threshold=40.0, seed=0)
    check_env(train, num_steps=60)
    check_env(train.evaluation_env(num_envs=3), num_steps=90)


def test_observation_layout_and_scales():
    close, features, _ = synthetic_market(T=30, S=4, F=2)
    env = StockTradingVecEnv(close, features, num_envs=2, initial_cash=1e5, max_trade_shares=10)
    obs, info = env.reset()
    S, F = 4, 2
    assert obs.shape == (2, 1 + 2 * S + F * S) and len(env.obs_names) == obs.shape[1]
    assert env.obs_names[0] == "cash" and env.obs_names[1 + S + S] == "f0/T0"
    assert torch.all(obs[:, 0] == 1.0) and torch.all(obs[:, 1:1 + S] == 0.0)
    assert torch.allclose(obs[:, 1 + S:1 + 2 * S], torch.zeros(2, S), atol=1e-7)  # log(close[0] / close[0])
    # features feature-major: f0 of every stock, then f1
    expected_feats = np.concatenate([features["f0"].iloc[0].to_numpy(), features["f1"].iloc[0].to_numpy()])
    assert np.allclose(obs[0, 1 + 2 * S:].numpy(), expected_feats, atol=1e-6)
    obs, *_ , info = env.step(torch.full((2, S), 0.5))
    p1 = close.iloc[1].to_numpy()
    assert np.allclose(obs[0, 0].item(), info["cash"][0].item() / 1e5, rtol=1e-6)
    assert np.allclose(obs[0, 1:1 + S].numpy(), 5 * p1 / 1e5, rtol=1e-6)  # round(0.5 * 10) = 5 shares each
    assert np.allclose(obs[0, 1 + S:1 + 2 * S].numpy(), np.log(p1 / close.iloc[0].to_numpy()), atol=1e-6)


# ---------------------------------------------------------------------------- accounting
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_accounting_invariants_under_random_actions(dtype):
    close, features, _ = synthetic_market(T=60, S=6, seed=1)
    prices = torch.tensor(close.to_numpy(), dtype=torch.float64)
    n, c, hmax, ic, scale = 256, 2e-3, 200, 1e5, 100.0
    # Small, random starting cash so the cash limit on buys binds often.
    env = StockTradingVecEnv(close, features, num_envs=n, initial_cash=ic, max_trade_shares=hmax, cost_pct=c,
                             episode_length=25, random_start=True, cash_range=(2e3, 2e5), reward_scale=scale,
                             seed=3, dtype=dtype, execution="close")  # the fill checks below read close[t]
    tol = 1e-12 if dtype == torch.float64 else 2e-6
    gen = torch.Generator().manual_seed(0)
    limited = 0
    obs, _ = env.reset(seed=1)
    for _ in range(60):
        cash0, hold0, value0, day0 = env.cash.double(), env.holdings.double(), env.value.double(), env.day.clone()
        actions = random_actions(n, 6, gen, dtype=torch.float64 if dtype == torch.float64 else torch.float32)
        actions_before = actions.clone()
        obs, rewards, terminated, truncated, info = env.step(actions)
        assert torch.equal(actions, actions_before), "step must not modify the caller's actions"
        cash, hold = info["cash"].double(), info["holdings"].double()
        trades, costs = info["trades"].double(), info["costs"].double()
        p_exec, p_mark = prices.index_select(0, day0), prices.index_select(0, info["day"])
        assert torch.equal(info["day"], day0 + 1)
        assert bool((cash >= 0).all()) and bool((hold >= 0).all()), "no negative cash, no short selling"
        assert torch.equal(hold, hold.round()) and torch.equal(trades, trades.round()), "whole shares"
        assert torch.equal(hold, hold0 + trades)
        assert bool((trades.abs() <= hmax).all())
        traded = (trades.abs() * p_exec).sum(1)
        assert torch.allclose(costs, c * traded, rtol=tol, atol=tol * ic), "cost = cost_pct x traded value"
        assert torch.allclose(info["traded_value"].double(), traded, rtol=tol, atol=tol * ic)
        assert torch.allclose(cash, cash0 - (trades * p_exec).sum(1) - costs, rtol=tol, atol=tol * ic)
        value = info["account_value"].double()
        assert torch.allclose(value, cash + (hold * p_mark).sum(1), rtol=tol, atol=tol * ic)
        assert torch.allclose(rewards.double(), scale * (value - value0) / ic, rtol=1e-5, atol=1e-5)
        # Orders the cash could pay for execute exactly as asked; sells are capped by holdings.
        wanted = (actions.double().clamp(-1, 1) * hmax).round()
        sells_ok = torch.where(wanted < 0, trades == torch.maximum(wanted, -hold0), True)
        assert bool(sells_ok.all())
        cash_after_sells = cash0 + (-trades.clamp(max=0) * p_exec).sum(1) * (1 - c)
        wanted_cost = (wanted.clamp(min=0) * p_exec).sum(1) * (1 + c)
        free = wanted_cost <= cash_after_sells * (1 - 1e-9)
        assert torch.equal(trades.clamp(min=0)[free], wanted.clamp(min=0)[free])
        assert bool((trades.clamp(min=0) <= wanted.clamp(min=0)).all())
        limited += int((~free & (wanted_cost > 0)).sum())
        # After autoreset: a fresh all-cash account where the episode ended.
        done = truncated
        assert bool((env.holdings[done] == 0).all()) and bool((env.elapsed[done] == 0).all())
        assert not bool(terminated.any())
    assert limited > 100, "the test must exercise cash-limited buys"


def test_cash_limited_buys_are_scaled_proportionally():
    close = pd.DataFrame({"A": [100.0, 100.0, 100.0], "B": [50.0, 50.0, 50.0]},
                         index=pd.bdate_range("2020-01-01", periods=3))
    env = StockTradingVecEnv(close, initial_cash=10_000.0, max_trade_shares=100, cost_pct=0.0)
    # Wants 100 A (10,000) + 100 B (5,000) = 15,000 > 10,000 cash: scale 2/3, round down.
    _, _, _, _, info = env.step(torch.tensor([[1.0, 1.0]]))
    assert info["trades"].tolist() == [[66.0, 66.0]]
    assert info["cash"].item() == pytest.approx(10_000 - 66 * 150)
    # Sells settle before buys: selling 66 A funds buying B.
    _, _, _, _, info = env.step(torch.tensor([[-1.0, 1.0]]))
    assert info["trades"].tolist() == [[-66.0, 100.0]]


def test_batched_equals_single_env_runs():
    close, features, turb = synthetic_market(T=40, S=4, seed=2)
    n, steps = 6, 70  # crosses two episode ends (autoreset)
    kw = dict(initial_cash=5e4, max_trade_shares=50, episode_length=30, turbulence_threshold=35.0)
    batched = StockTradingVecEnv(close, features, turb, num_envs=n, **kw)
    singles = [StockTradingVecEnv(close, features, turb, num_envs=1, **kw) for _ in range(n)]
    gen = torch.Generator().manual_seed(5)
    acts = [random_actions(n, 4, gen) for _ in range(steps)]
    ob, _ = batched.reset()
    outs = [env.reset()[0] for env in singles]
    assert torch.equal(ob, torch.cat(outs))
    for a in acts:
        ob, rb, _, tb, ib = batched.step(a)
        res = [env.step(a[i:i + 1]) for i, env in enumerate(singles)]
        assert torch.equal(ob, torch.cat([r[0] for r in res]))
        assert torch.equal(rb, torch.cat([r[1] for r in res]))
        assert torch.equal(tb, torch.cat([r[3] for r in res]))
        for key in ("cash", "holdings", "account_value", "costs", "final_obs"):
            assert torch.equal(ib[key], torch.cat([r[4][key] for r in res])), key


# ---------------------------------------------------------------------------- no look-ahead
def _run(close, features, turb, actions, **env_kwargs):
    env = StockTradingVecEnv(close, features, turb, num_envs=len(actions[0]), initial_cash=1e5, max_trade_shares=80,
                             turbulence_threshold=40.0, **env_kwargs)
    obs, _ = env.reset()
    observations, rewards, trades = [obs], [], []
    for a in actions:
        obs, r, _, _, info = env.step(a)
        observations.append(info["final_obs"])
        rewards.append(r)
        trades.append(info["trades"])
    return observations, rewards, trades


def test_no_look_ahead():
    """Perturb every price, feature and turbulence value after day t. Then, exactly:
    observations of days 0..t, the trades decided on days 0..t and the rewards of steps
    0..t-1 (marked at days 1..t) are unchanged; the reward of step t (marked at t+1) changes."""
    close, features, turb = synthetic_market(T=50, S=5, seed=4)
    t = 20
    rng = np.random.default_rng(9)
    close2, features2, turb2 = close.copy(), features.copy(), turb.copy()
    close2.iloc[t + 1:] *= rng.uniform(0.5, 1.5, close2.iloc[t + 1:].shape)
    features2.iloc[t + 1:] += rng.normal(size=features2.iloc[t + 1:].shape)
    turb2.iloc[t + 1:] = rng.uniform(0, 80, len(turb2) - t - 1)
    gen = torch.Generator().manual_seed(1)
    actions = [random_actions(16, 5, gen) for _ in range(t + 5)]
    obs_a, rew_a, tr_a = _run(close, features, turb, actions)
    obs_b, rew_b, tr_b = _run(close2, features2, turb2, actions)
    for k in range(t + 1):
        assert torch.equal(obs_a[k], obs_b[k]), f"observation of day {k} saw data after day {t}"
        assert torch.equal(tr_a[k], tr_b[k]), f"trades of day {k} depend on data after day {t}"
    for k in range(t):
        assert torch.equal(rew_a[k], rew_b[k]), f"reward of step {k} depends on data after day {t}"
    assert not torch.equal(rew_a[t], rew_b[t]), "the step-t reward is marked at t+1 and must see the change"
    assert not torch.equal(obs_a[t + 1], obs_b[t + 1])


@pytest.mark.parametrize("execution", ["next_close", "next_open"])
def test_no_look_ahead_with_next_bar_fills_and_every_market_setting(execution):
    """The same perturbation with opens, volume, a volume-based cost, a participation cap and a
    margin account: observations of days 0..t are unchanged, and so are the trades decided on
    days 0..t-1 (filled by day t); the trades decided on day t fill on day t+1 at its prices (their
    size may change with a cash-limited fill; the participation cap reads day t's volume, issue 34)."""
    from finance import HalfSpread, Margin, SqrtImpact

    close, features, turb = synthetic_market(T=50, S=5, seed=4)
    rng = np.random.default_rng(3)
    opens = close * rng.uniform(0.98, 1.02, close.shape)
    volume = pd.DataFrame(rng.uniform(1e3, 1e4, close.shape), close.index, close.columns)
    t = 20
    moved = [x.copy() for x in (close, features, turb, opens, volume)]
    for x in moved:
        x.iloc[t + 1:] *= rng.uniform(0.5, 1.5, x.iloc[t + 1:].shape)
    gen = torch.Generator().manual_seed(1)
    actions = [random_actions(16, 5, gen) for _ in range(t + 5)]
    kw = dict(execution=execution, costs=HalfSpread(1e-3) + SqrtImpact(eta=0.5, window=5), max_participation=0.01,
              margin=Margin())
    obs_a, rew_a, tr_a = _run(close, features, turb, actions, open_prices=opens, volume=volume, **kw)
    obs_b, rew_b, tr_b = _run(*moved[:3], actions, open_prices=moved[3], volume=moved[4], **kw)
    for k in range(t + 1):
        assert torch.equal(obs_a[k], obs_b[k]), f"observation of day {k} saw data after day {t}"
    for k in range(t):
        assert torch.equal(tr_a[k], tr_b[k]), f"trades decided on day {k} depend on data after day {t}"
    assert not torch.equal(rew_a[t], rew_b[t]), "day t's orders fill at day t+1's prices"
    assert any(bool((x < 0).any()) for x in tr_a) and any(bool((x > 0).any()) for x in tr_a)


# ---------------------------------------------------------------------------- turbulence
def test_turbulence_liquidates_and_blocks_buys():
    close, features, _ = synthetic_market(T=30, S=4, seed=6)
    turb = pd.Series(0.0, index=close.index)
    turb.iloc[10] = 100.0
    env = StockTradingVecEnv(close, features, turb, num_envs=3, max_trade_shares=30, turbulence_threshold=50.0,
                             cost_pct=1e-3, execution="close")
    env.reset()
    buy_all = torch.ones(3, 4)
    for day in range(12):
        before = env.holdings.clone()
        _, _, _, _, info = env.step(buy_all)
        if day == 10:
            assert torch.equal(info["trades"], -before), "turbulent day: sell everything, buy nothing"
            assert bool((info["holdings"] == 0).all())
            sold = (before * torch.tensor(close.iloc[10].to_numpy())).sum(1)
            assert torch.allclose(info["costs"], 1e-3 * sold)
        else:
            assert bool((info["trades"] == 30).all()), f"day {day}: buys go through below the threshold"


# ---------------------------------------------------------------------------- episodes
def test_random_starts_and_cash_are_seeded_and_in_range():
    close, features, _ = synthetic_market(T=60)
    env = StockTradingVecEnv(close, features, num_envs=256, episode_length=20, random_start=True,
                             cash_range=(1e4, 3e4))
    _, info = env.reset(seed=7)
    day, cash = info["day"].clone(), info["cash"].clone()
    assert int(day.min()) >= 0 and int(day.max()) <= 60 - 1 - 20 and len(day.unique()) > 20
    assert float(cash.min()) >= 1e4 and float(cash.max()) <= 3e4 and len(cash.unique()) == 256
    _, info = env.reset(seed=7)
    assert torch.equal(info["day"], day) and torch.equal(info["cash"], cash)
    for _ in range(19):
        *_, truncated, _ = env.step(torch.zeros(256, 5))
        assert not bool(truncated.any())
    *_, truncated, info = env.step(torch.zeros(256, 5))
    assert bool(truncated.all()) and torch.equal(info["day"], day + 20)


def test_evaluation_is_deterministic_from_the_first_day_to_the_last():
    close, features, _ = synthetic_market(T=25)
    train = StockTradingVecEnv(close, features, num_envs=4, episode_length=5, random_start=True,
                               cash_range=(1.0, 2.0), seed=0, price_scale=np.full(5, 50.0))
    env = train.evaluation_env()
    assert env.dates.equals(close.index) and env.obs_names == train.obs_names
    assert torch.equal(env.price_scale, train.price_scale) and torch.equal(env.obs_table, train.obs_table)
    obs, info = env.reset(seed=123)
    assert env.num_envs == 1 and int(info["day"]) == 0 and float(info["cash"]) == 1e6
    for k in range(24):
        obs, r, _, truncated, info = env.step(torch.zeros(1, 5))
        assert bool(truncated) == (k == 23) and float(r) == 0.0
    final = info["final_obs"][0, 1 + 5:1 + 10]
    assert np.allclose(final.numpy(), np.log(close.iloc[-1] / 50.0).to_numpy(), atol=1e-6)
    assert int(env.day) == 0, "autoreset to the first day"


# ---------------------------------------------------------------------------- bad inputs
def test_bad_actions_raise_and_leave_state_untouched():
    close, features, _ = synthetic_market(T=20, S=3)
    env = StockTradingVecEnv(close, features, num_envs=4)
    env.step(torch.full((4, 3), 0.5))
    state = [x.clone() for x in (env.cash, env.holdings, env.day, env.value, env.elapsed)]
    bad_nan = torch.zeros(4, 3)
    bad_nan[2, 1] = float("nan")
    for bad, match in [(torch.zeros(3), r"shape \(4, 3\)"), (torch.zeros(4, 2), r"shape \(4, 3\)"),
                       (bad_nan, "NaN or inf in sub-envs \\[2\\]"), (torch.zeros(4, 3, dtype=torch.long), "floating"),
                       (np.zeros((4, 3), np.float32), "torch.Tensor")]:
        with pytest.raises(ValueError, match=match):
            env.step(bad)
        for before, now in zip(state, (env.cash, env.holdings, env.day, env.value, env.elapsed)):
            assert torch.equal(before, now)


def test_bad_data_gives_clear_errors():
    close, features, turb = synthetic_market(T=20, S=3)
    nan_close = close.copy()
    nan_close.iloc[5, 1] = np.nan
    with pytest.raises(ValueError, match=r"NaN/inf prices \(first at 2015-01-09, T1: nan\).*ffill"):
        StockTradingVecEnv(nan_close)
    neg_close = close.copy()
    neg_close.iloc[3, 2] = 0.0
    with pytest.raises(ValueError, match="non-positive prices"):
        StockTradingVecEnv(neg_close)
    with pytest.raises(ValueError, match=r"episode_length must be in \[1, 19\] \(an integer\), got 20: 20 days"):
        StockTradingVecEnv(close, episode_length=20)
    with pytest.raises(ValueError, match="at least 2"):
        StockTradingVecEnv(close.iloc[:1])
    nan_feat = features.copy()
    nan_feat.iloc[0, 0] = np.nan
    with pytest.raises(ValueError, match="warm-up"):
        StockTradingVecEnv(close, nan_feat)
    with pytest.raises(ValueError, match="differs from close index"):
        StockTradingVecEnv(close, features.iloc[1:])
    with pytest.raises(ValueError, match="lack tickers"):
        StockTradingVecEnv(close, features.drop(columns="T2", level="ticker"))
    with pytest.raises(ValueError, match="MultiIndex columns"):
        StockTradingVecEnv(close, features["f0"])
    with pytest.raises(ValueError, match="prices\\['close'\\]"):
        StockTradingVecEnv(pd.concat({"close": close, "open": close}, axis=1))
    with pytest.raises(ValueError, match="needs episode_length"):
        StockTradingVecEnv(close, random_start=True)
    with pytest.raises(ValueError, match="needs a turbulence series"):
        StockTradingVecEnv(close, turbulence_threshold=10.0)
    with pytest.raises(ValueError, match="fillna"):
        StockTradingVecEnv(close, turbulence=turb.where(turb.index > turb.index[2]))
    with pytest.raises(ValueError, match=r"shape \(days, stocks, features\)"):
        StockTradingVecEnv(close.to_numpy(), np.zeros((20, 2, 1)))


# ---------------------------------------------------------------------------- API 1.0 (issue 9)
def test_close_is_the_protocol_method_and_prices_are_close_prices():
    close, features, _ = synthetic_market(T=20, S=3)
    env = StockTradingVecEnv(close, features, num_envs=2)
    assert env.close() is None  # was a TypeError: the price tensor shadowed the method
    assert torch.equal(env.close_prices, torch.tensor(close.to_numpy(), dtype=torch.float64))
    pd.testing.assert_frame_equal(env.close_frame(), close, check_names=False, check_freq=False)


def test_task_picks_the_library_preset():
    import podracer

    import finance  # noqa: F401  (registers the stock_trading presets)

    close, features, _ = synthetic_market(T=20, S=3)
    env = StockTradingVecEnv(close, features, num_envs=4)
    assert StockTradingVecEnv.task == env.task == "stock_trading"
    preset = podracer.get_preset("ppo", "stock_trading")
    agent = podracer.make_agent("ppo", env, seed=0, verbose=False)
    assert agent.preset == preset
    assert all(getattr(agent.config, k) == v for k, v in preset.config.items())


def test_dates_must_be_strictly_increasing():
    close, features, turb = synthetic_market(T=20, S=3)
    with pytest.raises(ValueError, match=r"close: dates are newest first, 2015-01-28 \(row 1\) comes after "
                                         r"2015-01-29 \(row 0\).*df.sort_index\(\)"):
        StockTradingVecEnv(close.iloc[::-1])
    swapped = close.iloc[[0, 1, 3, 2] + list(range(4, 20))]
    with pytest.raises(ValueError, match=r"close: dates are out of order, 2015-01-06 \(row 3\) comes after 2015-01-07"):
        StockTradingVecEnv(swapped)
    repeated = close.iloc[[0, 1, 2, 2] + list(range(3, 20))]
    with pytest.raises(ValueError, match=r"close: duplicate dates \(1 repeated rows; the first is 2015-01-06, rows 2 "
                                         r"and 3\).*duplicated"):
        StockTradingVecEnv(repeated)
    # With array closes the frames' own dates are checked.
    with pytest.raises(ValueError, match="features: dates are newest first"):
        StockTradingVecEnv(close.to_numpy(), features.iloc[::-1])
    with pytest.raises(ValueError, match="turbulence: dates are newest first"):
        StockTradingVecEnv(close.to_numpy(), turbulence=turb.iloc[::-1])


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_trade_shares=float("inf")), r"max_trade_shares must be >= 1 \(an integer\), got inf \(float\)"),
    (dict(max_trade_shares=0.5), r"max_trade_shares must be >= 1 \(an integer\), got 0.5"),
    (dict(max_trade_shares=0), r"max_trade_shares must be >= 1 \(an integer\), got 0"),
    (dict(max_trade_shares=True), r"max_trade_shares must be >= 1 \(an integer\), got True \(bool\)"),
    (dict(max_trade_shares=10**40), r"max_trade_shares must be at most 2\*\*53 = 9007199254740992 .* got 1e\+40"),
    (dict(num_envs=2.5), r"num_envs must be >= 1 \(an integer\), got 2.5"),
    (dict(num_envs=np.bool_(True)), r"num_envs must be >= 1 \(an integer\)"),
    (dict(episode_length=2.5), r"episode_length must be in \[1, 19\] \(an integer\), got 2.5"),
    (dict(episode_length=True), r"episode_length must be in \[1, 19\] \(an integer\), got True"),
    (dict(seed=1.5), r"seed must be an integer, got 1.5"),
    (dict(random_start="yes", episode_length=5), r"random_start must be True or False, got 'yes'"),
    (dict(turbulence_threshold=float("nan")), r"turbulence_threshold must be finite, got nan"),
    (dict(turbulence_threshold=0.0), r"turbulence_threshold must be > 0 .* use None to turn the switch off"),
    (dict(initial_cash=float("inf")), r"initial_cash must be finite"),
    (dict(initial_cash="1e6"), r"initial_cash must be a number, got '1e6' \(str\)"),
    (dict(cash_range=(1e4, float("inf"))), r"cash_range high must be finite"),
    (dict(cash_range=1e4), r"cash_range must be a \(low, high\) pair"),
    (dict(cost_pct=float("nan")), r"cost_pct must be finite"),
    (dict(reward_scale=float("nan")), r"reward_scale must be finite"),
    (dict(reward_scale=0), r"reward_scale must be > 0"),
    (dict(validate_actions=None), r"validate_actions must be True or False"),
])
def test_settings_must_be_finite_and_in_range(kwargs, match):
    close, features, turb = synthetic_market(T=20, S=3)
    with pytest.raises(ValueError, match=match):
        StockTradingVecEnv(close, features, turb, **kwargs)


def test_numpy_integer_sizes_are_accepted():
    close, features, turb = synthetic_market(T=20, S=3)
    env = StockTradingVecEnv(close, features, turb, num_envs=np.int64(4), episode_length=np.int32(5),
                             max_trade_shares=np.int64(10), seed=np.int64(3), random_start=np.bool_(True),
                             turbulence_threshold=np.float32(40.0))
    assert type(env.num_envs) is int and type(env.max_trade_shares) is int and type(env.episode_length) is int
    env.reset(seed=np.int64(1))
    _, rewards, *_ = env.step(torch.full((4, 3), 0.5))
    assert bool(torch.isfinite(rewards).all())
    assert env.evaluation_env(num_envs=np.int64(2)).num_envs == 2


# ---------------------------------------------------------------------------- issue 22: probing
@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_half_precision_actions_trade_as_float32(half):
    """float16 overflowed at 65504 inside step (cash and holdings became NaN): now actions are
    scaled in float32, so half actions trade what their float32 values ask for."""
    close, features, _ = synthetic_market(T=20, S=3)
    kw = dict(num_envs=4, initial_cash=1e12, max_trade_shares=10**6)
    env, ref = StockTradingVecEnv(close, features, **kw), StockTradingVecEnv(close, features, **kw)
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        a = random_actions(4, 3, gen).to(half)
        _, r, _, _, info = env.step(a)
        _, r32, _, _, info32 = ref.step(a.float())
        assert torch.isfinite(info["cash"]).all() and torch.isfinite(info["holdings"]).all()
        assert torch.equal(info["holdings"], info32["holdings"]) and torch.equal(r, r32)
    assert bool((env.holdings.abs() > 65504).any()), "the test must trade beyond float16's range"


def test_evaluation_env_keeps_the_market_model_or_changes_it():
    from finance import Margin, Proportional, SqrtImpact

    close, features, _ = synthetic_market(T=30, S=3)
    volume = close * 0 + 1e4
    env = StockTradingVecEnv(close, features, num_envs=8, open_prices=close * 1.01, volume=volume,
                             execution="next_open", costs=Proportional(2e-3) + SqrtImpact(), max_participation=0.2,
                             margin=Margin(initial=0.4), episode_length=10, random_start=True)
    copy = env.evaluation_env()
    for name in ("execution", "max_participation", "margin", "cost_pct", "max_trade_shares"):
        assert getattr(copy, name) == getattr(env, name), name
    assert repr(copy.costs) == repr(env.costs) and torch.equal(copy.costs.parts[1].sigma, env.costs.parts[1].sigma)
    assert torch.equal(copy.open_prices, env.open_prices) and torch.equal(copy.volume, env.volume)
    changed = env.evaluation_env(execution="close", cost_pct=0.0, margin=None, max_participation=None)
    assert changed.execution == "close" and changed.cost_pct == 0.0 and changed.margin is None and changed.plain_market
    assert not env.plain_market
    with pytest.raises(ValueError, match=r"changes trading rules only .* got \['features'\]"):
        env.evaluation_env(features=None)
