"""File sources: the bundled offline samples and the user's own parquet/csv files, read into the
panel layout (dates x (field, ticker)), unchecked (``finance.data.clean`` checks them).

The bundled files live next to this module; ``README.md`` in this folder documents their
layouts, sources and licences.
"""

from __future__ import annotations

import os
from functools import lru_cache
from importlib import resources
from pathlib import Path

import pandas as pd

from finance.data.checks import DIVIDENDS, FIELDS, DataError

SAMPLE_TICKERS: tuple[str, ...] = (
    "AAPL", "AMD", "BAC", "BBY", "CVX", "GE", "HD", "JNJ", "JPM", "KO",
    "LLY", "MRK", "MSFT", "PEP", "PFE", "PG", "RRC", "UNH", "WMT", "XOM",
)
"""The 20 US stocks of the bundled daily close sample (``source="sample"``, 1990-2022)."""
SAMPLE_OHLCV_TICKERS: tuple[str, ...] = ("AAPL", "GOOG", "IBM", "MSFT")
"""The stocks of the bundled daily OHLCV sample (``source="sample_ohlcv"``, 2000-2013)."""
BENCHMARK_NAME = "S&P 500"  # the column of the bundled index file, and the name of every benchmark series

# Sample name -> bundled file (layouts in README.md, next to this module).
_SAMPLE_FILES = {"sample": "sp500_close.parquet", "sample_ohlcv": "ohlcv_2000_2013.parquet"}
_BENCHMARK_FILE = "sp500_index.parquet"


def _data_dir() -> Path:
    """The folder of the bundled files (this package's folder, wherever it is installed)."""
    return Path(str(resources.files("finance.data")))


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
        present = [f for f in FIELDS + (DIVIDENDS,) if f in columns]  # load_prices keeps dividends if asked
        if not set(present) - {DIVIDENDS}:
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
