"""Cleaning, the same for every source: a raw panel in, a complete checked panel out.

Each step says what it did; nothing is dropped silently. In order (``_clean`` runs them):

1. a ticker with no price at all in the range (a failed download, or not listed yet) is dropped
   with a ``DataWarning`` naming it; if none is left, ``DataUnavailableError``
   (``_drop_failed_tickers``);
2. dates on which no ticker has a price are dropped (holidays of one exchange in a mixed
   download);
3. gaps of at most ``ffill_limit`` bars are forward-filled: a no-trade day, so open, high and low
   are set to the filled close and volume to 0 (``_fill_gaps``);
4. a ticker with a longer gap, or with missing days at the start of the range, is dropped with a
   ``DataWarning`` that names it and the first missing date (``_drop_long_gaps``);
5. a price <= 0 or a negative volume raises ``DataError`` (``_check_values``), as does having
   fewer than ``min_days`` dates left.

Gaps are judged on the close when the panel has one (the "key" field): it is what every
consumer trades on. Turn the warnings into errors with
``warnings.simplefilter("error", DataWarning)``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from finance.data.checks import FIELDS, PRICE_FIELDS, DataError, DataUnavailableError, DataWarning, check_dates

# A warning raised in a step below points at the caller of load_prices:
# warn <- step <- _clean <- load_prices <- caller.
_WARN_AT_CALLER = 4


def _clean(raw: pd.DataFrame, tickers: list[str], *, min_days: int, ffill_limit: int, label: str) -> pd.DataFrame:
    """Apply the cleaning steps of the module docstring to ``raw``; returns a complete panel
    (dates x (field, ticker)) of the tickers kept, in the order asked for."""
    fields = [f for f in FIELDS if f in raw.columns.get_level_values("field")]
    panel = raw.reindex(columns=pd.MultiIndex.from_product([fields, tickers], names=["field", "ticker"]))
    key = "close" if "close" in fields else fields[0]

    kept = _drop_failed_tickers(panel[key], tickers, key, label)  # step 1
    panel = panel.loc[panel[key][kept].notna().any(axis=1)]  # step 2: not a trading day of this panel
    close = panel[key][kept]
    filled = close.ffill(limit=ffill_limit) if ffill_limit > 0 else close
    kept = _drop_long_gaps(close, filled, kept, ffill_limit, label)  # step 4, before filling what is kept
    panel = _fill_gaps(panel, fields, key, close.isna(), filled, kept)  # step 3
    _check_values(panel, fields, key, label)  # step 5
    if len(panel) < min_days:
        raise DataError(f"got {len(panel)} dates for {kept} from {label!r}, need at least min_days={min_days}; "
                        f"start earlier, end later, or lower min_days")
    panel.index = pd.DatetimeIndex(panel.index.to_numpy(), name="date").as_unit("ns")  # no freq: dates are irregular
    check_dates(panel.index, f"prices from {label!r}")  # files are sorted when read; this guards every source
    return panel


def _drop_failed_tickers(close: pd.DataFrame, tickers: list[str], key: str, label: str) -> list[str]:
    """Step 1: the tickers with at least one ``key`` price; warn about the others by name, and
    raise ``DataUnavailableError`` if none has one."""
    failed = [t for t in tickers if close[t].isna().all()]
    if len(failed) == len(tickers):
        raise DataUnavailableError(f"no {key} prices for any of {tickers} in the range from {label!r}; check the "
                                   f"tickers and dates")
    if failed:
        warnings.warn(f"dropping {failed}: no {key} price in the range from {label!r} (failed download, "
                      f"wrong ticker, or not listed yet)", DataWarning, stacklevel=_WARN_AT_CALLER)
    return [t for t in tickers if t not in failed]


def _drop_long_gaps(close: pd.DataFrame, filled: pd.DataFrame, kept: list[str], ffill_limit: int,
                    label: str) -> list[str]:
    """Step 4: ``kept`` without the tickers that still have a missing price after forward-filling
    ``ffill_limit`` bars (a longer gap, or no price yet on the first date). Warns with each
    dropped ticker's first missing date and the fix; raises ``DataError`` if none is left."""
    long_gap = [t for t in kept if filled[t].isna().any()]
    if not long_gap:
        return kept
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
    warnings.warn(f"dropping {long_gap} from {label!r}: " + "; ".join(why), DataWarning, stacklevel=_WARN_AT_CALLER)
    return kept


def _fill_gaps(panel: pd.DataFrame, fields: list[str], key: str, gap: pd.DataFrame, filled: pd.DataFrame,
               kept: list[str]) -> pd.DataFrame:
    """Step 3: the panel of the ``kept`` tickers with their short gaps filled. ``gap`` marks the
    bars whose ``key`` price was missing, ``filled`` is the forward-filled ``key`` price. A filled
    bar is a no-trade day: a flat bar at the last close with volume 0."""
    parts = {}
    for field in fields:  # at most 5 fields; every op below is over all tickers at once
        values = panel[field][kept]
        if field == key:
            values = filled[kept]
        elif field in PRICE_FIELDS:
            values = values.where(~gap[kept], filled[kept])
        elif field == "volume":
            values = values.where(~gap[kept], 0.0).fillna(0.0)
        parts[field] = values
    panel = pd.concat(parts, axis=1, names=["field", "ticker"])
    # Other price fields may still have isolated holes where the key price exists: take the key price.
    for field in PRICE_FIELDS:
        if field in fields and field != key and panel[field].isna().to_numpy().any():
            panel[field] = panel[field].fillna(panel[key])
    return panel


def _check_values(panel: pd.DataFrame, fields: list[str], key: str, label: str) -> None:
    """Step 5 (values): raise ``DataError`` on the first price <= 0 or infinite (naming the field,
    ticker and date), or on a negative volume. NaN is filled or dropped by then."""
    for field in [key] + [f for f in PRICE_FIELDS if f in fields and f != key]:  # close first: the usual culprit
        bad = panel[field].le(0) | np.isinf(panel[field])
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
