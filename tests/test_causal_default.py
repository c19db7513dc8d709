"""The default fill is causal (issue 34): an oracle that reads exactly what ``execution="close"``
leaks, the return close[t] -> close[t+1], earns a fortune under ``"close"`` and, under the
default ``"next_close"``, not one cent more than a causal policy that reads only the past."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import finance
from finance import OptimisticExecutionWarning, PortfolioVecEnv, StockTradingVecEnv, backtest, rebalanced


@pytest.fixture(scope="module")
def sample_close() -> pd.DataFrame:
    """Two years of the bundled 20-stock sample: close-only data, where next_open is impossible."""
    return finance.load_prices(start="2018-01-01", end="2019-12-31", source="sample")["close"]


def run(env: StockTradingVecEnv, signal: np.ndarray) -> np.ndarray:
    """Account value at each close of one account driven by ``signal[t]`` (S,): buy the stocks
    with a positive signal (all the shares allowed), sell the others."""
    values = [env.reset()[1]["account_value"].item()]
    for t in range(env.num_days - 1):
        action = torch.as_tensor(np.sign(signal[t]), dtype=torch.float32)[None]
        values.append(env.step(action)[4]["account_value"].item())
    return np.array(values)


def test_an_oracle_of_the_leaked_return_earns_nothing_a_causal_policy_cannot(sample_close):
    p = sample_close.to_numpy()
    r = np.vstack([p[1:] / p[:-1] - 1.0, np.zeros((1, p.shape[1]))])  # r[t]: close t -> t+1, 0 after the end
    tomorrow = r  # what a fill at close t leaks: the return right after it
    yesterday = np.vstack([np.zeros((1, p.shape[1])), r[:-1]])  # known at close t: close t-1 -> t
    after_tomorrow = np.vstack([r[1:], np.zeros((1, p.shape[1]))])  # close t+1 -> t+2: unknown to both
    kw = dict(initial_cash=1e6, max_trade_shares=10**5, cost_pct=0.0)
    ic = kw["initial_cash"]

    with pytest.warns(OptimisticExecutionWarning, match="optimistic"):
        close_env = StockTradingVecEnv(sample_close, execution="close", **kw)
    default_env = StockTradingVecEnv(sample_close, **kw)
    assert default_env.execution == "next_close" == finance.DEFAULT_EXECUTION

    oracle_close = run(close_env, tomorrow)[-1]
    causal_close = run(close_env, yesterday)  # trades at the close it saw, on the return it saw: causal
    oracle_default = run(default_env, tomorrow)
    # Under "close" the oracle trades before each move it has read: it multiplies its money.
    assert oracle_close > 20 * ic and oracle_close > 20 * causal_close[-1]
    # Under the default its order fills at close t+1, after the move it read: every value it
    # marks is the causal policy's (no costs here; the same fills, the same holdings), exactly.
    np.testing.assert_allclose(oracle_default, causal_close, rtol=1e-12)
    assert oracle_default[-1] < 2 * ic
    # Not vacuous: the return after the fill is information the default does reward.
    assert run(default_env, after_tomorrow)[-1] > 20 * ic


def test_every_entry_point_defaults_to_next_close(sample_close):
    close = sample_close.iloc[:40, :3]
    hold = lambda obs: torch.ones(1, 3)  # noqa: E731
    result = backtest(hold, close, max_trade_shares=10)
    assert result.execution == "next_close" and not result.optimistic
    # Day 0's order fills at day 1's close: day 1's value is the cash less the fill's costs, no move.
    assert result.trades.iloc[0].abs().sum() > 0
    assert result.account_value.iloc[1] == pytest.approx(result.account_value.iloc[0] - result.costs.iloc[0], rel=1e-14)
    assert PortfolioVecEnv(close).execution == "next_close"
    assert rebalanced(close, [0.5, 0.5, 0.0]).execution == "next_close"
    with pytest.warns(OptimisticExecutionWarning):
        optimistic = backtest(hold, close, max_trade_shares=10, execution="close")
    assert optimistic.optimistic and "optimistic" in repr(optimistic)
    fig = optimistic.plot()
    assert "optimistic" in fig.axes[0].get_title()
    with pytest.warns(OptimisticExecutionWarning):
        PortfolioVecEnv(close, execution="close")
