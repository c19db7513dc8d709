"""What a valid price panel is, and the errors and checks that say when something is not.

Used wherever data or a setting enters finance (``load_prices``, ``add_features``,
``turbulence``, ``StockTradingVecEnv``, the backtest baselines), so the same mistake gets the
same message everywhere.
"""

from __future__ import annotations

import numbers
from typing import Any, Sequence

import numpy as np
import pandas as pd

# The fields of a panel, in column order; every source returns the subset it has.
FIELDS: tuple[str, ...] = ("open", "high", "low", "close", "volume")
"""The price fields a panel may hold (the second level of its columns)."""
PRICE_FIELDS: tuple[str, ...] = ("open", "high", "low", "close")
DIVIDENDS = "dividends"
"""The field of cash dividends per share, on each ex-date (``load_prices(..., dividends=True)``)."""
ADJUSTMENT = "adjustment"
"""The ``DataFrame.attrs`` key ``load_prices`` sets: ``"total_return"`` (back-adjusted for splits and
dividends: dividends are inside the prices) or ``"splits"`` (split-adjusted only, dividends paid as
cash from the ``dividends`` field). The env refuses dividends as cash on total-return prices."""


class DataError(ValueError):
    """A request that cannot be served as asked, or data that fails a check. The message says
    what is wrong and how to fix it."""


class DataUnavailableError(DataError):
    """The source returned no data (offline, rate-limited, unknown or delisted tickers) and
    no cached copy exists."""


class DataWarning(UserWarning):
    """Something was dropped or repaired while loading (a failed ticker, a long NaN gap)."""


# ---------------------------------------------------------------------------- checks
# One check per rule, each naming the first bad value and the fix.
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


def check_numeric(data: Any, what: str = "data") -> np.ndarray:
    """``data`` (a DataFrame, Series or array) as a float64 array of the same shape, NaN kept, or a
    ``DataError`` naming the columns that hold text, dates or other non-numbers and the fix.

    pandas stores a column with one stray string (a "n/a" in a csv, a ticker read as a value) as
    text; numpy's conversion then fails with "could not convert string to float" and no column
    name. Booleans are refused too: True is not a price or a return.
    """
    if isinstance(data, pd.DataFrame):
        bad = [(col, dtype) for col, dtype in data.dtypes.items() if not _is_number_dtype(dtype)]
        if bad:
            col, dtype = bad[0]
            names = [str(c) for c, _ in bad][:8]
            column = data.loc[:, [col]].iloc[:, 0]  # one column even when labels repeat
            example = _first_non_number(column)
            raise DataError(f"{what}: {len(bad)} column(s) hold non-numbers: {names} ({dtype}{example}); every column "
                            f"must be numeric. Drop them (df.drop(columns={names})) or convert them "
                            "(df[col] = pd.to_numeric(df[col], errors='coerce') turns text into NaN)")
        return data.to_numpy(dtype=np.float64, na_value=np.nan)
    if isinstance(data, pd.Series):
        if not _is_number_dtype(data.dtype):
            raise DataError(f"{what}: holds non-numbers ({data.dtype}{_first_non_number(data)}); pass numbers, e.g. "
                            "pd.to_numeric(series, errors='coerce') (text becomes NaN)")
        return data.to_numpy(dtype=np.float64, na_value=np.nan)
    values = np.asarray(data)
    if values.dtype.kind not in "iuf":
        sample = _first_non_number(values.ravel())
        if values.dtype.kind == "b" or sample:
            raise DataError(f"{what}: holds non-numbers ({values.dtype}{sample}); pass numbers, e.g. "
                            "pd.to_numeric(x, errors='coerce') (text becomes NaN)")
    return values.astype(np.float64)


def _is_number_dtype(dtype: Any) -> bool:
    return pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)


def _first_non_number(values: Any) -> str:
    """", e.g. 'n/a'" for the first value that is not a real number (bools count as not), or ""."""
    for v in values:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
            return f", e.g. {v!r}"
    return ""
