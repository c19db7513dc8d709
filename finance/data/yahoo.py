"""The ``"yfinance"`` source: Yahoo Finance through ``yfinance.download``, cached as parquet.

A download is split- and dividend-adjusted OHLCV (``auto_adjust=True``) for any yfinance
``interval``; with ``dividends=True`` it is split-adjusted only (``auto_adjust=False``, Yahoo's
``Close``, not its ``Adj Close``) with the cash dividend per share on each ex-date
(``actions=True``), so a dividend is paid once, as cash, never also inside the price. Intraday
bars are the regular session only (``prepost=False``), labelled by their start. Each complete
download is written to one cache file (``_cache_path``: its name hashes the tickers, dates,
interval and adjustment), so a second call, or a call offline, reads the file instead.
Yahoo serves intraday history for recent days only (``YF_INTRADAY_DAYS``); when such a request
comes back empty, the ``DataUnavailableError`` says so.

Time stamps: Yahoo's intraday index is tz-aware (the exchange's zone). It is made tz-naive in the
exchange's wall-clock time, so 09:30 is the open all year (DST included) and a bar's calendar
day is its trading day; if that would repeat a stamp (a 24/7 market in a DST zone, at the autumn
change) the index is kept in UTC instead.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Sequence

import pandas as pd

from finance.data.checks import DIVIDENDS, FIELDS, DataError, DataUnavailableError, check_dates
from finance.data.files import SAMPLE_TICKERS, _read_table

log = logging.getLogger(__name__)

BENCHMARK_YAHOO_TICKER = "^GSPC"
# yfinance's documented intervals; passed through unchanged.
YF_INTERVALS: tuple[str, ...] = ("1m", "2m", "5m", "15m", "30m", "60m", "90m", "1h", "1d", "5d", "1wk",
                                 "1mo", "3mo")
# Days of intraday history Yahoo serves, counted back from today (yfinance's documentation and
# its own checks in yfinance/scrapers/history.py); 1m bars also come at most 8 days per request.
YF_INTRADAY_DAYS: dict[str, int] = {"1m": 30, "2m": 60, "5m": 60, "15m": 60, "30m": 60, "90m": 60,
                                    "60m": 730, "1h": 730}
_YF_1M_REQUEST_DAYS = 8
_CACHE_FORMAT = "v1"  # bump when the layout of cache files changes, so old files are not read


def _cache_path(tickers: Sequence[str], start: pd.Timestamp, end: pd.Timestamp, interval: str,
                cache_dir: str | os.PathLike | None, dividends: bool = False) -> Path:
    """Cache file of one download: readable prefix + hash of (tickers, start, end, interval).

    Tickers are sorted, so the order they were asked in does not matter; anything else
    (one more ticker, another day, another interval) gives another file.
    """
    if cache_dir is None:
        import platformdirs

        cache_dir = platformdirs.user_cache_dir("podracer")
    names = sorted(set(tickers))
    adjust = "splits+dividends" if dividends else "auto_adjust"  # another price series: another file
    key = "|".join([_CACHE_FORMAT, ",".join(names), start.isoformat(), end.isoformat(), interval, adjust])
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    shown = "-".join(re.sub(r"[^A-Za-z0-9.]+", "_", t) for t in names[:3])  # ^GSPC -> _GSPC
    shown += f"+{len(names) - 3}" if len(names) > 3 else ""
    tag = "_div" if dividends else ""
    return Path(cache_dir) / f"yf_{interval}{tag}_{start.date()}_{end.date()}_{shown}_{digest}.parquet"


def _load_yfinance(tickers: list[str], start: pd.Timestamp, end: pd.Timestamp, interval: str,
                   cache_dir: str | os.PathLike | None, dividends: bool = False) -> pd.DataFrame:
    path = _cache_path(tickers, start, end, interval, cache_dir, dividends)
    if path.is_file():
        log.info("reading cached download %s", path)
        return _read_table(path)
    raw = _download(tickers, start, end, interval, path, dividends)
    if raw.index.has_duplicates:  # Yahoo sometimes repeats a bar; never cache it, so a retry can fix it
        check_dates(raw.index, f"yfinance's download of {', '.join(tickers)} ({interval})",
                    note=". Yahoo sometimes repeats a bar: nothing was cached, so a later call downloads again")
    # A partial failure is often transient (rate limits): only complete downloads are cached, so
    # the next online call tries the failed tickers again. _clean reports the failed ones.
    if not raw["close"].isna().all().any():
        _write_cache(raw, path)
    return raw


def _download(tickers: list[str], start: pd.Timestamp, end: pd.Timestamp, interval: str, path: Path,
              dividends: bool = False) -> pd.DataFrame:
    try:
        import yfinance as yf
    except ImportError as exc:
        raise ImportError("source='yfinance' needs the yfinance package: pip install 'podracer-rl[finance]', "
                          "or use source='sample'") from exc

    what = f"{', '.join(tickers)} from {start.date()} to {end.date()} (interval {interval})"
    limit = _intraday_history_note(start, end, interval)  # the likely reason, for old intraday requests
    fix = (f"Use source='sample' for the bundled offline data (tickers {', '.join(SAMPLE_TICKERS)}; "
           f"1990-01-02 .. 2022-12-28), or run once online to fill the cache (no cached copy at {path}).")
    # Split-adjusted prices and the dividends as cash, or total-return prices (dividends inside them).
    adjust = dict(auto_adjust=False, actions=True) if dividends else dict(auto_adjust=True)
    try:
        # yfinance's `end` is exclusive; ours is an inclusive calendar day.
        frame = yf.download(tickers, start=start.strftime("%Y-%m-%d"),
                            end=(end.normalize() + pd.Timedelta(days=1)).strftime("%Y-%m-%d"),
                            interval=interval, **adjust, group_by="ticker", threads=False, progress=False)
    except Exception as exc:  # any failure inside yfinance means the same thing to the caller
        raise DataUnavailableError(f"yfinance failed for {what}: {type(exc).__name__}: {exc}. {limit}{fix}") from exc
    # Offline, yfinance logs each failure and returns an empty frame instead of raising.
    if frame is None or frame.empty or frame.dropna(how="all").empty:
        reason = limit or "offline, rate-limited, or unknown tickers (yfinance logs the reason). "
        raise DataUnavailableError(f"yfinance returned no data for {what}: {reason}{fix}")
    return _yfinance_to_panel(frame, tickers, dividends)


def _yfinance_to_panel(frame: pd.DataFrame, tickers: list[str], dividends: bool = False) -> pd.DataFrame:
    """yfinance's (Ticker, Price) or single-level columns -> our (field, ticker) layout; with
    ``dividends``, the ``Dividends`` column too (``Adj Close`` and ``Stock Splits`` are dropped)."""
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
    keep = FIELDS + ((DIVIDENDS,) if dividends else ())
    frame = frame.loc[:, frame.columns.get_level_values("field").isin(keep)].astype("float64")
    present = [f for f in keep if f in frame.columns.get_level_values("field")]
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
