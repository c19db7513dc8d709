"""Markets with planted skill: SYNTHETIC price panels in which a known, causal signal predicts the
next day's return with a chosen strength, so that an agent's true out-of-sample skill is known.

On real prices nobody knows which of two agents is truly better; a selection rule (a tournament's
fitness, a validation scheme) can only be judged by how its pick does later, on one noisy test
draw. Here the data-generating process is known. Each stock ``i`` has a signal ``z[t, i]``, a
stationary AR(1) with unit variance and ``persistence`` phi, known at the close of day ``t``.
The log return from close ``t`` to close ``t + 1`` is

    r[t+1, i] = mu + sigma * (ic * z[t, i] + sqrt(1 - ic^2) * eps[t+1, i])

with ``eps`` standard normal (a common market factor with correlation ``market_corr`` across
stocks plus an idiosyncratic part), independent of every signal value up to ``t``. So the
information coefficient corr(z[t], r[t+1]) is exactly ``ic``; corr(z[t], r[t+1+k]) is
``ic * phi^k``; ``ic = 0`` is a market with nothing to learn. ``signal_sharpe`` gives the true
Sharpe ratio of a position that loads on the signal, and ``PlantedMarket.expected_return`` the
conditional mean return of every stock on every day, so the true skill of any agent is the mean of
``positions . expected_return`` over a long fresh sample (``planted_market(..., seed=other)``).

Timing in ``StockTradingVecEnv``: with the default ``execution="next_close"`` a position chosen on
seeing day ``t`` is filled at close ``t + 1`` and earns the return to ``t + 2``, on which the
signal's information coefficient is ``ic * phi`` (pass ``lag=1`` to ``signal_sharpe``).

``planted_market`` runs the planted prices through the same pipeline as ``prepare_market``
(indicators, ratios to the close, turbulence, a scaler fitted on train, date splits) and adds the
signal as one more feature, ``signal``; its ``env(split)`` is a ``StockTradingVecEnv`` like any
market's.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from finance.data.checks import FIELDS, check_int, check_number
from finance.features import DEFAULT_INDICATORS, FeatureScaler, add_features, split_by_date, turbulence
from finance.market import DateRange, MarketData, relative_features
from finance.trading_calendar import bars_per_year, session_index

# Information coefficients from none to easy. A daily IC of 0.02 on 10 stocks is an annual
# Sharpe ratio of about 1 for the best linear use of the signal (IC x sqrt(breadth), Grinold's
# fundamental law); 0.1 is about 5: easy.
PLANTED_STRENGTHS: dict[str, float] = {"none": 0.0, "faint": 0.01, "weak": 0.02, "moderate": 0.04, "easy": 0.1}
"""Named signal strengths: the daily information coefficient of the planted signal for each name."""
SIGNAL_FEATURE = "signal"
_STREAM_SIGNAL, _STREAM_NOISE, _STREAM_BARS, _STREAM_MARKET = 1, 2, 3, 4  # independent random streams


def _check_unit(value: float, name: str, high_open: bool = True) -> float:
    value = check_number(value, name)
    if not (0.0 <= value < 1.0 if high_open else 0.0 <= value <= 1.0):
        raise ValueError(f"{name} must be in [0, 1{')' if high_open else ']'}, got {value}")
    return value


def _ar1(innovations: np.ndarray, persistence: float) -> np.ndarray:
    """Stationary AR(1) with unit variance along axis 0 from standard normal ``innovations``:
    z[0] = u[0], z[t] = phi z[t-1] + sqrt(1 - phi^2) u[t]. Row t uses rows <= t only (causal)."""
    from scipy import signal as scipy_signal  # on use: keeps `import finance` light
    scaled = innovations.copy()
    scaled[1:] *= math.sqrt(1.0 - persistence**2)
    return scipy_signal.lfilter([1.0], [1.0, -persistence], scaled, axis=0)


def _tickers(tickers: int | str | Sequence[str]) -> list[str]:
    if isinstance(tickers, (int, np.integer)) and not isinstance(tickers, bool):
        return [f"P{i:02d}" for i in range(check_int(tickers, "tickers", low=1))]
    names = [tickers] if isinstance(tickers, str) else list(tickers)
    if not names or len(set(names)) != len(names):
        raise ValueError(f"tickers must be a number of stocks or distinct names, got {tickers!r}")
    return [str(n) for n in names]


def planted_prices(tickers: int | str | Sequence[str], start: str, end: str, ic: float, *,
                   persistence: float = 0.9, annual_vol: float = 0.2, annual_drift: float = 0.05,
                   market_corr: float = 0.0, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """SYNTHETIC daily OHLCV bars whose returns a known signal predicts (module doc), and the signal.

    Args:
        tickers: a number of stocks (named P00, P01, ...) or their names.
        start, end: calendar dates; bars on weekdays (the XNYS calendar of ``synthetic_prices``).
        ic: corr(signal[t], log return t -> t+1), in [0, 1); 0: nothing to predict.
        persistence: phi, the signal's daily autocorrelation, in [0, 1).
        annual_vol, annual_drift: of each stock, as in ``finance.synthetic_prices``.
        market_corr: correlation of the unpredictable part of returns across stocks, in [0, 1].
        seed: the panel is a function of ``(seed, tickers, start)``; a later ``end`` only appends
            rows (every random stream is drawn in time order), so no value depends on later ones.

    Returns ``(prices, signal)``: prices shaped like ``load_prices`` (field x ticker columns, the
    close-to-close path as planted; opens, highs, lows and volume decorate it as in
    ``synthetic_prices``), and the signal (dates x tickers).
    """
    names = _tickers(tickers)
    ic = _check_unit(ic, "ic")
    persistence = _check_unit(persistence, "persistence")
    market_corr = _check_unit(market_corr, "market_corr", high_open=False)
    seed = check_int(seed, "seed", low=0)
    index = session_index(start, end, "1d", "XNYS")
    if len(index) < 2:
        raise ValueError(f"{start} .. {end} holds {len(index)} weekday(s); planted_prices needs at least 2")
    T, n = len(index), bars_per_year("1d", "XNYS")
    sigma = check_number(annual_vol, "annual_vol") / math.sqrt(n)
    mu = check_number(annual_drift, "annual_drift") / n - 0.5 * sigma**2

    def stream(name: str | None, which: int) -> np.random.Generator:
        return np.random.default_rng([seed, zlib.crc32(name.encode()) if name else 0, which])

    market = stream(None, _STREAM_MARKET).standard_normal(T)
    signals, parts = {}, {}
    for name in names:
        z = _ar1(stream(name, _STREAM_SIGNAL).standard_normal(T), persistence)
        own = stream(name, _STREAM_NOISE).standard_normal(T)
        eps = math.sqrt(market_corr) * market + math.sqrt(1.0 - market_corr) * own
        log_ret = np.r_[0.0, mu + sigma * (ic * z[:-1] + math.sqrt(1.0 - ic**2) * eps[1:])]  # row t: close t-1 -> t
        bars = stream(name, _STREAM_BARS)
        close = bars.uniform(20.0, 200.0) * np.exp(np.cumsum(log_ret))
        u = bars.standard_normal((T, 4))  # row by row: a later end only appends rows
        opens = np.r_[close[0], close[:-1]] * np.exp(sigma / 4 * u[:, 0])
        wick = np.exp(np.abs(sigma / 2 * u[:, 1:3]))
        parts[name] = pd.DataFrame({"open": opens, "high": np.maximum(opens, close) * wick[:, 0],
                                    "low": np.minimum(opens, close) / wick[:, 1], "close": close,
                                    "volume": np.round(np.exp(np.log(1e5) + 0.5 * u[:, 3]))}, index=index)
        signals[name] = z
    panel = pd.concat(parts, axis=1, names=["ticker", "field"]).swaplevel(axis=1)
    panel = panel.reindex(columns=pd.MultiIndex.from_product([FIELDS, names], names=["field", "ticker"]))
    signal = pd.DataFrame(signals, index=index).rename_axis(columns="ticker")
    return panel, signal


def conditional_mean_return(signal: pd.DataFrame, ic: float, annual_vol: float = 0.2,
                            annual_drift: float = 0.05) -> pd.DataFrame:
    """E[close[t+1] / close[t] - 1 | everything known at close t] for every stock and day of a planted
    panel: exp(mu + sigma ic z[t] + sigma^2 (1 - ic^2) / 2) - 1 (the log return is normal given z[t])."""
    n = bars_per_year("1d", "XNYS")
    sigma = annual_vol / math.sqrt(n)
    mu = annual_drift / n - 0.5 * sigma**2
    return np.expm1(mu + sigma * ic * signal + 0.5 * sigma**2 * (1.0 - ic**2))


def signal_sharpe(ic: float, loading: float = 1.0, noise_var: float = 0.0, num_stocks: int = 1,
                  persistence: float = 0.9, lag: int = 0, periods_per_year: float | None = None) -> float:
    """True Sharpe ratio of holding ``w[t, i] = loading * z[t, i] + noise`` in every stock, equal-weighted.

    ``noise`` is independent of signals and returns, with variance ``noise_var`` (a policy that
    also follows features with no information); the position taken at close t earns the return
    from ``t + lag`` to ``t + lag + 1`` (``lag=1`` under ``execution="next_close"``), on which the
    information coefficient is ``ic * persistence^lag``. For jointly normal zero-mean w and r,
    Var(w r) = Var(w) Var(r) + Cov(w, r)^2, so per stock and day

        SR = ic' a / sqrt(a^2 + v + ic'^2 a^2),   ic' = ic phi^lag,

    and ``num_stocks`` independent stocks (``market_corr=0``) multiply it by sqrt(num_stocks). The
    drift is left out (a market-neutral book); day-to-day dependence of w r is O(ic^2) and ignored.
    Per period, or annualised with ``periods_per_year``.
    """
    ic_eff = _check_unit(ic, "ic") * _check_unit(persistence, "persistence") ** check_int(lag, "lag", low=0)
    if noise_var < 0 or (loading == 0 and noise_var == 0):
        raise ValueError(f"a position needs loading != 0 or noise_var > 0 (and noise_var >= 0), got "
                         f"loading={loading}, noise_var={noise_var}")
    sr = ic_eff * loading / math.sqrt(loading**2 + noise_var + (ic_eff * loading) ** 2)
    sr *= math.sqrt(check_int(num_stocks, "num_stocks", low=1))
    return sr * math.sqrt(periods_per_year) if periods_per_year else sr


@dataclass
class PlantedMarket(MarketData):
    """A ``MarketData`` on planted prices (features include ``signal``) that also knows the truth:
    the raw signal and the conditional mean return of every stock, per split."""

    signal: dict[str, pd.DataFrame] = field(default_factory=dict)  # split -> (dates, tickers), unscaled
    expected_return: dict[str, pd.DataFrame] = field(default_factory=dict)  # split -> E[r(t -> t+1) | info at t]
    ic: float = 0.0
    persistence: float = 0.9


def planted_market(ic: float, tickers: int | str | Sequence[str] = 10,
                   train: DateRange = ("2001-01-01", "2008-12-31"),
                   valid: DateRange = ("2009-01-01", "2009-12-31"),
                   test: DateRange = ("2010-01-01", "2013-12-31"),
                   indicators: Sequence[str] = DEFAULT_INDICATORS, history_start: str = "2000-01-01",
                   turbulence_window: int = 252, *, persistence: float = 0.9, annual_vol: float = 0.2,
                   annual_drift: float = 0.05, market_corr: float = 0.0, seed: int = 0) -> PlantedMarket:
    """``prepare_market`` on planted prices: indicators (as ratios to the close), turbulence, the
    planted ``signal`` as one more feature, a scaler fitted on train, date splits.

    Args are those of ``prepare_market`` and ``planted_prices``; ``indicators=()`` leaves the
    signal as the only feature. A fresh sample of the same market (for an agent's true skill) is
    the same call with another ``seed``.
    """
    end = next(span[1] for span in (test, valid, train) if span is not None)
    prices, signal = planted_prices(tickers, history_start, end, ic, persistence=persistence, annual_vol=annual_vol,
                                    annual_drift=annual_drift, market_corr=market_corr, seed=seed)
    close = prices["close"]
    signal_cols = pd.concat({SIGNAL_FEATURE: signal}, axis=1, names=["feature", "ticker"])
    feats = relative_features(add_features(prices, indicators), close) if indicators else None
    feats = signal_cols if feats is None else pd.concat([feats, signal_cols], axis=1)
    frames = {"close": close, "features": feats, "turbulence": turbulence(close, window=turbulence_window),
              "open": prices["open"], "volume": prices["volume"], "signal": signal,
              "expected": conditional_mean_return(signal, ic, annual_vol, annual_drift)}
    splits = split_by_date(frames, train=train, valid=valid, test=test)
    scaler = FeatureScaler().fit(splits["train"]["features"])
    return PlantedMarket(
        close={name: part["close"] for name, part in splits.items()},
        features={name: scaler.transform(part["features"]) for name, part in splits.items()},
        turbulence={name: part["turbulence"] for name, part in splits.items()},
        price_scale=splits["train"]["close"].iloc[0].to_numpy(),
        open={name: part["open"] for name, part in splits.items()},
        volume={name: part["volume"] for name, part in splits.items()},
        signal={name: part["signal"] for name, part in splits.items()},
        expected_return={name: part["expected"] for name, part in splits.items()},
        ic=ic, persistence=persistence)
