"""Bar frequency: bars_per_year from intervals and indexes, annualised metrics on hourly bars, the
synthetic intraday panel through features, env and backtest, and yfinance intraday with the
network simulated."""

import warnings

import numpy as np
import pandas as pd
import pytest
import torch
import yfinance

from finance.backtest import BacktestResult, BuyAndHoldPolicy, backtest, buy_and_hold, compare
from finance.data import DataError, DataUnavailableError, FIELDS, load_benchmark, load_prices, synthetic_prices
from finance.env import StockTradingVecEnv
from finance.features import add_features, turbulence
from finance.trading_calendar import (CALENDARS, CalendarWarning, bars_per_year, get_calendar, resolve_bars_per_year,
                                     session_index)


# ---------------------------------------------------------------------------- bars_per_year
@pytest.mark.parametrize("interval, calendar, expected", [
    ("1d", None, 252), ("1h", None, 7 * 252), ("60m", "XNYS", 1764), ("90m", None, 5 * 252), ("5m", None, 78 * 252),
    ("1m", None, 390 * 252), ("1wk", None, 52), ("1mo", None, 12), ("3mo", None, 4),
    ("1d", "24/7", 365), ("1h", "24/7", 24 * 365), ("5m", "24/7", 288 * 365),
])
def test_bars_per_year_from_a_yfinance_interval(interval, calendar, expected):
    assert bars_per_year(interval, calendar) == expected


def test_bars_per_year_inferred_from_the_bars():
    hourly = session_index("2024-03-01", "2024-05-31", "1h")
    assert list(hourly[:8].strftime("%a %H:%M")) == ["Fri 09:30", "Fri 10:30", "Fri 11:30", "Fri 12:30", "Fri 13:30",
                                                     "Fri 14:30", "Fri 15:30", "Mon 09:30"]  # Yahoo's labels
    cases = {
        "daily": (pd.bdate_range("2020-01-01", "2021-12-31"), 252),
        "daily, holidays missing": (pd.bdate_range("2020-01-01", "2021-12-31").delete([5, 40, 41, 90]), 252),
        "hourly": (hourly, 1764),
        "hourly, tz-aware in UTC": (hourly.tz_localize("America/New_York").tz_convert("UTC"), 1764),
        "5m": (session_index("2024-03-04", "2024-03-15", "5m"), 19656),
        "weekly": (pd.date_range("2020-01-03", "2022-12-30", freq="W-FRI"), 52),
        "monthly": (pd.date_range("2015-01-31", "2022-12-31", freq="ME"), 12),
        "daily 24/7 (weekend bars)": (pd.date_range("2021-01-01", "2021-06-30", freq="D"), 365),
        "hourly 24/7": (session_index("2021-01-01", "2021-01-20", "1h", "24/7"), 8760),
        # Extended hours, 04:00-19:00: counted from the data, not assumed to be 7.
        "hourly pre/post": (pd.DatetimeIndex([d + pd.Timedelta(hours=h) for d in pd.bdate_range("2024-03-04",
                                              periods=10) for h in range(4, 20)]), 16 * 252),
    }
    for name, (index, expected) in cases.items():
        assert bars_per_year(index) == expected, name
    # A partial first day and two half days do not change the usual session.
    ragged = hourly[4:].delete(np.r_[30:33, 100:103])
    assert bars_per_year(ragged) == 1764
    assert bars_per_year(pd.Series(0.0, index=hourly)) == bars_per_year(pd.DataFrame(index=hourly)) == 1764
    assert bars_per_year(hourly, calendar="24/7") == 7 * 365  # an explicit calendar wins


def test_bars_per_year_errors_and_explicit_values():
    with pytest.raises(ValueError, match=r"unknown interval '1 day'; use a yfinance interval such as '1d', '1h'"):
        bars_per_year("1 day")
    with pytest.raises(ValueError, match=r"unknown calendar 'XXXX'; use one of \['XNYS', '24/7'\], an "
                                         r"exchange_calendars name"):
        bars_per_year("1h", "XXXX")
    with pytest.raises(ValueError, match="RangeIndex without dates; pass a DatetimeIndex"):
        bars_per_year(pd.RangeIndex(10))
    with pytest.raises(ValueError, match=r"from 1 timestamp\(s\); need at least 2"):
        bars_per_year(pd.DatetimeIndex(["2024-01-02"]))
    hourly = session_index("2024-03-04", "2024-03-08", "1h")
    assert resolve_bars_per_year(None, hourly) == 1764
    assert resolve_bars_per_year(252, hourly) == 252 and resolve_bars_per_year(np.int64(52), hourly) == 52
    assert resolve_bars_per_year(None, pd.RangeIndex(5)) == 252  # no dates: daily, as before
    for bad in (0, -1, True, "252", float("nan")):
        with pytest.raises(ValueError, match="bars_per_year must be a positive number"):
            resolve_bars_per_year(bad, hourly)


# ---------------------------------------------------------------------------- annualisation
def test_annualised_volatility_follows_the_bar_frequency():
    """I.i.d. returns with per-bar std 0.3% on hourly NYSE bars: annual volatility is
    std * sqrt(1764), not std * sqrt(252) (which is sqrt(7) ~ 2.6x too small)."""
    index = session_index("2023-01-02", "2023-12-29", "1h")  # 260 weekdays x 7 bars
    sigma = 0.003
    r = np.random.default_rng(0).normal(0.0, sigma, len(index) - 1)
    value = pd.Series(1e6 * np.cumprod(np.r_[1.0, 1.0 + r]), index=index)
    hourly = BacktestResult("hourly", value)
    assert hourly.bars_per_year == 1764
    m = hourly.metrics()
    assert m["annual_volatility"] == pytest.approx(np.std(r, ddof=1) * np.sqrt(1764), rel=1e-9)
    assert m["annual_volatility"] == pytest.approx(sigma * np.sqrt(1764), rel=0.05)  # the true value
    assert m["annual_return"] == pytest.approx((value.iloc[-1] / value.iloc[0]) ** (1764 / len(r)) - 1, rel=1e-9)
    # An explicit number is still honoured, as before.
    daily_rate = BacktestResult("252", value, bars_per_year=252)
    assert daily_rate.bars_per_year == 252
    assert m["annual_volatility"] / daily_rate.metrics()["annual_volatility"] == pytest.approx(np.sqrt(7), rel=1e-12)
    # The same returns on daily bars: 252.
    daily = BacktestResult("daily", value.set_axis(pd.bdate_range("2015-01-01", periods=len(value))))
    assert daily.bars_per_year == 252
    assert daily.metrics()["annual_volatility"] == pytest.approx(np.std(r, ddof=1) * np.sqrt(252), rel=1e-9)
    # compare() infers per series; a window of a result keeps the full period's number.
    table = compare(value.rename("h"), daily.account_value.rename("d"))
    assert table.loc["h", "annual_volatility"] == pytest.approx(m["annual_volatility"], rel=1e-12)
    assert table.loc["d", "annual_volatility"] == pytest.approx(daily.metrics()["annual_volatility"], rel=1e-12)
    assert hourly.between("2023-03-01", "2023-03-01").bars_per_year == 1764


# ---------------------------------------------------------------------------- the synthetic panel
def test_synthetic_prices_are_deterministic_and_realistic(tmp_path):
    prices = synthetic_prices(["AAA", "BBB"], "2024-01-02", "2024-12-31", interval="1h", seed=0)
    assert prices.columns.names == ["field", "ticker"] and list(prices.columns) == [(f, t) for f in FIELDS
                                                                                    for t in ["AAA", "BBB"]]
    assert prices.index.name == "date" and prices.index.is_monotonic_increasing and prices.index.tz is None
    assert set(prices.index.strftime("%H:%M")) == {f"{h:02d}:30" for h in range(9, 16)}
    assert set(prices.index.day_of_week) == {0, 1, 2, 3, 4} and bars_per_year(prices.index) == 1764
    assert (prices["high"] >= np.maximum(prices["open"], prices["close"])).all().all()
    assert (prices["low"] <= np.minimum(prices["open"], prices["close"])).all().all()
    assert np.isfinite(prices.to_numpy()).all() and (prices > 0).all().all()
    # Deterministic, and a ticker's path does not depend on the others asked for.
    pd.testing.assert_frame_equal(prices, synthetic_prices(["AAA", "BBB"], "2024-01-02", "2024-12-31", seed=0))
    pd.testing.assert_series_equal(prices["close"]["BBB"], synthetic_prices("BBB", "2024-01-02", "2024-12-31")["close"]
                                   ["BBB"])
    assert not np.allclose(prices["close"]["AAA"], synthetic_prices("AAA", "2024-01-02", "2024-12-31", seed=1)
                           ["close"]["AAA"])
    # The per-bar volatility is annual_vol / sqrt(bars per year): the metrics read back about 20%.
    for ticker in ("AAA", "BBB"):
        vol = BacktestResult(ticker, prices["close"][ticker]).metrics()["annual_volatility"]
        assert vol == pytest.approx(0.2, rel=0.1)
    crypto = synthetic_prices("BTC", "2024-01-01", "2024-01-31", interval="1h", calendar="24/7")
    assert len(crypto) == 31 * 24 and bars_per_year(crypto.index) == 8760
    # A saved panel loads back through load_prices like any long file, time of day included.
    path = tmp_path / "hourly.parquet"
    prices.stack(level="ticker", future_stack=True).reset_index().to_parquet(path)
    pd.testing.assert_frame_equal(load_prices(None, source=path), prices)
    with pytest.raises(DataError, match="has 0 1h bar"):
        synthetic_prices("AAA", "2024-01-06", "2024-01-07")  # a weekend


def test_features_env_and_backtest_on_hourly_bars():
    prices = synthetic_prices(["AAA", "BBB", "CCC"], "2024-01-02", "2024-03-29", interval="1h")  # 63 days x 7 bars
    close = prices["close"]
    feats = add_features(prices, ["macd", "rsi_14", "close_20_sma"])  # windows count bars
    turb = turbulence(close, window=70)  # ten trading days of hourly bars
    assert feats.index.equals(close.index) and np.isfinite(feats.to_numpy()).all()
    assert (turb.iloc[:71] == 0).all() and (turb.iloc[71:] > 0).any()
    env = StockTradingVecEnv(close, feats, turb, num_envs=4, max_trade_shares=50, episode_length=70,
                             random_start=True, seed=0)
    obs, _ = env.reset()
    for _ in range(70):  # a training-style rollout: the episode is 70 hourly steps
        obs, reward, terminated, truncated, _ = env.step(torch.rand(4, 3) * 2 - 1)
    assert bool(truncated.all()) and torch.isfinite(obs).all()

    bench = close.mean(axis=1).rename("bench")
    result = backtest(BuyAndHoldPolicy(env), env, benchmark=bench, train_close=close.iloc[:140],
                      execution="close")  # buy_and_hold's closed form buys at the first close
    assert result.account_value.index.equals(close.index) and result.bars_per_year == 1764
    assert {k: b.bars_per_year for k, b in result.baselines.items()} == {"equal_weight": 1764, "min_variance": 1764,
                                                                         "index": 1764}
    # The env fed buy-and-hold and the buy_and_hold baseline agree bar for bar on hourly data too.
    direct = buy_and_hold(close, np.full(3, 1 / 3), env.initial_cash, env.cost_pct)
    np.testing.assert_allclose(direct.account_value.to_numpy(), result.baselines["equal_weight"].account_value)
    table = compare(result)
    assert np.isfinite(table[["annual_return", "annual_volatility", "sharpe"]].to_numpy()).all()
    r = result.returns()
    assert table.loc["policy", "annual_volatility"] == pytest.approx(r.std() * np.sqrt(1764), rel=1e-9)
    # A trading policy on hourly bars: trades happen, and turnover is annualised the same way.
    step = iter(range(len(close)))
    trader = backtest(lambda obs: torch.full((1, 3), 1.0 if next(step) % 3 else -1.0), close, feats, turb,
                      name="trader")  # buy two hours, sell one
    assert (trader.trades.to_numpy() < 0).any() and (trader.trades.to_numpy() > 0).any()
    assert trader.bars_per_year == 1764
    expected = (trader.traded_value() / trader.account_value).mean() * 1764
    assert trader.metrics()["turnover"] == pytest.approx(expected, rel=1e-12)


# ---------------------------------------------------------------------------- yfinance intraday, network simulated
def _yahoo_intraday(tickers, stamps, tz="America/New_York"):
    """What yf.download(..., interval="1h", group_by="ticker") returns: a tz-aware index."""
    index = pd.DatetimeIndex(stamps, name="Datetime").tz_localize(tz)
    parts = {}
    for i, t in enumerate(tickers):
        base = 100.0 + 10 * i + 0.01 * np.arange(len(index))
        parts[t] = pd.DataFrame(dict(Open=base, High=base + 1, Low=base - 1, Close=base + 0.5,
                                     Volume=np.full(len(index), 1e5)), index=index)
    return pd.concat(parts, axis=1, names=["Ticker", "Price"])


def _fail(*args, **kwargs):
    raise AssertionError("yf.download must not be called: the cache should serve this request")


def test_yfinance_hourly_download_is_cached_and_reread(monkeypatch, tmp_path):
    # 2024-03-10 is a DST change in New York: wall-clock time keeps the 09:30 open on both sides.
    stamps = session_index("2024-03-04", "2024-03-15", "1h")
    calls = []
    monkeypatch.setattr(yfinance, "download",
                        lambda t, **k: calls.append(k) or _yahoo_intraday(["SPY", "QQQ"], stamps))
    first = load_prices(["SPY", "QQQ"], "2024-03-04", "2024-03-15", source="yfinance", interval="1h",
                        cache_dir=tmp_path)
    assert calls == [dict(start="2024-03-04", end="2024-03-16", interval="1h", auto_adjust=True, group_by="ticker",
                          threads=False, progress=False)]
    assert first.index.tz is None and first.index.equals(stamps.rename("date"))
    assert bars_per_year(first.index) == 1764
    cached = list(tmp_path.glob("*.parquet"))
    assert len(cached) == 1 and cached[0].name.startswith("yf_1h_2024-03-04_2024-03-15_QQQ-SPY_")

    monkeypatch.setattr(yfinance, "download", _fail)  # offline: the cache serves it, stamps and all
    again = load_prices(["SPY", "QQQ"], "2024-03-04", "2024-03-15", source="yfinance", interval="1h",
                        cache_dir=tmp_path)
    pd.testing.assert_frame_equal(again, first)
    assert backtest(lambda obs: torch.zeros(1, 2), again["close"]).bars_per_year == 1764
    # Another interval is another file, not the hourly one.
    monkeypatch.setattr(yfinance, "download", lambda t, **k: _yahoo_intraday(["SPY"], stamps[:14]))
    load_prices("SPY", "2024-03-04", "2024-03-05", source="yfinance", interval="30m", cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.parquet"))) == 2


def test_yfinance_intraday_timestamps(monkeypatch, tmp_path):
    # 24/7 bars in a DST zone repeat 01:00 in wall-clock time on 2024-11-03: kept in UTC instead.
    stamps = pd.date_range("2024-11-02 00:00", "2024-11-04 23:00", freq="h", tz="America/New_York")
    frame = pd.concat({"BTC-USD": pd.DataFrame({"Close": np.linspace(1.0, 2.0, len(stamps))}, index=stamps)}, axis=1,
                      names=["Ticker", "Price"])
    monkeypatch.setattr(yfinance, "download", lambda t, **k: frame)
    btc = load_prices("BTC-USD", "2024-11-02", "2024-11-05", source="yfinance", interval="1h", cache_dir=tmp_path)
    assert len(btc) == len(stamps) and btc.index.is_unique
    assert btc.index[0] == pd.Timestamp("2024-11-02 04:00")  # UTC
    # A repeated bar is named with its time of day, and nothing is cached.
    hours = session_index("2024-03-04", "2024-03-05", "1h")
    monkeypatch.setattr(yfinance, "download", lambda t, **k: _yahoo_intraday(["SPY"], hours.insert(2, hours[1])))
    with pytest.raises(DataError, match=r"duplicate dates .*the first is 2024-03-04 10:30:00, rows 1 and 2"):
        load_prices("SPY", "2024-03-04", "2024-03-05", source="yfinance", interval="1h", cache_dir=tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_yfinance_intraday_history_limits_are_explained(monkeypatch, tmp_path):
    seen = []
    # Out of Yahoo's range, yf.download logs the refusal and returns an empty frame.
    monkeypatch.setattr(yfinance, "download", lambda t, **k: seen.append(k["interval"]) or pd.DataFrame())
    today = pd.Timestamp.today().normalize()
    old = (today - pd.Timedelta(days=900)).date()
    with pytest.raises(DataUnavailableError, match=r"Yahoo serves 1h bars for the last 730 days only .* start on or "
                                                   r"after .* use interval='1d' for older history"):
        load_prices("SPY", old, source="yfinance", interval="1h", cache_dir=tmp_path)
    with pytest.raises(DataUnavailableError, match=r"Yahoo serves 5m bars for the last 60 days only .* "
                                                   r"interval='1h' \(730 days\) or '1d'"):
        load_prices("SPY", today - pd.Timedelta(days=90), source="yfinance", interval="5m", cache_dir=tmp_path)
    with pytest.raises(DataUnavailableError, match=r"at most 8 days of 1m bars per request, and this asks for 11"):
        load_prices("SPY", today - pd.Timedelta(days=10), today, source="yfinance", interval="1m", cache_dir=tmp_path)
    # In range, the empty answer keeps the usual reasons (offline, rate limits).
    with pytest.raises(DataUnavailableError, match=r"offline, rate-limited, or unknown tickers") as info:
        load_prices("SPY", today - pd.Timedelta(days=10), source="yfinance", interval="1h", cache_dir=tmp_path)
    assert "Yahoo serves" not in str(info.value)
    assert seen == ["1h", "5m", "1m", "1h"] and not list(tmp_path.iterdir())
    # The benchmark follows the interval; the bundled one is daily only.
    monkeypatch.setattr(yfinance, "download", lambda t, **k: seen.append(k["interval"]) or
                        _yahoo_intraday(t, session_index("2024-03-04", "2024-03-05", "1h")))
    bench = load_benchmark("2024-03-04", "2024-03-05", source="yfinance", interval="1h", cache_dir=tmp_path)
    assert seen[-1] == "1h" and len(bench) == 14 and bench.name == "S&P 500"
    with pytest.raises(DataError, match=r"interval='1h' needs source='yfinance'"):
        load_benchmark("2020-01-01", "2020-02-01", interval="1h")


def test_prepare_market_on_hourly_bars_aligns_the_index_benchmark(monkeypatch, tmp_path):
    # Probing found prepare_market loading a *daily* benchmark for hourly prices: reindexed onto the
    # hourly bars it was all NaN. The benchmark now follows the prices' interval.
    from finance import prepare_market

    bars = {i: session_index("2024-01-02", "2024-06-28", i) for i in ("1h", "1d")}
    monkeypatch.setattr(yfinance, "download",
                        lambda t, **k: _yahoo_intraday(t if isinstance(t, list) else [t], bars[k["interval"]]))
    market = prepare_market(["SPY", "QQQ"], source="yfinance", interval="1h", cache_dir=tmp_path,
                            train=("2024-03-01", "2024-04-30"), valid=("2024-05-01", "2024-05-31"),
                            test=("2024-06-01", "2024-06-28"), turbulence_window=60)
    index = market.benchmark["test"]
    assert index.notna().all() and index.index.equals(market.close["test"].index)
    assert bars_per_year(market.close["test"].index) == 1764


# ---------------------------------------------------------------------------- 24/7 markets, named calendars, warnings
def test_round_the_clock_bars_without_a_weekend_are_24_7_with_a_warning():
    # Hourly crypto from Tuesday to Thursday: 24 bars a day is no exchange session; was 6,048 (NYSE days).
    with pytest.warns(CalendarWarning, match=r"trade around the clock but span no weekend.*assumed: 365.*'24/5'"):
        assert bars_per_year(pd.date_range("2024-01-02", periods=72, freq="h")) == 8760
    # Five weekdays of daily bars cannot tell crypto from stocks: 252, with a warning naming the fix.
    week = pd.bdate_range("2024-01-01", periods=5)
    with pytest.warns(CalendarWarning, match=r"span no weekend.*252 bars a year, assumed.*calendar='24/7'"):
        assert bars_per_year(week) == 252
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalendarWarning)  # what the bars do show is not warned about
        assert bars_per_year(week, calendar="24/7") == 365
        assert bars_per_year(session_index("2024-03-05", "2024-03-07", "1h")) == 1764  # a 7-bar session: an exchange
        # Around the clock on weekdays, with a weekend in between and no bar on it: a 5-day week (FX, futures).
        fx = pd.date_range("2024-01-01", "2024-01-12 23:00", freq="h")
        assert bars_per_year(fx[fx.day_of_week < 5]) == 24 * 252
    # ... and the same data in a backtest: the calendar by name, without a warning.
    value = pd.Series(np.linspace(100.0, 110.0, 72), index=pd.date_range("2024-01-02", periods=72, freq="h"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalendarWarning)
        assert BacktestResult("btc", value, bars_per_year="24/7").bars_per_year == 8760
        assert resolve_bars_per_year("24/7", week) == 365
        assert resolve_bars_per_year("24/7", pd.RangeIndex(3)) == 365  # no dates: daily bars on that calendar
    with pytest.raises(ValueError, match=r"bars_per_year must be a positive number .* got 'XXXX': unknown calendar"):
        resolve_bars_per_year("XXXX", week)


def test_exchange_calendars_give_other_markets_their_numbers():
    lse = get_calendar("XLON")  # from exchange_calendars: 08:00-16:30 London, Monday to Friday
    assert (lse.open, lse.session_minutes, lse.weekdays) == ("08:00", 510, (0, 1, 2, 3, 4))
    assert 250 <= lse.days_per_year <= 256  # sessions a year, holidays out
    assert bars_per_year("1h", "XLON") == lse.days_per_year * 9  # 08:00 .. 16:00, the last one 30 minutes
    assert get_calendar("LSE") == lse and get_calendar("NYSE") is CALENDARS["XNYS"]  # aliases
    tokyo = get_calendar("XTKS")  # 09:00-11:30 and 12:30-15:00: the lunch break is not traded
    assert tokyo.session_minutes == 300 and tokyo.days_per_year < 252  # Golden Week, New Year
    daily = pd.bdate_range("2023-01-02", "2023-06-30")
    assert bars_per_year(daily, "XTKS") == tokyo.days_per_year


def test_a_single_date_warns_instead_of_annualising_silently():
    with pytest.warns(CalendarWarning, match=r"from 1 date\(s\); annualising as daily bars \(252"):
        assert resolve_bars_per_year(None, pd.DatetimeIndex(["2024-01-02"])) == 252
    # A 2-bar series: its annual return compounds one return 252 times (11.27 for +1%); it now says so.
    for values, returns in (([100.0], 0), ([100.0, 101.0], 1)):
        with pytest.warns(CalendarWarning) as record:
            dates = pd.bdate_range("2024-01-02", periods=len(values))
            BacktestResult("short", pd.Series(values, index=dates)).metrics()
        assert any(f"has {returns} return(s); its annual return" in str(w.message) for w in record)
