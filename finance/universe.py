"""Point-in-time universes: which names may be traded on which days.

A membership table has one row per spell of membership: ``ticker``, ``start``, ``end`` (dates,
both inclusive; an empty ``end`` means still a member). A name may have several spells (it left
the index and came back). ``StockTradingVecEnv(universe=...)`` takes the table (a DataFrame or
the path of a csv/parquet file) and never trades a name outside its spells: an order fills only
where the name is a member on the fill day, and a position is closed at the last fill of a spell
(``docs/trading_realism.md``). Prices must still be finite on every day of the env's data (fill
the days outside a name's spells, e.g. ``close.ffill().bfill()``: they are never traded).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

MEMBERSHIP_COLUMNS = ("ticker", "start", "end")


def read_membership(universe: pd.DataFrame | str | os.PathLike) -> pd.DataFrame:
    """The membership table as a DataFrame (``ticker``, ``start``, ``end`` as Timestamps, ``end``
    NaT for a current member), checked: each bad row is a ValueError naming it and the fix."""
    if isinstance(universe, (str, os.PathLike)):
        path = Path(universe)
        if not path.exists():
            raise ValueError(f"membership file {str(path)!r} does not exist; pass a csv or parquet file with columns "
                             "ticker, start, end (or a DataFrame)")
        table = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    elif isinstance(universe, pd.DataFrame):
        table = universe.copy()
    else:
        raise ValueError(f"universe must be a membership DataFrame or the path of a csv/parquet file with columns "
                         f"ticker, start, end, got {type(universe).__name__}")
    missing = [c for c in MEMBERSHIP_COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"the membership table lacks columns {missing}; it needs ticker, start, end (one row per "
                         "spell of membership, end empty for a current member)")
    table = table[list(MEMBERSHIP_COLUMNS)].copy()
    table["ticker"] = table["ticker"].astype(str)
    for col in ("start", "end"):
        try:
            table[col] = pd.to_datetime(table[col])
        except (ValueError, TypeError) as exc:
            raise ValueError(f"membership column {col!r} holds a value that is not a date: {exc}") from None
    if table["start"].isna().any():
        raise ValueError(f"membership rows {list(table.index[table['start'].isna()][:5])} have no start date; every "
                         "spell needs one")
    backwards = table["end"].notna() & (table["end"] < table["start"])
    if backwards.any():
        row = table[backwards].iloc[0]
        raise ValueError(f"membership of {row['ticker']!r} ends ({row['end'].date()}) before it starts "
                         f"({row['start'].date()}); swap them")
    return table


def membership_mask(universe: pd.DataFrame | str | os.PathLike, dates: pd.Index, tickers: list[str]) -> np.ndarray:
    """(T, S) bool: True where ticker s is a member on date t (``read_membership``'s spells)."""
    table = read_membership(universe)
    if not isinstance(dates, pd.DatetimeIndex):
        raise ValueError("a membership universe needs prices indexed by date (a DataFrame of closes)")
    unknown = sorted(set(table["ticker"]) - set(map(str, tickers)))
    if unknown:
        raise ValueError(f"the membership table names {unknown[:8]}, which the prices do not have; load their prices "
                         "too (a name out of the data cannot be traded) or drop those rows")
    column = {str(t): i for i, t in enumerate(tickers)}
    mask = np.zeros((len(dates), len(tickers)), dtype=bool)
    for ticker, start, end in table.itertuples(index=False):
        inside = (dates >= start) & ((dates <= end) if pd.notna(end) else True)
        mask[:, column[ticker]] |= np.asarray(inside)
    return mask
