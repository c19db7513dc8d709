"""``load_prices`` and ``load_benchmark``: a request checked, read from its source, cleaned.

The sources are ``finance.data.yahoo`` (``"yfinance"``) and ``finance.data.files`` (the bundled
samples and user files); ``finance.data.clean`` applies the same cleaning to every one.
"""

from __future__ import annotations

import datetime
import difflib
import os
from typing import Sequence, Union

import numpy as np
import pandas as pd

from finance.data.checks import ADJUSTMENT, DIVIDENDS, FIELDS, PRICE_FIELDS, DataError, check_int
from finance.data.clean import _clean
from finance.data.files import BENCHMARK_NAME, _BENCHMARK_FILE, _data_dir, _is_sample, _read_table, _resolve_file_source
from finance.data.yahoo import BENCHMARK_YAHOO_TICKER, YF_INTERVALS, _load_yfinance

DateLike = Union[str, datetime.date, pd.Timestamp, np.datetime64, None]


# ---------------------------------------------------------------------------- public API
def load_prices(
    tickers: str | Sequence[str] | None = None,
    start: DateLike = None,
    end: DateLike = None,
    source: str | os.PathLike = "yfinance",
    interval: str = "1d",
    cache_dir: str | os.PathLike | None = None,
    fields: Sequence[str] | None = None,
    min_days: int = 1,
    ffill_limit: int = 5,
    dividends: bool = False,
) -> pd.DataFrame:
    """Load a clean price panel: dates x (field, ticker).

    Args:
        tickers: one ticker or a list; ``None`` means every ticker of a sample or file.
        start, end: first and last calendar day, both inclusive (``"2020-01-31"``, a
            ``Timestamp``). ``None`` means the first/last date a sample or file has; for
            yfinance ``start`` is required and ``end=None`` means today.
        source: ``"yfinance"``, ``"sample"``, ``"sample_ohlcv"`` or the path of a parquet/csv
            file (the sources are described in ``finance.data``).
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
        dividends: add a ``"dividends"`` field, the cash dividend per share on each ex-date (0
            elsewhere), with prices adjusted for splits only, so the env can pay dividends as cash
            (``StockTradingVecEnv(dividends=...)``) without counting them twice. yfinance downloads
            them (``auto_adjust=False, actions=True``); a long file needs a ``dividends`` column; the
            bundled samples have none (their prices already include dividends).

    Returns:
        ``DataFrame`` indexed by a tz-naive ``DatetimeIndex`` named ``"date"``, with
        ``MultiIndex`` columns ``(field, ticker)``. Intraday timestamps keep the exchange's
        wall-clock time.

    Raises:
        DataError: unknown source, ticker or field; empty or reversed range; too few days;
            non-positive prices.
        DataUnavailableError: yfinance returned nothing and nothing is cached.

    ``result.attrs["adjustment"]`` says what the prices include: ``"total_return"`` (yfinance's
    default and the samples: back-adjusted for splits and dividends) or ``"splits"`` (with
    ``dividends=True``); a file's own prices are not tagged.
    """
    names = _as_ticker_list(tickers)
    start_ts, end_ts = _check_range(start, end)
    min_days = check_int(min_days, "min_days", low=1, error=DataError)
    ffill_limit = check_int(ffill_limit, "ffill_limit", low=0, error=DataError)
    wanted = _check_fields(fields)
    if not isinstance(dividends, bool):
        raise DataError(f"dividends must be True or False, got {dividends!r}")
    if dividends and _is_sample(source):
        raise DataError(f"the bundled {source!r} data has no dividends: its prices are back-adjusted, so dividends "
                        "are inside them already (a total return). Use source='yfinance' or a long file with a "
                        "'dividends' column for dividends paid as cash, or dividends=False")

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
        raw = _load_yfinance(names, start_ts, end_ts, interval, cache_dir, dividends)
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
    panel = _clean(_select_fields(raw, wanted, label), names, min_days=min_days, ffill_limit=ffill_limit, label=label)
    if dividends:
        panel = _with_dividends(panel, raw, label)
    # What the prices include, for the env's check that a dividend is never counted twice.
    if dividends or label == "yfinance" or _is_sample(source):
        panel.attrs[ADJUSTMENT] = "splits" if dividends else "total_return"
    return panel


def _with_dividends(panel: pd.DataFrame, raw: pd.DataFrame, label: str) -> pd.DataFrame:
    """``panel`` with a ``dividends`` field from ``raw``: cash per share on each ex-date, 0 elsewhere,
    on the panel's dates and tickers. A dividend on a date cleaning dropped is paid on the next date."""
    if DIVIDENDS not in raw.columns.get_level_values("field"):
        raise DataError(f"{label!r} has no dividends: a long file needs a 'dividends' column (cash per share on "
                        "each ex-date, 0 or empty elsewhere), or pass dividends=False")
    tickers = list(panel["close"].columns if "close" in panel.columns.get_level_values("field")
                   else dict.fromkeys(panel.columns.get_level_values("ticker")))
    cash = raw[DIVIDENDS].reindex(columns=tickers).fillna(0.0)
    bad = ~np.isfinite(cash.to_numpy()) | (cash.to_numpy() < 0)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise DataError(f"dividend {cash.iat[row, col]} for {tickers[col]} on {cash.index[row].date()} in {label!r}: "
                        "dividends are cash per share, finite and >= 0; fix the source data")
    after = panel.index.searchsorted(cash.index)  # the first kept date on or after each row's date
    inside = after < len(panel.index)
    per_date = cash[inside].groupby(after[inside]).sum()
    out = pd.DataFrame(0.0, index=panel.index, columns=pd.Index(tickers, name="ticker"))
    out.iloc[per_date.index.to_numpy()] = per_date.to_numpy()
    return pd.concat([panel, pd.concat({DIVIDENDS: out}, axis=1, names=["field", "ticker"])], axis=1)


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


# ---------------------------------------------------------------------------- selection
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

