"""Point-in-time universes (issue 34): a name enters and leaves; the env never trades it outside
its membership, closes it at its last fill, and a backtest runs on such a universe."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from finance import StockTradingVecEnv, backtest
from finance.universe import membership_mask


def market(T: int = 16) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(50 * np.exp(np.cumsum(rng.normal(0, 0.01, (T, 3)), axis=0)), columns=["A", "B", "C"],
                        index=pd.bdate_range("2021-03-01", periods=T))


def membership(close: pd.DataFrame) -> pd.DataFrame:
    d = close.index
    return pd.DataFrame({"ticker": ["A", "B", "C", "C"], "start": [d[0], d[5], d[0], d[12]],
                         "end": [None, None, d[8], None]})  # B enters on day 5; C leaves after day 8, back on 12


@pytest.mark.parametrize("execution", ["close", "next_close"])
def test_the_env_trades_a_name_only_inside_its_membership(execution, tmp_path):
    close = market()
    table = membership(close)
    path = tmp_path / "members.csv"
    table.to_csv(path, index=False)
    member = membership_mask(path, close.index, list(close.columns))
    assert member[:, 0].all() and not member[:5, 1].any() and member[5:, 1].all()
    assert member[:9, 2].all() and not member[9:12, 2].any() and member[12:, 2].all()

    env = StockTradingVecEnv(close, initial_cash=1e6, max_trade_shares=10, cost_pct=0.0, universe=path,
                             execution=execution)
    lag = int(execution != "close")
    trades, holdings = [], []
    for _ in range(len(close) - 1):
        *_, info = env.step(torch.ones(1, 3))  # buy every name, every day
        trades.append(info["trades"][0].numpy())
        holdings.append(info["holdings"][0].numpy())
    trades, holdings = np.array(trades), np.array(holdings)
    fill_day = np.arange(len(close) - 1) + lag
    traded_outside = (trades != 0) & ~member[fill_day]
    assert not traded_outside.any(), "a name traded on a fill day outside its membership"
    assert (trades[:, 0] == 10).all()
    assert (trades[fill_day >= 5, 1] == 10).all() and (holdings[fill_day < 5, 1] == 0).all()
    leave = int(np.flatnonzero(fill_day == 8)[0])  # C's last day: sold whole there, nothing held outside
    assert trades[leave, 2] == -holdings[leave - 1, 2] < 0 and holdings[leave, 2] == 0
    assert (holdings[(fill_day >= 8) & (fill_day < 12), 2] == 0).all()
    assert (trades[fill_day >= 12, 2] == 10).all()


def test_a_backtest_on_a_point_in_time_universe():
    close = market(40)
    d = close.index
    table = pd.DataFrame({"ticker": ["A", "B", "C"], "start": [d[0], d[10], d[0]], "end": [None, None, d[25]]})
    result = backtest(lambda obs: torch.full((1, 3), 0.5), close, universe=table, max_trade_shares=20)
    member = membership_mask(table, d, ["A", "B", "C"])
    decided = np.arange(len(d))
    fills = np.minimum(decided + 1, len(d) - 1)  # the default fills at the next close
    assert not ((result.trades.to_numpy() != 0) & ~member[fills]).any()
    assert result.positions["C"].iloc[26:].eq(0).all() and result.positions["B"].iloc[:9].eq(0).all()
    assert result.baselines["equal_weight"].positions["B"].iloc[0] == 0  # buy-and-hold buys only members


def test_bad_membership_is_refused_by_name(tmp_path):
    close = market()
    d = close.index
    for table, match in [
        (pd.DataFrame({"ticker": ["A", "ZZZ"], "start": [d[0], d[0]], "end": [None, None]}), "ZZZ.*prices do not have"),
        (pd.DataFrame({"ticker": ["A"], "start": [d[5]], "end": [d[2]]}), "ends .* before it starts"),
        (pd.DataFrame({"name": ["A"], "start": [d[0]]}), "lacks columns"),
        (pd.DataFrame({"ticker": ["A"], "start": ["not a date"], "end": [None]}), "not a date"),
    ]:
        with pytest.raises(ValueError, match=match):
            StockTradingVecEnv(close, universe=table)
    with pytest.raises(ValueError, match="does not exist"):
        StockTradingVecEnv(close, universe=tmp_path / "missing.csv")
