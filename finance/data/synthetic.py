"""``synthetic_prices``: a deterministic SYNTHETIC OHLCV panel (random walks on an exchange-like
session calendar, no network) in the shape ``load_prices`` returns, for offline tests and
examples of intraday bars. It is not market data.
"""

from __future__ import annotations

import zlib
from typing import Sequence

import numpy as np
import pandas as pd

from finance.data.checks import FIELDS, DataError, check_int, check_number
from finance.data.load import DateLike, _as_ticker_list, _check_range
from finance.trading_calendar import bars_per_year, session_index


def synthetic_prices(tickers: str | Sequence[str], start: DateLike, end: DateLike, interval: str = "1h",
                     seed: int = 0, calendar: str = "XNYS", annual_vol: float = 0.2,
                     annual_drift: float = 0.05) -> pd.DataFrame:
    """SYNTHETIC OHLCV bars, not market data: a deterministic offline panel shaped like ``load_prices``.

    Each ticker is a geometric random walk with ``annual_vol`` and ``annual_drift`` spread over
    ``bars_per_year(interval, calendar)`` bars, on the bar stamps of
    ``finance.trading_calendar.session_index`` (NYSE: weekdays, 09:30 .. 15:30 hourly, no
    holidays; ``calendar="24/7"`` for every hour of every day). The open is the previous close
    with a small jump, high and low bracket open and close, volume is lognormal. A ticker's path
    depends only on ``(seed, ticker, start, end, interval)``, not on the other tickers asked for.
    """
    names = _as_ticker_list(tickers)
    if names is None:
        raise DataError("synthetic_prices needs tickers, got None; pass e.g. ['AAA', 'BBB']")
    start_ts, end_ts = _check_range(start, end)
    if start_ts is None or end_ts is None:
        raise DataError("synthetic_prices needs start and end dates, e.g. '2024-01-02', '2024-03-29'")
    try:
        index, n = session_index(start_ts, end_ts, interval, calendar), bars_per_year(interval, calendar)
    except ValueError as exc:
        raise DataError(str(exc)) from None
    if len(index) < 2:
        raise DataError(f"{start_ts.date()} .. {end_ts.date()} has {len(index)} {interval} bar(s) on the {calendar} "
                        f"calendar; choose a range with at least 2 (weekdays for XNYS)")
    sigma = check_number(annual_vol, "annual_vol", DataError) / np.sqrt(n)  # per bar
    mu = check_number(annual_drift, "annual_drift", DataError) / n - 0.5 * sigma**2  # Ito: mean simple growth = drift
    parts = {}
    for name in names:
        rng = np.random.default_rng([check_int(seed, "seed", low=0, error=DataError), zlib.crc32(name.encode())])
        close = rng.uniform(20.0, 200.0) * np.exp(np.cumsum(rng.normal(mu, sigma, len(index))))
        opens = np.r_[close[0], close[:-1]] * np.exp(rng.normal(0.0, sigma / 4, len(index)))
        wick = np.exp(np.abs(rng.normal(0.0, sigma / 2, (2, len(index)))))
        parts[name] = pd.DataFrame({"open": opens, "high": np.maximum(opens, close) * wick[0],
                                    "low": np.minimum(opens, close) / wick[1], "close": close,
                                    "volume": np.round(rng.lognormal(np.log(1e5), 0.5, len(index)))}, index=index)
    panel = pd.concat(parts, axis=1, names=["ticker", "field"]).swaplevel(axis=1)
    return panel.reindex(columns=pd.MultiIndex.from_product([FIELDS, names], names=["field", "ticker"]))
