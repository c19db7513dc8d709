"""Rebuild the bundled offline price sample in this folder.

Not part of the library: nothing imports this file, and its two sources (``skfolio`` and
``bokeh-sampledata``) are not Podracer dependencies. Run it in a throwaway environment:

    python3 -m venv /tmp/dataenv
    /tmp/dataenv/bin/pip install skfolio bokeh-sampledata pandas pyarrow
    /tmp/dataenv/bin/python finance/data/build_sample.py

It writes three parquet files next to itself (layouts in README.md):

- ``sp500_close.parquet``: skfolio's 20 S&P 500 stocks, adjusted daily close, 1990-2022
  ("wide": a ``date`` column, then one column per ticker).
- ``sp500_index.parquet``: skfolio's S&P 500 index close over the same dates (wide, one column
  named ``S&P 500``).
- ``ohlcv_2000_2013.parquet``: bokeh-sampledata's daily OHLCV for AAPL, GOOG, IBM, MSFT
  ("long": ``date, ticker, open, high, low, close, volume``), adjusted for splits and dividends
  the way ``yfinance.download(auto_adjust=True)`` is (see ``adjust_ohlcv``).

Both sources ship their data inside the installed package; neither downloads anything.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from bokeh_sampledata.stocks import data as bokeh_stocks
from skfolio.datasets import load_sp500_dataset, load_sp500_index

HERE = Path(__file__).resolve().parent
OHLCV_TICKERS = ["AAPL", "GOOG", "IBM", "MSFT"]  # bokeh's FB (2012-2013, 196 days) is left out
PARQUET = dict(index=False, compression="zstd", compression_level=19)


def adjust_ohlcv(raw: pd.DataFrame) -> pd.DataFrame:
    """Scale unadjusted OHLC by ``adj_close / close`` and volume by its inverse.

    Quandl WIKI (bokeh's source) keeps raw prices plus an adjusted close; a raw series has
    fake crashes at every split (AAPL halves in 2005). Scaling open/high/low/close by the same
    factor is what ``yfinance`` does for ``auto_adjust=True``; dividing volume by it (Quandl's
    own ``adj_volume`` rule) keeps the traded value, price x volume, unchanged.
    """
    factor = raw["adj_close"] / raw["close"]
    out = raw[["date", "ticker"]].copy()
    for col in ("open", "high", "low", "close"):
        # 4 decimals: rounding is monotonic, so low <= open, close <= high still holds.
        out[col] = (raw[col] * factor).round(4)
    out["volume"] = (raw["volume"] / factor).round().astype("int64")
    return out


def main() -> None:
    close = load_sp500_dataset()  # adjusted close, 3 decimals as shipped
    close.index = pd.DatetimeIndex(close.index, name="date").as_unit("ns")
    close.reset_index().to_parquet(HERE / "sp500_close.parquet", **PARQUET)

    index = load_sp500_index().rename(columns={"SP500": "S&P 500"})
    index.index = pd.DatetimeIndex(index.index, name="date").as_unit("ns")
    index.reset_index().to_parquet(HERE / "sp500_index.parquet", **PARQUET)

    raw = bokeh_stocks[bokeh_stocks["ticker"].isin(OHLCV_TICKERS)]
    ohlcv = adjust_ohlcv(raw).sort_values(["ticker", "date"])
    ohlcv["date"] = ohlcv["date"].astype("datetime64[ns]")
    ohlcv["ticker"] = ohlcv["ticker"].astype("category")
    ohlcv.to_parquet(HERE / "ohlcv_2000_2013.parquet", **PARQUET)

    for path in sorted(HERE.glob("*.parquet")):
        frame = pd.read_parquet(path)
        print(f"{path.name}: {path.stat().st_size / 1024:.0f} KiB, {frame.shape}, "
              f"{frame['date'].min().date()} .. {frame['date'].max().date()}")


if __name__ == "__main__":
    main()
