"""Dividends as cash (issue 34): the loader carries yfinance's dividends with split-only prices (the
network simulated), the env pays them to the holders of record going into each ex-date and charges
shorts, reconciled by hand under every execution timing; the books balance; no dividends (or all
zero) keep them bit for bit; dividends on total-return prices are refused, never counted twice."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import torch
import yfinance

from finance import HalfSpread, Margin, StockTradingVecEnv, load_prices
from finance.data import DataError

DATES = pd.bdate_range("2024-01-01", periods=5)


def two_stocks() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split-only closes of A and B, and their dividends: A pays 1.00 and B 0.50 with ex-date day 2."""
    close = pd.DataFrame([[50.0, 20.0], [51.0, 20.0], [50.0, 19.5], [50.5, 19.6], [50.2, 19.7]],
                         index=DATES, columns=["A", "B"])
    dividends = pd.DataFrame(0.0, index=DATES, columns=["A", "B"])
    dividends.iloc[2] = [1.0, 0.5]
    return close, dividends


def make_env(execution: str, dividends, **kwargs) -> StockTradingVecEnv:
    close, _ = two_stocks()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # execution="close" warns that it is optimistic
        return StockTradingVecEnv(close, initial_cash=10_000.0, max_trade_shares=100, cost_pct=0.0,
                                  execution=execution, open_prices=close, margin=Margin(initial=0.5),
                                  dividends=dividends, **kwargs)


@pytest.mark.parametrize("execution", ["close", "next_close", "next_open"])
def test_long_holders_receive_and_shorts_pay_on_the_ex_date(execution):
    env = make_env(execution, two_stocks()[1])
    # Day 0: long 100 A, short 50 B; day 1 (the eve of the ex-date): trade again, +20 A, -10 B.
    *_, first = env.step(torch.tensor([[1.0, -0.5]]))
    *_, second = env.step(torch.tensor([[0.2, -0.1]]))
    *_, third = env.step(torch.zeros(1, 2))
    assert first["dividends"].item() == 0.0 and third["dividends"].item() == 0.0
    # The holders of record going into day 2: after day 1's trade when it fills at day 1's close,
    # before it when it fills on day 2 (at the open or the close of the ex-date: no dividend).
    held = (120, -60) if execution == "close" else (100, -50)
    assert second["dividends"].item() == held[0] * 1.00 + held[1] * 0.50
    assert second["holdings"].tolist() == [[120.0, -60.0]]
    # Cash by hand: trades at the fill prices, then the dividend.
    close = two_stocks()[0].to_numpy()
    fill = close[[0, 1]] if execution == "close" else close[[1, 2]]
    cash = (10_000.0 - (100 * fill[0, 0] - 50 * fill[0, 1]) - (20 * fill[1, 0] - 10 * fill[1, 1])
            + held[0] * 1.00 + held[1] * 0.50)
    assert second["cash"].item() == pytest.approx(cash, rel=1e-15)


def test_the_books_balance_with_costs_and_dividends():
    close, dividends = two_stocks()
    dividends.iloc[3] = [0.25, 0.0]
    for execution in ("close", "next_close", "next_open"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env = StockTradingVecEnv(close, initial_cash=10_000.0, max_trade_shares=100, num_envs=3,
                                     costs=HalfSpread(0.002), execution=execution, open_prices=close * 1.001,
                                     margin=Margin(initial=0.5), dividends=dividends)
        rng, mark, paid = np.random.default_rng(0), torch.tensor(close.to_numpy()), []
        for t in range(4):
            before_h, before_v, before_p = env.holdings.clone(), env.value.clone(), env.prices.clone()
            *_, info = env.step(torch.as_tensor(rng.uniform(-1, 1, (3, 2)), dtype=torch.float32))
            after, fill = info["holdings"], info["fill_prices"]
            # value(t+1) - value(t) = h . (fill - close[t]) + h' . (close[t+1] - fill) - costs + dividends
            pnl = ((before_h * (fill - before_p)).sum(1) + (after * (mark[t + 1] - fill)).sum(1) - info["costs"]
                   + info["dividends"])
            torch.testing.assert_close(info["account_value"] - before_v, pnl, rtol=0, atol=1e-9)
            torch.testing.assert_close(info["account_value"], info["cash"] + (after * mark[t + 1]).sum(1),
                                       rtol=1e-15, atol=0)
            paid.append(info["dividends"])
        assert torch.stack(paid).abs().sum() > 0  # some accounts held through an ex-date


@pytest.mark.parametrize("execution", ["close", "next_close"])
def test_no_dividends_or_all_zero_keep_the_books_bit_for_bit(execution):
    zero = pd.DataFrame(0.0, index=DATES, columns=["A", "B"])
    plain, zeros = make_env(execution, None), make_env(execution, zero)
    assert zeros.dividends is None
    rng = np.random.default_rng(1)
    for _ in range(4):
        a = torch.as_tensor(rng.uniform(-1, 1, (1, 2)), dtype=torch.float32)
        one, other = plain.step(a)[4], zeros.step(a)[4]
        assert "dividends" not in one and "dividends" not in other
        for key in ("cash", "holdings", "account_value", "costs", "fill_prices"):
            assert torch.equal(one[key], other[key]), key


def test_evaluation_env_keeps_the_dividends():
    env = make_env("next_close", two_stocks()[1])
    copy = env.evaluation_env()
    assert torch.equal(copy.dividends, env.dividends)


def test_bad_dividends_are_refused_by_name():
    close, dividends = two_stocks()
    adjusted = close.copy()
    adjusted.attrs["adjustment"] = "total_return"  # what load_prices tags yfinance's default and the samples
    with pytest.raises(ValueError, match=r"count each dividend twice.*load_prices\(\.\.\., dividends=True\)"):
        StockTradingVecEnv(adjusted, dividends=dividends)
    with pytest.raises(ValueError, match=r"dividends must be finite and >= 0 \(cash per share on each ex-date\)"):
        StockTradingVecEnv(close, dividends=-dividends)
    with pytest.raises(ValueError, match=r"dividends must be finite"):
        StockTradingVecEnv(close, dividends=dividends.replace(0.0, np.nan))
    with pytest.raises(ValueError, match=r"dividends must have shape \(days, stocks\) = \(5, 2\)"):
        StockTradingVecEnv(close.to_numpy(), dividends=np.zeros((5, 3)))


# ---------------------------------------------------------------------------- the loader
def yahoo_with_actions(tickers, dates):
    """What yf.download(..., auto_adjust=False, actions=True, group_by="ticker") returns."""
    parts = {}
    for i, t in enumerate(tickers):
        close = 100.0 + 10 * i + np.arange(len(dates))
        dividends = np.zeros(len(dates))
        dividends[3] = 0.5 + i
        parts[t] = pd.DataFrame({"Open": close - 0.5, "High": close + 1, "Low": close - 1, "Close": close,
                                 "Adj Close": close * 0.97, "Volume": np.full(len(dates), 1e6),
                                 "Dividends": dividends, "Stock Splits": np.zeros(len(dates))},
                                index=pd.DatetimeIndex(dates, name="Date"))
    return pd.concat(parts, axis=1, names=["Ticker", "Price"])


def test_yfinance_dividends_come_with_split_only_prices_and_are_cached(monkeypatch, tmp_path):
    dates = pd.bdate_range("2020-01-02", "2020-01-10")
    calls = []
    monkeypatch.setattr(yfinance, "download",
                        lambda tickers, **k: calls.append(k) or yahoo_with_actions(tickers, dates))
    prices = load_prices(["AAPL", "MSFT"], "2020-01-01", "2020-01-10", source="yfinance", cache_dir=tmp_path,
                         dividends=True)
    assert calls[0]["auto_adjust"] is False and calls[0]["actions"] is True
    assert prices.attrs["adjustment"] == "splits"
    assert list(dict.fromkeys(prices.columns.get_level_values("field"))) == ["open", "high", "low", "close", "volume",
                                                                            "dividends"]
    assert prices["close"]["AAPL"].iloc[0] == 100.0  # Yahoo's Close, not its Adj Close
    expected = np.zeros((len(dates), 2))
    expected[3] = [0.5, 1.5]
    np.testing.assert_array_equal(prices["dividends"].to_numpy(), expected)
    # A second call reads the cache (its own file: other prices than the total-return download).
    monkeypatch.setattr(yfinance, "download", lambda *a, **k: pytest.fail("the cache should serve this"))
    again = load_prices(["AAPL", "MSFT"], "2020-01-01", "2020-01-10", source="yfinance", cache_dir=tmp_path,
                        dividends=True)
    pd.testing.assert_frame_equal(again, prices)
    # Into the env: day 3's dividend goes to the shares held going into it.
    env = StockTradingVecEnv(prices["close"], dividends=prices["dividends"], cost_pct=0.0)
    env.step(torch.tensor([[1.0, 0.0]]))  # fills at day 1's close
    env.step(torch.zeros(1, 2))
    *_, info = env.step(torch.zeros(1, 2))  # marks day 3, the ex-date
    assert info["dividends"].item() == 100 * 0.5


def test_total_return_prices_are_tagged_and_refuse_dividends():
    prices = load_prices(["AAPL", "MSFT"], "2020-01-01", "2020-03-01", source="sample")
    assert prices.attrs["adjustment"] == "total_return"
    fake = pd.DataFrame(0.01, index=prices.index, columns=["AAPL", "MSFT"])
    with pytest.raises(ValueError, match="count each dividend twice"):
        StockTradingVecEnv(prices["close"], dividends=fake)
    with pytest.raises(DataError, match=r"bundled 'sample' data has no dividends: its prices are back-adjusted"):
        load_prices(["AAPL"], source="sample", dividends=True)


def test_a_long_file_with_a_dividends_column(tmp_path):
    dates = pd.bdate_range("2021-03-01", periods=4)
    table = pd.DataFrame({"date": list(dates) * 2, "ticker": ["X"] * 4 + ["Y"] * 4,
                          "close": [10.0, 10.2, 10.1, 10.3, 5.0, 5.1, 5.0, 5.2],
                          "dividends": [0, 0, 0.2, np.nan, 0, 0, 0, 0.05]})
    path = tmp_path / "prices.csv"
    table.to_csv(path, index=False)
    prices = load_prices(None, source=path, dividends=True)
    np.testing.assert_array_equal(prices["dividends"].to_numpy(), [[0, 0], [0, 0], [0.2, 0], [0, 0.05]])
    assert prices.attrs["adjustment"] == "splits"
    plain = load_prices(None, source=path)  # not asked for: the same panel as before, untagged
    assert list(dict.fromkeys(plain.columns.get_level_values("field"))) == ["close"] and not plain.attrs
    table.drop(columns="dividends").to_csv(path, index=False)
    with pytest.raises(DataError, match="has no dividends: a long file needs a 'dividends' column"):
        load_prices(None, source=path, dividends=True)
    table.assign(dividends=-0.1).to_csv(path, index=False)
    with pytest.raises(DataError, match=r"dividend -0.1 for X on 2021-03-01 .* finite and >= 0"):
        load_prices(None, source=path, dividends=True)
    with pytest.raises(DataError, match="dividends must be True or False"):
        load_prices(None, source=path, dividends="yes")


def test_a_backtest_pays_the_dividends_to_its_baselines_too():
    from finance import backtest

    close, dividends = two_stocks()
    hold = lambda obs: torch.zeros(1, 2)  # noqa: E731  (the policy holds cash; the baseline buys)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = backtest(hold, close, cost_pct=0.0, execution="close", bars_per_year=252)
        paid = backtest(hold, close, cost_pct=0.0, execution="close", bars_per_year=252, dividends=dividends)
    # Equal weight buys 10,000 A at 50 and 25,000 B at 20 on day 0 and holds them through day 2's ex-date.
    gain = (paid.baselines["equal_weight"].account_value - plain.baselines["equal_weight"].account_value).to_numpy()
    np.testing.assert_allclose(gain, [0, 0, 10_000 * 1.00 + 25_000 * 0.50, 22_500, 22_500], rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(paid.account_value.to_numpy(), plain.account_value.to_numpy())  # cash earns none
