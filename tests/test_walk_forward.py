"""finance.walk_forward: windows that tile and never see the future, an account carried across
boundaries, baselines that reduce to buy-and-hold, clear errors, and one tiny PPO run."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import podracer
from finance.backtest import BuyAndHoldPolicy, buy_and_hold, compare, min_variance_weights
from finance.env import StockTradingVecEnv
from finance.market import MarketData
from finance.walk_forward import RebalancePolicy, WalkForwardResult, walk_forward

IC, COST = 1e6, 1e-3
CLOSE = "close"  # the fill at the observed close: check_accounting's arithmetic (trades priced at their row's close)


def synthetic_close(T: int = 420, S: int = 4, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    dates = pd.bdate_range("2015-01-02", periods=T, name="date")
    vol = np.linspace(0.01, 0.03, S)  # different risks, so min-variance weights are not equal
    p0 = np.geomspace(5.0, 500.0, S)
    return pd.DataFrame(p0 * np.exp(np.cumsum(rng.normal(2e-4, vol, (T, S)), axis=0)), index=dates,
                        columns=[f"S{i}" for i in range(S)])


def min_variance(train: MarketData) -> RebalancePolicy:
    """Min-variance weights fitted on the training window, rebalanced to at each window start."""
    return RebalancePolicy(train.env("train"), min_variance_weights(train.close["train"]))


def cash_of(r: WalkForwardResult) -> pd.Series:
    """Cash after each bar's trades: value - costs - shares at the close."""
    return r.account_value - r.costs - (r.positions * r.close).sum(axis=1)


def check_accounting(r: WalkForwardResult) -> None:
    """Across every bar, boundaries included: shares move only by trades, costs are cost_pct of the
    traded value, and the next value is this one minus costs plus the shares' price change."""
    pos, tr, p, v, c = r.positions.to_numpy(), r.trades.to_numpy(), r.close.to_numpy(), r.account_value, r.costs
    np.testing.assert_allclose(pos[1:], pos[:-1] + tr[1:], atol=1e-9)
    np.testing.assert_allclose(pos[0], tr[0], atol=1e-9)  # window 0 starts from cash
    np.testing.assert_allclose(c.to_numpy(), COST * (np.abs(tr) * p).sum(axis=1), rtol=1e-12, atol=1e-9)
    expected = v.to_numpy()[:-1] - c.to_numpy()[:-1] + (pos[:-1] * (p[1:] - p[:-1])).sum(axis=1)
    np.testing.assert_allclose(v.to_numpy()[1:], expected, rtol=1e-12)
    assert (pos >= 0).all() and (cash_of(r) >= -1e-6).all()


# ---------------------------------------------------------------------------- windows
@pytest.mark.parametrize("mode", ["rolling", "expanding"])
def test_windows_tile_the_period_and_train_never_overlaps_test(mode):
    close = synthetic_close()
    seen = []

    def fit(train):
        seen.append(train.close["train"].index)
        assert list(train.close) == ["train"] and train.features["train"].index.equals(train.close["train"].index)
        return min_variance(train)

    r = walk_forward(fit, close, 150, 40, mode=mode, cost_pct=COST)
    w = r.windows
    assert len(w) == len(seen) == 6  # 420 - 60 warm-up - 150 = 210 bars: 5 x 40 + 10
    assert w["test_days"].tolist() == [40] * 5 + [10]
    assert r.account_value.index.equals(close.index[210:])
    owned = np.concatenate([close.loc[a:b].index for a, b in zip(w["test_start"], w["test_end"])])
    assert pd.Index(owned).equals(r.account_value.index)  # contiguous, no gap, no overlap
    for k, train_dates in enumerate(seen):
        assert train_dates[-1] == w["train_end"][k] < w["test_start"][k]
        assert close.index.get_loc(w["test_start"][k]) == close.index.get_loc(train_dates[-1]) + 1
        assert k == 0 or train_dates[-1] < w["test_start"][k] and train_dates[-1] >= w["test_end"][k - 1]
    starts = [d[0] for d in seen]
    if mode == "rolling":
        assert (w["train_days"] == 150).all() and len(set(starts)) == len(starts)
    else:
        assert set(starts) == {close.index[60]} and w["train_days"].tolist() == [150 + 40 * k for k in range(6)]


def test_calendar_windows_start_on_the_first_bar_of_each_span():
    close = synthetic_close(T=520)
    r = walk_forward(min_variance, close, "1Y", "3M", cost_pct=COST, baselines=False)
    w, dates = r.windows, close.index
    t0 = w["test_start"][0]
    assert t0 == dates[dates >= dates[60] + pd.DateOffset(years=1)][0]
    for k, start in enumerate(w["test_start"]):
        assert start == dates[dates >= t0 + pd.DateOffset(months=3 * k)][0]
        assert w["train_start"][k] == dates[dates >= start - pd.DateOffset(years=1)][0]
    assert w["test_days"].sum() == len(r.account_value)


def test_a_last_bar_left_alone_joins_the_window_before():
    r = walk_forward(min_variance, synthetic_close(), 150, 19, cost_pct=COST, baselines=False, execution=CLOSE)
    assert r.windows["test_days"].tolist() == [19] * 10 + [20]  # 210 = 11 x 19 + 1
    assert r.windows["test_end"].iloc[-1] == r.account_value.index[-1]
    check_accounting(r)


def test_scaler_is_fitted_on_each_training_window():
    close = synthetic_close()
    means = []
    walk_forward(lambda train: means.append(train.features["train"].mean().abs().max()) or min_variance(train),
                 close, 150, 100, cost_pct=COST, baselines=False)
    assert len(means) == 3 and max(means) < 1e-9  # z-scored on exactly these dates


def test_the_turbulence_switch_gets_a_warm_turbulence_index():
    """Found by review: the default warm-up (60 bars, the indicators') left the first 253 bars'
    turbulence at 0, "calm", in windows where a turbulence_threshold could then never fire."""
    close = synthetic_close(T=700)
    seen = []
    fit = lambda train: seen.append(train.turbulence["train"]) or min_variance(train)  # noqa: E731
    walk_forward(fit, close, 150, 100, cost_pct=COST, baselines=False, turbulence_window=60)
    assert (seen[0].iloc[:1] == 0).all()  # without the switch: the indicators' 60 bars, as before
    seen.clear()
    walk_forward(fit, close, 150, 100, cost_pct=COST, baselines=False, turbulence_window=252,
                 turbulence_threshold=1e9)
    assert all((t > 0).all() for t in seen) and seen[0].index[0] == close.index[253]


# ---------------------------------------------------------------------------- no look-ahead
def reads_features(train: MarketData):
    """A deterministic policy of the scaled features (the last indicator of each stock)."""
    return lambda obs: obs[:, -4:].clamp(-1.0, 1.0) * 0.5


@pytest.mark.parametrize("fit", [min_variance, reads_features])
def test_prices_after_a_window_change_nothing_in_it(fit):
    """Perturbing every price after window 2's last bar leaves windows 0-2 (trades, values) as they
    were. Min-variance weights of windows 0-3 (fitted on bars up to that one) stay too; window 4,
    trained on perturbed bars, changes. The feature policy sees features scaled per window."""
    close = synthetic_close()
    # Under "close" a window's trades are all priced in it; under next_close the last bar's order
    # fills at the next window's first close (its size, not its decision, reads that price).
    kw = dict(cost_pct=COST, keep_policies=True, baselines=False, execution=CLOSE)
    base = walk_forward(fit, close, 150, 40, **kw)
    end = base.windows["test_end"][2]
    noisy = close.copy()
    after = noisy.index > end
    noisy.loc[after] *= np.exp(np.random.default_rng(9).normal(0, 0.05, (int(after.sum()), close.shape[1])))
    moved = walk_forward(fit, noisy, 150, 40, **kw)

    for name in ("account_value", "positions", "trades", "costs"):
        a, b = getattr(base, name).loc[:end], getattr(moved, name).loc[:end]
        np.testing.assert_array_equal(a.to_numpy(), b.to_numpy())
    keep = ["train_start", "train_end", "test_start", "test_end", "boundary_turnover", "costs"]
    pd.testing.assert_frame_equal(base.windows.loc[:2, keep], moved.windows.loc[:2, keep])
    assert base.trades.loc[:end].abs().to_numpy().sum() > 0
    assert not np.allclose(moved.account_value.loc[end:].to_numpy(), base.account_value.loc[end:].to_numpy())
    if fit is min_variance:
        for k in range(4):
            np.testing.assert_array_equal(moved.policies[k].weights.numpy(), base.policies[k].weights.numpy())
        assert not np.allclose(moved.policies[4].weights.numpy(), base.policies[4].weights.numpy(), atol=1e-3)


# ---------------------------------------------------------------------------- carry-over
def test_stitched_curve_is_the_policies_run_back_to_back_with_the_account_carried():
    close = synthetic_close()
    r = walk_forward(min_variance, close, 150, 40, cost_pct=COST, keep_policies=True, baselines=False,
                     execution=CLOSE)
    check_accounting(r)
    # Rebalancing at the boundaries trades (and pays) but never restarts the account.
    assert (r.windows["boundary_turnover"][1:] > 0).all() and (r.windows["costs"] > 0).all()
    cumulative = np.prod(1 + r.windows["return"]) - 1
    assert cumulative == pytest.approx(r.metrics()["cumulative_return"], rel=1e-12)

    # Replay by hand: one env per window, each starting from the previous one's cash and shares.
    cash, shares, values = IC, np.zeros(close.shape[1]), []
    for k, (start, end) in enumerate(zip(r.windows["test_start"], r.windows["test_end"])):
        rows = close.loc[start:].iloc[:len(close.loc[start:end]) + 1]  # the window and its mark
        env = StockTradingVecEnv(rows, initial_cash=IC, cost_pct=COST, execution=CLOSE)
        policy = RebalancePolicy(env, r.policies[k].weights.numpy())
        obs, info = env.reset(options={"cash": cash, "holdings": shares})
        values.append(info["account_value"].item())
        for _ in range(env.num_days - 1):
            obs, _, _, _, info = env.step(policy(obs, info))  # it reads the exact account in info
            values.append(info["account_value"].item())
        cash, shares = info["cash"].item(), info["holdings"][0].numpy()
        if k < len(r.windows) - 1:
            values.pop()  # the mark is the next window's first value
    np.testing.assert_allclose(r.account_value.to_numpy(), values, rtol=1e-13)


def test_buy_and_hold_trades_once_and_matches_the_baseline():
    close = synthetic_close()
    r = walk_forward(lambda train: BuyAndHoldPolicy(train.env("train")), close, 150, 40, cost_pct=COST,
                     max_trade_shares=10**6, execution=CLOSE)  # buy_and_hold's closed form buys at the first close
    check_accounting(r)
    traded = r.trades.abs().sum(axis=1) > 0
    assert traded.tolist() == [True] + [False] * (len(r.trades) - 1)
    assert (r.windows["boundary_turnover"][1:] == 0).all() and (r.windows["costs"][1:] == 0).all()
    expected = buy_and_hold(r.close, np.full(4, 0.25), IC, COST)
    np.testing.assert_allclose(r.account_value.to_numpy(), expected.account_value.to_numpy(), rtol=1e-13)
    np.testing.assert_allclose(r.account_value.to_numpy(), r.baselines["equal_weight"].account_value.to_numpy(),
                               rtol=1e-13)
    table = compare(r)
    assert list(table.index) == ["walk_forward", "equal_weight"]
    np.testing.assert_allclose(table.iloc[0].to_numpy(), table.iloc[1].to_numpy(), rtol=1e-9)
    fig = r.plot()
    assert len(fig.axes[0].lines) == 2 + len(r.windows) - 1  # two curves, one line per refit


def test_warm_start_gets_a_copy_of_the_previous_policy():
    close = synthetic_close()
    got = []

    def fit(train, previous):
        got.append(previous)
        return min_variance(train)

    r = walk_forward(fit, close, 150, 100, warm_start=True, keep_policies=True, baselines=False)
    assert got[0] is None and len(got) == len(r.policies) == 3
    for k in (1, 2):
        assert got[k] is not r.policies[k - 1]
        np.testing.assert_array_equal(got[k].weights.numpy(), r.policies[k - 1].weights.numpy())


# ---------------------------------------------------------------------------- the env's start option
def test_env_reset_starts_from_a_given_account():
    close = synthetic_close(T=10, S=3)
    env = StockTradingVecEnv(close, num_envs=2, initial_cash=1e4, episode_length=4, execution=CLOSE)
    shares = np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 5.0]])
    obs, info = env.reset(options={"cash": [100.0, 200.0], "holdings": shares})
    p0 = close.iloc[0].to_numpy()
    np.testing.assert_allclose(info["account_value"].numpy(), [100 + shares[0] @ p0, 200 + shares[1] @ p0])
    np.testing.assert_allclose(obs[:, 1:4].numpy(), shares * p0 / 1e4, rtol=1e-6)  # money in initial_cash units
    obs, _, _, _, info = env.step(torch.full((2, 3), -1.0))  # sell everything held
    np.testing.assert_allclose(info["costs"].numpy(), COST * shares @ p0, rtol=1e-12)
    for _ in range(3):
        obs, _, _, _, info = env.step(torch.zeros(2, 3))
    assert (env.holdings == 0).all() and (env.cash == 1e4).all()  # the autoreset starts from cash again
    for bad, match in [({"cash": -1.0}, "finite and >= 0"), ({"holdings": [1.0, 2.0]}, "shape"),
                       ({"shares": 1}, "unknown reset options")]:
        with pytest.raises(ValueError, match=match):
            env.reset(options=bad)


# ---------------------------------------------------------------------------- errors
@pytest.mark.parametrize("train, test, match", [
    (400, 10, "leaves no bar to test"),
    (300, 100, "longer than the data"),
    ("2Y", "1Y", "leaves no bar to test"),
    ("1Y", "1Y", "longer than the data"),
    (0, 10, "at least 2"),
    (150, 0, "at least 1"),
    (-5, 10, "at least 2"),
    ("0M", 10, "not a positive span"),
    ("-1Y", 10, "not a positive span"),
    (150, pd.DateOffset(months=-1), "positive span"),
    (150.0, 10, "must be a number of bars"),
    (True, 10, "must be a number of bars"),
])
def test_bad_windows_say_what_to_change(train, test, match):
    with pytest.raises(ValueError, match=match):
        walk_forward(min_variance, synthetic_close(), train, test)


def test_other_bad_inputs():
    close = synthetic_close()
    with pytest.raises(ValueError, match="rolling' or 'expanding"):
        walk_forward(min_variance, close, 150, 40, mode="sliding")
    with pytest.raises(TypeError, match="return"):
        walk_forward(lambda train: None, close, 150, 40)
    with pytest.raises(ValueError, match="leave them out"):
        walk_forward(min_variance, close, 150, 40, episode_length=20)
    market = MarketData(close={"train": close}, features={"train": close}, turbulence={"train": close.iloc[:, 0]})
    with pytest.raises(TypeError, match="raw prices"):
        walk_forward(min_variance, market, 150, 40)


# ---------------------------------------------------------------------------- a real agent
def test_ppo_walk_forward_smoke():
    """Two windows of a real PPO agent with tiny budgets, fine-tuned across the boundary."""
    close = synthetic_close(T=60 + 120 + 40)

    def train_ppo(train, previous):
        env = train.env("train", 4, random_start=True, episode_length=20, cost_pct=COST, dtype=torch.float32)
        agent = previous or podracer.make_agent("ppo", env, seed=0, verbose=False, num_steps=16, num_minibatches=2,
                                                update_epochs=2)
        podracer.train(agent, env, 128, seed=0, progress=False)
        return agent

    r = walk_forward(train_ppo, close, 120, 20, warm_start=True, keep_policies=True, cost_pct=COST,
                     execution=CLOSE)
    assert len(r.windows) == 2 and all(hasattr(p, "act") for p in r.policies)
    assert r.policies[0] is not r.policies[1]
    check_accounting(r)
    assert r.trades.abs().to_numpy().sum() > 0 and np.isfinite(r.metrics()["sharpe"])


# ---------------------------------------------------------------------------- issue 22: market models
def synthetic_ohlcv(T: int = 260, S: int = 3, seed: int = 1) -> pd.DataFrame:
    close = synthetic_close(T, S, seed)
    rng = np.random.default_rng(seed)
    opens = close.shift(1).bfill() * np.exp(rng.normal(0, 0.01, close.shape))
    fields = {"open": opens, "high": np.maximum(opens, close) * 1.01, "low": np.minimum(opens, close) * 0.99,
              "close": close, "volume": close * 0 + rng.uniform(1e4, 1e5, close.shape)}
    return pd.concat(fields, axis=1, names=["field", "ticker"])


def test_next_open_fills_with_costs_across_windows():
    """OHLCV prices: each test env (and each fit's training market) gets the opens and volume; the
    stitched books follow the next-open identity through every boundary; the baseline trades under
    the same rules."""
    from finance import FixedPerTrade, HalfSpread

    prices = synthetic_ohlcv()
    seen = []

    def fit(train):
        seen.append(train.env("train", execution="next_open").open_prices is not None)
        return RebalancePolicy(train.env("train"), min_variance_weights(train.close["train"]))

    costs = HalfSpread(2e-3) + FixedPerTrade(1.0)
    r = walk_forward(fit, prices, 120, 40, execution="next_open", costs=costs)
    assert all(seen) and len(seen) == 2
    pos, tr, c, v = r.positions.to_numpy(), r.trades.to_numpy(), r.costs.to_numpy(), r.account_value.to_numpy()
    p = r.close.to_numpy()
    o = prices["open"].loc[r.close.index].to_numpy()
    held = np.vstack([np.zeros((1, p.shape[1])), pos[:-1]])  # before each bar's trades
    np.testing.assert_allclose(pos, held + tr, atol=1e-9)
    fill = o[1:]  # bar d's orders fill at bar d+1's open
    change = (held[:-1] * (fill - p[:-1])).sum(1) + (pos[:-1] * (p[1:] - fill)).sum(1) - c[:-1]
    np.testing.assert_allclose(np.diff(v), change, rtol=1e-10, atol=1e-6)
    expected_costs = 1e-3 * (np.abs(tr[:-1]) * fill).sum(1) + (tr[:-1] != 0).sum(1) * 1.0
    np.testing.assert_allclose(c[:-1], expected_costs, rtol=1e-10)
    assert (r.windows["boundary_turnover"][1:] > 0).all()
    base = r.baselines["equal_weight"]  # bought at the first open, paying the fees and the spread
    bought = base.trades.iloc[0].to_numpy()
    assert (bought > 0).all() and base.costs.iloc[0] == pytest.approx(1e-3 * bought @ o[1] + 3.0, rel=1e-12)
