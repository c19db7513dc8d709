"""Daily (or intraday) prices as one tidy panel: ``load_prices`` and ``load_benchmark``.

Every source returns the same shape, so features, envs and backtests never care where prices
came from:

- index: a tz-naive ``DatetimeIndex`` named ``"date"``, sorted, no duplicates;
- columns: a ``MultiIndex`` ``(field, ticker)``; fields are those of ``FIELDS`` the source has,
  in that order, and tickers are in the order asked for. ``prices["close"]`` is always a
  dates x tickers frame;
- values: float prices, all finite and > 0 after cleaning; volume is float too.

Sources:

- ``"yfinance"``: Yahoo Finance through ``yfinance.download`` (split- and dividend-adjusted
  OHLCV), cached as parquet so that a second call, or a call offline, reads the file. Any
  yfinance ``interval`` (``"1d"``, ``"1h"``, ``"5m"``, ``"1wk"``); intraday bars are the regular
  session only (yfinance's ``prepost=False``), labelled by their start. Yahoo serves intraday
  history for recent days only (``YF_INTRADAY_DAYS``: 1h for the last 730 days, 5m for 60, 1m
  for 30, at most 8 days per 1m request); when such a request comes back empty, the
  ``DataUnavailableError`` says so. A cached copy of an older download is still read.
- ``"sample"``: the bundled offline sample, 20 large US stocks (``SAMPLE_TICKERS``), adjusted
  close only, 1990-01-02 .. 2022-12-28 (from skfolio, BSD-3). ``load_benchmark`` gives the
  S&P 500 index over the same dates.
- ``"sample_ohlcv"``: the bundled AAPL, GOOG, IBM, MSFT with open/high/low/close/volume,
  2000-03-01 .. 2013-03-01 (GOOG from 2004-08-19), adjusted (Quandl WIKI via bokeh-sampledata,
  public domain).
- a path to a ``.parquet`` or ``.csv[.gz]`` file, "long" (columns ``date``, ``ticker`` or
  FinRL's ``tic``, and any of ``FIELDS``) or "wide" (a ``date`` column and one close column
  per ticker). The yfinance cache files are long parquet files, so they load this way too.

``synthetic_prices(tickers, start, end, interval="1h")`` makes a deterministic SYNTHETIC panel
(random walks on an NYSE-like session calendar, no network) in the same shape, for offline tests
and examples of intraday bars; it is not market data.

Time stamps: Yahoo's intraday index is tz-aware (the exchange's zone, e.g. America/New_York). It
is made tz-naive in the exchange's wall-clock time, so 09:30 is the open all year (DST included)
and a bar's calendar day is its trading day; if that would repeat a stamp (a 24/7 market in a DST
zone, at the autumn change) the index is kept in UTC instead. Daily bars are dated at midnight.
``finance.trading_calendar.bars_per_year`` reads these stamps to annualise backtest metrics.

``finance/data/README.md`` documents the bundled files, their sources and licences.

Cleaning, the same for every source (each step says what it did; nothing is dropped silently):

1. a ticker with no price at all in the range (a failed download, or not listed yet) is dropped
   with a ``DataWarning`` naming it; if none is left, ``DataUnavailableError``;
2. dates on which no ticker has a price are dropped (holidays of one exchange in a mixed
   download);
3. gaps of at most ``ffill_limit`` days are forward-filled (a no-trade day: open, high and low
   are set to the filled close, volume to 0);
4. a ticker with a longer gap, or with missing days at the start of the range, is dropped with a
   ``DataWarning`` that names it and the first missing date;
5. a price <= 0 or a negative volume raises ``DataError``, as does having fewer than
   ``min_days`` dates left.

Turn the warnings into errors with ``warnings.simplefilter("error", DataWarning)``.
"""

from __future__ import annotations

import datetime
import difflib
import hashlib
import logging
import numbers
import os
import re
import tempfile
import warnings
import zlib
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Sequence, Union

import numpy as np
import pandas as pd

from finance.trading_calendar import bars_per_year, session_index

log = logging.getLogger(__name__)

DateLike = Union[str, datetime.date, pd.Timestamp, np.datetime64, None]

FIELDS: tuple[str, ...] = ("open", "high", "low", "close", "volume")
PRICE_FIELDS: tuple[str, ...] = ("open", "high", "low", "close")

SAMPLE_TICKERS: tuple[str, ...] = (
    "AAPL", "AMD", "BAC", "BBY", "CVX", "GE", "HD", "JNJ", "JPM", "KO",
    "LLY", "MRK", "MSFT", "PEP", "PFE", "PG", "RRC", "UNH", "WMT", "XOM",
)
SAMPLE_OHLCV_TICKERS: tuple[str, ...] = ("AAPL", "GOOG", "IBM", "MSFT")
BENCHMARK_NAME = "S&P 500"
BENCHMARK_YAHOO_TICKER = "^GSPC"

# Sample name -> bundled file (layouts in finance/data/README.md).
_SAMPLE_FILES = {"sample": "sp500_close.parquet", "sample_ohlcv": "ohlcv_2000_2013.parquet"}
_BENCHMARK_FILE = "sp500_index.parquet"
# yfinance's documented intervals; passed through unchanged.
YF_INTERVALS: tuple[str, ...] = ("1m", "2m", "5m", "15m", "30m", "60m", "90m", "1h", "1d", "5d", "1wk",
                                 "1mo", "3mo")
# Days of intraday history Yahoo serves, counted back from today (yfinance's documentation and
# its own checks in yfinance/scrapers/history.py); 1m bars also come at most 8 days per request.
YF_INTRADAY_DAYS: dict[str, int] = {"1m": 30, "2m": 60, "5m": 60, "15m": 60, "30m": 60, "90m": 60,
                                    "60m": 730, "1h": 730}
_YF_1M_REQUEST_DAYS = 8
_CACHE_FORMAT = "v1"  # bump when the layout of cache files changes, so old files are not read


class DataError(ValueError):
    """A request that cannot be served as asked, or data that fails a check. The message says
    what is wrong and how to fix it."""


class DataUnavailableError(DataError):
    """The source returned no data (offline, rate-limited, unknown or delisted tickers) and
    no cached copy exists."""


class DataWarning(UserWarning):
    """Something was dropped or repaired while loading (a failed ticker, a long NaN gap)."""


# ---------------------------------------------------------------------------- shared checks
# One check per rule, used wherever data or a setting enters finance (load_prices, add_features,
# turbulence, StockTradingVecEnv, the backtest baselines), so the same mistake gets the same message.
def _show_date(stamp: Any) -> str:
    if isinstance(stamp, pd.Timestamp) and stamp == stamp.normalize():
        return str(stamp.date())
    return str(stamp)


def check_dates(index: pd.Index, what: str = "prices", note: str = "") -> None:
    """Raise ``DataError`` unless ``index`` is strictly increasing: oldest first, no duplicates.

    Row t must be the day after row t-1: on a newest-first frame a 30-day average would average
    the 30 *future* days, and the env would trade backwards through time. The message names the
    first offending dates and the fix (``df.sort_index()``, dropping duplicate dates), then ``note``.
    """
    if index.is_monotonic_increasing and index.is_unique:  # the common case: one pass, no copies
        return
    if index.hasnans:
        row = int(np.flatnonzero(np.asarray(index.isna()))[0])
        raise DataError(f"{what}: a missing date (NaT/NaN) at row {row}; drop it, e.g. "
                        f"df = df[df.index.notna()]")
    values = np.asarray(index)
    row = int(np.flatnonzero(~(values[1:] > values[:-1]))[0]) + 1  # first row not after the one before
    before, at = _show_date(index[row - 1]), _show_date(index[row])
    if index[row] == index[row - 1]:
        raise DataError(f"{what}: duplicate dates ({int(index.duplicated().sum())} repeated rows; the first is "
                        f"{at}, rows {row - 1} and {row}); dates must be strictly increasing: keep one row per date, "
                        f"e.g. df = df[~df.index.duplicated(keep='last')]{note}")
    order = "newest first" if index.is_monotonic_decreasing else "out of order"
    dup = "" if index.is_unique else ", then drop the duplicate dates (df[~df.index.duplicated(keep='last')])"
    raise DataError(f"{what}: dates are {order}, {at} (row {row}) comes after {before} (row {row - 1}); dates must "
                    f"be strictly increasing (oldest first), or rolling features average future days and the env "
                    f"trades backwards. Sort them: df = df.sort_index(){dup}{note}")


def check_prices(values: np.ndarray, dates: Sequence[Any], tickers: Sequence[Any], what: str = "close") -> None:
    """Raise ``DataError`` unless every price of the (T, S) array ``values`` is finite and > 0,
    naming the first bad (date, ticker) and what to do."""
    bad = ~np.isfinite(values)
    kind, fix = "NaN/inf", ("drop those dates or tickers, or forward-fill short gaps (df.ffill()); "
                            "finance.load_prices does both")
    if not bad.any():
        bad, kind = values <= 0, "non-positive"
        fix = "prices must be > 0: check the data source or leave that ticker out"
        if not bad.any():
            return
    t, s = np.argwhere(bad)[0]
    raise DataError(f"{what}: {int(bad.sum())} {kind} prices (first at {_show_date(dates[t])}, {tickers[s]}: "
                    f"{values[t, s]}); {fix}")


def check_int(value: Any, name: str, low: int | None = None, high: int | None = None,
              error: type[Exception] = ValueError) -> int:
    """``value`` as an ``int``: any integer type (``int``, ``np.int64``), not a bool or a float
    (``2.5`` would be truncated silently), within ``[low, high]``."""
    span = (f" >= {low}" if high is None else f" in [{low}, {high}]") if low is not None else ""
    must = f"{name} must be{span} (an integer)" if span else f"{name} must be an integer"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise error(f"{must}, got {value!r} ({type(value).__name__})")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise error(f"{must}, got {value}")
    return value


def check_number(value: Any, name: str, error: type[Exception] = ValueError) -> float:
    """``value`` as a finite ``float`` (any real number type, not a bool or a string)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise error(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    if not np.isfinite(value):
        raise error(f"{name} must be finite, got {value}")
    return float(value)


# ---------------------------------------------------------------------------- public API
def load_prices(
    tickers: str | Sequence[str] | None,
    start: DateLike = None,
    end: DateLike = None,
    source: str | os.PathLike = "yfinance",
    interval: str = "1d",
    cache_dir: str | os.PathLike | None = None,
    fields: Sequence[str] | None = None,
    min_days: int = 1,
    ffill_limit: int = 5,
) -> pd.DataFrame:
    """Load a clean price panel: dates x (field, ticker).

    Args:
        tickers: one ticker or a list; ``None`` means every ticker of a sample or file.
        start, end: first and last calendar day, both inclusive (``"2020-01-31"``, a
            ``Timestamp``). ``None`` means the first/last date a sample or file has; for
            yfinance ``start`` is required and ``end=None`` means today.
        source: ``"yfinance"``, ``"sample"``, ``"sample_ohlcv"`` or the path of a parquet/csv
            file (see the module docstring).
        interval: yfinance bar size, passed through unchanged (``"1d"``, ``"1h"``, ``"5m"``,
            ...; Yahoo serves intraday bars for recent days only, see ``YF_INTRADAY_DAYS``).
            Samples are daily and accept only ``"1d"``; a file is returned at its own frequency.
        cache_dir: where yfinance downloads are cached as parquet; default
            ``platformdirs.user_cache_dir("podracer")``.
        fields: the subset of ``FIELDS`` to return; ``None`` means all the source has (only
            ``close`` for ``"sample"``).
        min_days: fewer dates than this after cleaning raises ``DataError``.
        ffill_limit: longest gap (in rows, i.e. bars) that is forward-filled; longer gaps drop
            the ticker.

    Returns:
        ``DataFrame`` indexed by a tz-naive ``DatetimeIndex`` named ``"date"``, with
        ``MultiIndex`` columns ``(field, ticker)``. Intraday timestamps keep the exchange's
        wall-clock time.

    Raises:
        DataError: unknown source, ticker or field; empty or reversed range; too few days;
            non-positive prices.
        DataUnavailableError: yfinance returned nothing and nothing is cached.
    """
    names = _as_ticker_list(tickers)
    start_ts, end_ts = _check_range(start, end)
    min_days = check_int(min_days, "min_days", low=1, error=DataError)
    ffill_limit = check_int(ffill_limit, "ffill_limit", low=0, error=DataError)
    wanted = _check_fields(fields)

    if isinstance(source, str) and source == "yfinance":
        if names is None:
            raise DataError("yfinance needs a list of tickers, got None; pass e.g. ['AAPL', 'MSFT']")
        if start_ts is None:
            raise DataError("yfinance needs a start date, got None; pass e.g. start='2015-01-01'")
        if interval not in YF_INTERVALS:
            raise DataError(f"unknown interval {interval!r}; yfinance accepts {', '.join(YF_INTERVALS)}")
        names = [t.upper() for t in names]  # Yahoo symbols are upper case; yfinance returns them so
        end_ts = end_ts if end_ts is not None else pd.Timestamp.today().normalize()
        _check_order(start_ts, end_ts)
        raw = _load_yfinance(names, start_ts, end_ts, interval, cache_dir)
        label = "yfinance"
    else:
        path, label = _resolve_file_source(source)
        if _is_sample(source) and interval != "1d":
            raise DataError(f"the bundled {label!r} data is daily, got interval={interval!r}; use "
                            f"interval='1d', or source='yfinance' for {interval} bars")
        raw = _read_table(path)
        names = _check_known_tickers(names, raw, label)
        raw = raw.loc[:, raw.columns.get_level_values("ticker").isin(names)]
    raw = _select_range(raw, start_ts, end_ts, label)
    raw = _select_fields(raw, wanted, label)
    return _clean(raw, names, min_days=min_days, ffill_limit=ffill_limit, label=label)


def load_benchmark(start: DateLike = None, end: DateLike = None, source: str | os.PathLike = "sample",
                   cache_dir: str | os.PathLike | None = None, min_days: int = 1,
                   interval: str = "1d") -> pd.Series:
    """The S&P 500 index close as a ``Series`` named ``"S&P 500"``, indexed like ``load_prices``.

    ``source="sample"`` reads the bundled copy (1990-01-02 .. 2022-12-28, skfolio);
    ``"yfinance"`` downloads ``^GSPC``; a path reads a wide file with one price column (or a
    column named ``"S&P 500"``). Dates follow ``load_prices``: both ends inclusive. ``interval``
    is yfinance's bar size (``"1h"`` to match hourly prices); the sample is daily.
    """
    if interval != "1d" and not (isinstance(source, str) and source == "yfinance"):
        raise DataError(f"interval={interval!r} needs source='yfinance'; the bundled benchmark and files are read "
                        f"at their own frequency (interval='1d')")
    if isinstance(source, str) and source == "yfinance":
        prices = load_prices([BENCHMARK_YAHOO_TICKER], start, end, source="yfinance", cache_dir=cache_dir,
                             fields=["close"], min_days=min_days, interval=interval)
        series = prices["close"][BENCHMARK_YAHOO_TICKER]
    elif isinstance(source, str) and source == "sample":
        prices = load_prices([BENCHMARK_NAME], start, end, source=_data_dir() / _BENCHMARK_FILE,
                             fields=["close"], min_days=min_days)
        series = prices["close"][BENCHMARK_NAME]
    else:
        if _is_sample(source):
            raise DataError(f"load_benchmark has one bundled series: use source='sample', got {source!r}")
        path, _ = _resolve_file_source(source)
        table = _read_table(path)
        if "close" not in table.columns.get_level_values("field"):
            raise DataError(f"{path} has no close prices; a benchmark file is wide (date, one price column)")
        close = table["close"]
        column = BENCHMARK_NAME if BENCHMARK_NAME in close.columns else None
        if column is None and close.shape[1] != 1:
            raise DataError(f"{path} has {close.shape[1]} price columns {list(close.columns)[:8]}; a benchmark "
                            f"file needs one, or a column named {BENCHMARK_NAME!r}")
        column = column if column is not None else close.columns[0]
        series = load_prices([column], start, end, source=path, fields=["close"], min_days=min_days)["close"][column]
    return series.rename(BENCHMARK_NAME)


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


# ---------------------------------------------------------------------------- validation
def _as_ticker_list(tickers: str | Sequence[str] | None) -> list[str] | None:
    if tickers is None:
        return None
    if isinstance(tickers, str):
        tickers = [tickers]
    names = [str(t).strip() for t in tickers]
    if not names or any(not t for t in names):
        raise DataError(f"expected one or more non-empty tickers, got {list(tickers)!r}")
    return list(dict.fromkeys(names))  # duplicates carry no extra data: keep the first


def _to_timestamp(value: DateLike, name: str) -> pd.Timestamp | None:
    if value is None:
        return None
    try:
        ts = pd.Timestamp(value)
    except (ValueError, TypeError) as exc:
        raise DataError(f"{name}={value!r} is not a date; use e.g. '2020-01-31'") from exc
    if ts is pd.NaT:
        raise DataError(f"{name} is NaT; pass a date such as '2020-01-31' or None")
    return ts.tz_localize(None) if ts.tz is not None else ts


def _check_range(start: DateLike, end: DateLike) -> tuple[pd.Timestamp | None, pd.Timestamp | None]:
    start_ts, end_ts = _to_timestamp(start, "start"), _to_timestamp(end, "end")
    if start_ts is not None and end_ts is not None:
        _check_order(start_ts, end_ts)
    return start_ts, end_ts


def _check_order(start: pd.Timestamp, end: pd.Timestamp) -> None:
    if start > end:
        raise DataError(f"reversed date range: start {start.date()} is after end {end.date()}; swap them")


def _check_fields(fields: Sequence[str] | None) -> list[str] | None:
    if fields is None:
        return None
    if isinstance(fields, str):
        fields = [fields]
    wanted = [str(f).lower() for f in fields]
    unknown = [f for f in wanted if f not in FIELDS]
    if unknown or not wanted:
        raise DataError(f"unknown fields {unknown or wanted}; choose from {FIELDS}")
    if not set(wanted) & set(PRICE_FIELDS):
        raise DataError(f"fields={wanted} has no price; add 'close' (gaps and checks are judged on prices)")
    return [f for f in FIELDS if f in wanted]  # canonical order


def _check_known_tickers(names: list[str] | None, raw: pd.DataFrame, label: str) -> list[str]:
    available = list(dict.fromkeys(raw.columns.get_level_values("ticker")))
    if names is None:
        return available
    unknown = [t for t in names if t not in available]
    if unknown:
        hints = {t: difflib.get_close_matches(t.upper(), available, n=1) for t in unknown}
        hint = "; ".join(f"{t!r}: did you mean {m[0]!r}?" for t, m in hints.items() if m)
        more = "" if label != "sample" else " (source='sample_ohlcv' has AAPL, GOOG, IBM, MSFT with OHLCV)"
        raise DataError(f"unknown tickers {unknown} for source {label!r}; available: {', '.join(available)}"
                        f"{more}{'. ' + hint if hint else ''}")
    return names


# ---------------------------------------------------------------------------- files
def _data_dir() -> Path:
    return Path(str(resources.files("finance").joinpath("data")))


def _is_sample(source: str | os.PathLike) -> bool:
    return isinstance(source, str) and source in _SAMPLE_FILES


def _resolve_file_source(source: str | os.PathLike) -> tuple[Path, str]:
    """A sample name or an existing file -> (path, label used in messages)."""
    if _is_sample(source):
        return _data_dir() / _SAMPLE_FILES[source], source
    path = Path(source)
    if path.is_file():
        return path, str(path)
    raise DataError(f"unknown source {str(source)!r}: expected 'yfinance', 'sample', 'sample_ohlcv', or the "
                    f"path of an existing .parquet/.csv file (no file at {path.resolve()})")


def _read_table(path: Path) -> pd.DataFrame:
    """Read a long or wide price file into the (field, ticker) layout, unchecked."""
    stat = Path(path).stat()
    return _read_table_cached(str(Path(path).resolve()), stat.st_mtime_ns, stat.st_size).copy()


@lru_cache(maxsize=8)
def _read_table_cached(path: str, _mtime_ns: int, _size: int) -> pd.DataFrame:
    # Modification time and size are part of the key, so an edited file is read again.
    name = path.lower()
    if name.endswith(".parquet"):
        table = pd.read_parquet(path)
    elif name.endswith((".csv", ".csv.gz")):
        table = pd.read_csv(path)
    else:
        raise DataError(f"cannot read {path}: expected a .parquet, .csv or .csv.gz file")
    return _table_to_panel(table, path)


def _table_to_panel(table: pd.DataFrame, where: str) -> pd.DataFrame:
    columns = {str(c).strip().lower(): c for c in table.columns}
    if "date" not in columns and str(table.index.name).lower() in ("date", "datetime"):  # a saved index
        table = table.reset_index()
        columns = {str(c).strip().lower(): c for c in table.columns}
    date_col = columns.get("date", columns.get("datetime"))
    if date_col is None:
        raise DataError(f"{where} has no 'date' column (columns: {list(table.columns)[:10]}); expected a long file "
                        f"(date, ticker, open, high, low, close, volume) or a wide one (date, one close column per "
                        f"ticker)")
    dates = pd.to_datetime(table[date_col])
    if getattr(dates.dt, "tz", None) is not None:
        dates = dates.dt.tz_localize(None)
    ticker_col = columns.get("ticker", columns.get("tic"))
    if ticker_col is not None:  # long
        present = [f for f in FIELDS if f in columns]
        if not present:
            raise DataError(f"{where} is a long file (it has a ticker column) but no price column; expected some "
                            f"of {FIELDS}")
        long = table[[columns[f] for f in present]].copy()
        long.columns = present
        long["date"], long["ticker"] = dates.values, table[ticker_col].astype(str).values
        if long.duplicated(["date", "ticker"]).any():
            dup = long.loc[long.duplicated(["date", "ticker"]), ["date", "ticker"]].iloc[0]
            raise DataError(f"{where} has duplicate rows for ({dup['ticker']}, {dup['date'].date()}); keep one row per "
                            f"date and ticker")
        panel = long.pivot(index="date", columns="ticker", values=present)
        panel.columns = panel.columns.set_names(["field", "ticker"])
    else:  # wide: every other column is a ticker's close
        wide = table.drop(columns=[date_col])
        wide.index = pd.DatetimeIndex(dates)
        wide.columns = [str(c) for c in wide.columns]
        if wide.index.has_duplicates:
            raise DataError(f"{where} has duplicate dates, e.g. {wide.index[wide.index.duplicated()][0].date()}; keep "
                            f"one row per date")
        panel = pd.concat({"close": wide}, axis=1, names=["field", "ticker"])
    panel = panel.apply(pd.to_numeric, errors="coerce").astype("float64")
    panel.index = pd.DatetimeIndex(panel.index, name="date").as_unit("ns")
    return panel.sort_index()


# ---------------------------------------------------------------------------- yfinance
def _cache_path(tickers: Sequence[str], start: pd.Timestamp, end: pd.Timestamp, interval: str,
                cache_dir: str | os.PathLike | None) -> Path:
    """Cache file of one download: readable prefix + hash of (tickers, start, end, interval).

    Tickers are sorted, so the order they were asked in does not matter; anything else
    (one more ticker, another day, another interval) gives another file.
    """
    if cache_dir is None:
        import platformdirs

        cache_dir = platformdirs.user_cache_dir("podracer")
    names = sorted(set(tickers))
    key = "|".join([_CACHE_FORMAT, ",".join(names), start.isoformat(), end.isoformat(), interval, "auto_adjust"])
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    shown = "-".join(re.sub(r"[^A-Za-z0-9.]+", "_", t) for t in names[:3])  # ^GSPC -> _GSPC
    shown += f"+{len(names) - 3}" if len(names) > 3 else ""
    return Path(cache_dir) / f"yf_{interval}_{start.date()}_{end.date()}_{shown}_{digest}.parquet"


def _load_yfinance(tickers: list[str], start: pd.Timestamp, end: pd.Timestamp, interval: str,
                   cache_dir: str | os.PathLike | None) -> pd.DataFrame:
    path = _cache_path(tickers, start, end, interval, cache_dir)
    if path.is_file():
        log.info("reading cached download %s", path)
        return _read_table(path)
    raw = _download(tickers, start, end, interval, path)
    if raw.index.has_duplicates:  # Yahoo sometimes repeats a bar; never cache it, so a retry can fix it
        check_dates(raw.index, f"yfinance's download of {', '.join(tickers)} ({interval})",
                    note=". Yahoo sometimes repeats a bar: nothing was cached, so a later call downloads again")
    # A partial failure is often transient (rate limits): only complete downloads are cached, so
    # the next online call tries the failed tickers again. _clean reports the failed ones.
    if not raw["close"].isna().all().any():
        _write_cache(raw, path)
    return raw


def _download(tickers: list[str], start: pd.Timestamp, end: pd.Timestamp, interval: str, path: Path) -> pd.DataFrame:
    try:
        import yfinance as yf
    except ImportError as exc:
        raise ImportError("source='yfinance' needs the yfinance package: pip install 'podracer-rl[finance]', "
                          "or use source='sample'") from exc

    what = f"{', '.join(tickers)} from {start.date()} to {end.date()} (interval {interval})"
    limit = _intraday_history_note(start, end, interval)  # the likely reason, for old intraday requests
    fix = (f"Use source='sample' for the bundled offline data (tickers {', '.join(SAMPLE_TICKERS)}; "
           f"1990-01-02 .. 2022-12-28), or run once online to fill the cache (no cached copy at {path}).")
    try:
        # yfinance's `end` is exclusive; ours is an inclusive calendar day.
        frame = yf.download(tickers, start=start.strftime("%Y-%m-%d"),
                            end=(end.normalize() + pd.Timedelta(days=1)).strftime("%Y-%m-%d"),
                            interval=interval, auto_adjust=True, group_by="ticker", threads=False, progress=False)
    except Exception as exc:  # any failure inside yfinance means the same thing to the caller
        raise DataUnavailableError(f"yfinance failed for {what}: {type(exc).__name__}: {exc}. {limit}{fix}") from exc
    # Offline, yfinance logs each failure and returns an empty frame instead of raising.
    if frame is None or frame.empty or frame.dropna(how="all").empty:
        reason = limit or "offline, rate-limited, or unknown tickers (yfinance logs the reason). "
        raise DataUnavailableError(f"yfinance returned no data for {what}: {reason}{fix}")
    return _yfinance_to_panel(frame, tickers)


def _yfinance_to_panel(frame: pd.DataFrame, tickers: list[str]) -> pd.DataFrame:
    """yfinance's (Ticker, Price) or single-level columns -> our (field, ticker) layout."""
    frame = frame.copy()
    if isinstance(frame.columns, pd.MultiIndex):
        level0 = {str(v).lower() for v in frame.columns.get_level_values(0)}
        if "close" in level0:  # group_by="column" layout: (Price, Ticker)
            frame.columns = frame.columns.swaplevel(0, 1)
        frame.columns = pd.MultiIndex.from_tuples([(str(p).lower(), str(t)) for t, p in frame.columns],
                                                  names=["field", "ticker"])
    elif len(tickers) == 1:  # older yfinance drops the ticker level for one ticker
        frame.columns = pd.MultiIndex.from_tuples([(str(p).lower(), tickers[0]) for p in frame.columns],
                                                  names=["field", "ticker"])
    else:
        raise DataError(f"unexpected yfinance columns {list(frame.columns)[:8]} for tickers {tickers}")
    frame = frame.loc[:, frame.columns.get_level_values("field").isin(FIELDS)].astype("float64")
    present = [f for f in FIELDS if f in frame.columns.get_level_values("field")]
    columns = pd.MultiIndex.from_product([present, tickers], names=["field", "ticker"])
    frame = frame.reindex(columns=columns)  # a ticker yfinance left out becomes all-NaN: reported later
    frame.index = _naive_index(pd.DatetimeIndex(frame.index)).rename("date").as_unit("ns")
    return frame.sort_index()


def _naive_index(index: pd.DatetimeIndex) -> pd.DatetimeIndex:
    """Tz-aware stamps -> tz-naive exchange wall-clock time (09:30 is the open all year), or UTC
    where wall-clock time would repeat a stamp (24/7 bars in a DST zone); see the module docstring."""
    if index.tz is None:
        return index
    wall = index.tz_localize(None)
    if wall.has_duplicates and not index.has_duplicates:
        log.info("intraday stamps in %s repeat at a DST change; keeping them in UTC", index.tz)
        return index.tz_convert("UTC").tz_localize(None)
    return wall


def _intraday_history_note(start: pd.Timestamp, end: pd.Timestamp, interval: str) -> str:
    """Why Yahoo refuses an intraday request (older than it serves, or too long for 1m), or "".

    Said only once a download came back empty: the limits are Yahoo's, and may change."""
    days = YF_INTRADAY_DAYS.get(interval)
    if days is None:
        return ""
    earliest = pd.Timestamp.today().normalize() - pd.Timedelta(days=days)
    if start < earliest:
        longer = "interval='1h' (730 days) or '1d'" if days < 730 else "interval='1d'"
        return (f"Yahoo serves {interval} bars for the last {days} days only (from {earliest.date()}), and "
                f"start={start.date()} is older: start on or after {earliest.date()}, use {longer} for older "
                f"history, or load a saved file (source=path). ")
    span = (end.normalize() - start.normalize()).days + 1
    if interval == "1m" and span > _YF_1M_REQUEST_DAYS:
        return (f"Yahoo serves at most {_YF_1M_REQUEST_DAYS} days of 1m bars per request, and this asks for {span} "
                f"days: ask for {_YF_1M_REQUEST_DAYS} days at a time, or use interval='2m'. ")
    return ""


def _write_cache(panel: pd.DataFrame, path: Path) -> None:
    """Write atomically (temp file + rename): an interrupted write never leaves a bad cache."""
    path.parent.mkdir(parents=True, exist_ok=True)
    long = panel.stack(level="ticker", future_stack=True).reset_index()
    long = long.dropna(subset=[c for c in FIELDS if c in long.columns], how="all")
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    try:
        long.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    log.info("cached download in %s", path)


# ---------------------------------------------------------------------------- cleaning
def _select_range(raw: pd.DataFrame, start: pd.Timestamp | None, end: pd.Timestamp | None, label: str) -> pd.DataFrame:
    index = raw.index
    mask = np.ones(len(index), dtype=bool)
    if start is not None:
        mask &= index >= start
    if end is not None:  # `end` is a calendar day: keep all of it (intraday bars included)
        mask &= index < end.normalize() + pd.Timedelta(days=1)
    out = raw.loc[mask]
    if out.empty:
        have = f"{index.min().date()} .. {index.max().date()}" if len(index) else "nothing"
        raise DataError(f"no dates between {start.date() if start is not None else 'the start'} and "
                        f"{end.date() if end is not None else 'the end'} in {label!r}, which covers {have}; "
                        f"choose dates inside that range")
    return out


def _select_fields(raw: pd.DataFrame, wanted: list[str] | None, label: str) -> pd.DataFrame:
    have = [f for f in FIELDS if f in raw.columns.get_level_values("field")]
    if wanted is None:
        wanted = have
    missing = [f for f in wanted if f not in have]
    if missing:
        hint = " Use source='sample_ohlcv' or 'yfinance' for OHLCV." if label == "sample" else ""
        raise DataError(f"source {label!r} has no {missing} (it has {have}); ask for fields={have}.{hint}")
    return raw.loc[:, raw.columns.get_level_values("field").isin(wanted)]


def _clean(raw: pd.DataFrame, tickers: list[str], *, min_days: int, ffill_limit: int, label: str) -> pd.DataFrame:
    """Apply the cleaning rules of the module docstring; returns a complete panel."""
    fields = [f for f in FIELDS if f in raw.columns.get_level_values("field")]
    columns = pd.MultiIndex.from_product([fields, tickers], names=["field", "ticker"])
    panel = raw.reindex(columns=columns)
    # Gaps are judged on close when there is one: it is what every consumer trades on.
    key = "close" if "close" in fields else fields[0]
    close = panel[key]

    failed = [t for t in tickers if close[t].isna().all()]
    if len(failed) == len(tickers):
        raise DataUnavailableError(f"no {key} prices for any of {tickers} in the range from {label!r}; check the "
                                   f"tickers and dates")
    if failed:
        warnings.warn(f"dropping {failed}: no {key} price in the range from {label!r} (failed download, "
                      f"wrong ticker, or not listed yet)", DataWarning, stacklevel=3)
    kept = [t for t in tickers if t not in failed]

    # Dates with no price for any kept ticker are not trading days of this panel.
    panel = panel.loc[panel[key][kept].notna().any(axis=1)]
    close = panel[key][kept]
    gap = close.isna()  # (T, n) True where the bar is missing before filling
    filled = close.ffill(limit=ffill_limit) if ffill_limit > 0 else close
    long_gap = [t for t in kept if filled[t].isna().any()]
    if long_gap:
        why = []
        for t in long_gap:  # a handful of names, for the message only
            first_price = close[t].first_valid_index()
            if first_price > close.index[0]:
                why.append(f"{t} has no price before {first_price.date()} (start there to keep it)")
            else:
                unfilled = int(np.flatnonzero(filled[t].isna().to_numpy())[0])
                gap_start = int(np.flatnonzero(close[t].iloc[:unfilled].notna().to_numpy())[-1]) + 1
                why.append(f"{t} is missing from {close.index[gap_start].date()} for more than "
                           f"ffill_limit={ffill_limit} rows (raise ffill_limit or start after the gap)")
        kept = [t for t in kept if t not in long_gap]
        if not kept:
            raise DataError(f"no ticker left from {label!r}: " + "; ".join(why))
        warnings.warn(f"dropping {long_gap} from {label!r}: " + "; ".join(why), DataWarning, stacklevel=3)

    parts = {}
    for field in fields:  # at most 5 fields; every op below is over all tickers at once
        values = panel[field][kept]
        if field == key:
            values = filled[kept]
        elif field in PRICE_FIELDS:
            # A filled no-trade day is a flat bar at the last close.
            values = values.where(~gap[kept], filled[kept])
        elif field == "volume":
            values = values.where(~gap[kept], 0.0).fillna(0.0)
        parts[field] = values
    panel = pd.concat(parts, axis=1, names=["field", "ticker"])
    # Other price fields may still have isolated holes where close exists: take the close.
    for field in PRICE_FIELDS:
        if field in fields and field != key and panel[field].isna().to_numpy().any():
            panel[field] = panel[field].fillna(panel[key])

    for field in [key] + [f for f in PRICE_FIELDS if f in fields and f != key]:  # close first: the usual culprit
        bad = panel[field].le(0) | np.isinf(panel[field])  # NaN is filled or dropped above
        if bad.to_numpy().any():
            ticker = bad.any().idxmax()
            date = bad[ticker].idxmax()
            price = panel.loc[date, (field, ticker)]
            raise DataError(f"{'non-positive' if price <= 0 else 'infinite'} {field} price {price} for {ticker} on "
                            f"{date.date()} in {label!r}; fix the source data or leave {ticker} out")
    if "volume" in fields and panel["volume"].lt(0).to_numpy().any():
        ticker = panel["volume"].lt(0).any().idxmax()
        raise DataError(f"negative volume for {ticker} in {label!r}; fix the source data or ask for fields "
                        f"without 'volume'")
    if len(panel) < min_days:
        raise DataError(f"got {len(panel)} dates for {kept} from {label!r}, need at least min_days={min_days}; "
                        f"start earlier, end later, or lower min_days")
    panel.index = pd.DatetimeIndex(panel.index.to_numpy(), name="date").as_unit("ns")  # no freq: dates are irregular
    check_dates(panel.index, f"prices from {label!r}")  # files are sorted when read; this guards every source
    return panel
