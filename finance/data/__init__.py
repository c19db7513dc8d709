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
  ``dividends=True`` downloads split-only prices and a ``"dividends"`` field (cash per share on
  each ex-date) instead, for the env's ``dividends=``; ``attrs["adjustment"]`` says which.
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

Time stamps: intraday bars keep the exchange's wall-clock time, tz-naive (09:30 is the open all
year; ``finance.data.yahoo`` says how Yahoo's stamps are converted). Daily bars are dated at
midnight. ``finance.trading_calendar.bars_per_year`` reads these stamps to annualise backtest
metrics.

Cleaning is the same for every source (``finance.data.clean`` lists the steps): failed tickers
and tickers with gaps longer than ``ffill_limit`` are dropped with a ``DataWarning`` naming them,
short gaps are forward-filled as no-trade bars, and non-positive prices, negative volume or fewer
than ``min_days`` dates raise ``DataError``. Turn the warnings into errors with
``warnings.simplefilter("error", DataWarning)``.

Modules, one job each:

- ``checks``: the panel's ``FIELDS``, the errors, and the checks used across finance
  (``check_dates``, ``check_prices``, ``check_int``, ``check_number``);
- ``load``: ``load_prices`` and ``load_benchmark`` (request checks, source dispatch, selection);
- ``files``: the bundled samples and user files, read into the panel layout;
- ``yahoo``: the yfinance download and its parquet cache;
- ``clean``: the cleaning steps;
- ``synthetic``: ``synthetic_prices``.

This folder also holds the bundled files (``*.parquet``); ``README.md`` here documents them,
their sources and licences, and ``build_sample.py`` rebuilds them.
"""

from finance.data.checks import (ADJUSTMENT, DIVIDENDS, FIELDS, PRICE_FIELDS, DataError, DataUnavailableError,
                                 DataWarning, check_dates, check_int, check_number, check_prices)
from finance.data.files import BENCHMARK_NAME, SAMPLE_OHLCV_TICKERS, SAMPLE_TICKERS
from finance.data.load import DateLike, load_benchmark, load_prices
from finance.data.synthetic import synthetic_prices
from finance.data.yahoo import BENCHMARK_YAHOO_TICKER, YF_INTERVALS, YF_INTRADAY_DAYS, _cache_path

__all__ = [
    "FIELDS", "PRICE_FIELDS", "DIVIDENDS", "ADJUSTMENT",
    "SAMPLE_TICKERS", "SAMPLE_OHLCV_TICKERS", "BENCHMARK_NAME", "BENCHMARK_YAHOO_TICKER",
    "YF_INTERVALS", "YF_INTRADAY_DAYS", "DateLike",
    "DataError", "DataUnavailableError", "DataWarning",
    "check_dates", "check_prices", "check_int", "check_number",
    "load_prices", "load_benchmark", "synthetic_prices",
]
