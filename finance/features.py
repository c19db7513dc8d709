"""Causal features for a price panel: FinRL's technical indicators, the turbulence index, a
z-score scaler fitted on training dates, and a date splitter.

Everything is computed over the whole (dates x tickers) panel at once with pandas rolling/ewm
windows and numpy, never with a Python loop per ticker, and is strictly causal: the value on
day t depends on prices up to and including day t only (``tests/test_features.py`` perturbs
every price after t and checks that nothing up to t moves).

Indicators (FinRL's ``INDICATORS``, with stockstats' definitions as of stockstats 0.6):

==================  ==========================================================================
``macd``            EMA(close, 12) - EMA(close, 26); EMA: ``ewm(span=n, adjust=True)``
``boll_ub/_lb``     SMA(close, 20) +/- 2 x rolling std(close, 20) (ddof=1)
``rsi_n``           100 * SMMA(up, n) / (SMMA(up, n) + SMMA(down, n)), up/down = positive and
                    negative daily close changes; SMMA: ``ewm(alpha=1/n, adjust=True)`` (Wilder)
``cci_n``           (TP - SMA(TP, n)) / (0.015 * mean absolute deviation of TP over n days),
                    TP = (high + low + close) / 3
``dx_n``            100 * abs(+DI - -DI) / (+DI + -DI) with +DI, -DI from SMMA(n) of the
                    directional moves of high and low (Wilder's DMI)
``close_n_sma``     SMA(close, n);  ``close_n_ema``: EMA(close, n)
==================  ==========================================================================

Windows are free (``rsi_14``, ``close_5_sma``); ``boll`` (the middle band) is accepted too.

Close-only panels (``source="sample"``): high and low are taken equal to close. Then TP = close
for ``cci`` and the directional moves are the up and down moves of close, so
``dx_n == abs(2 * rsi_n - 100)`` exactly: keep it or drop it, it adds no information there.

Warm-up rows are filled the way stockstats fills them, so the output has the input's index and
no NaN: moving averages use the days available so far (day 0's SMA is day 0's close), the band
width is 0 on day 0, ``rsi`` starts at 50, ``cci`` is 0 until its first full window. These
early values are estimates from short windows: start training ``warmup_days(indicators)`` rows
(60 for the defaults) after the first loaded date, i.e. load that much extra history.

Deviations from stockstats, all in degenerate cases: where stockstats returns NaN (a
zero true range for ``dx``, a series shorter than the ``cci`` window), we return 0.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence, Union

import numpy as np
import pandas as pd

from finance.data.checks import check_dates, check_int, check_prices

DEFAULT_INDICATORS: tuple[str, ...] = ("macd", "boll_ub", "boll_lb", "rsi_30", "cci_30", "dx_30", "close_30_sma",
                                       "close_60_sma")
"""The indicators ``add_features`` computes unless told otherwise (FinRL's default set, stockstats' names)."""

_MACD_SHORT, _MACD_LONG = 12, 26  # stockstats' default "macd" windows
_BOLL_WINDOW, _BOLL_K = 20, 2.0  # stockstats' BOLL_PERIOD and BOLL_STD_TIMES
_CCI_CONSTANT = 0.015  # Lambert's constant: ~70-80% of CCI values fall in [-100, 100]
_INDICATOR_RE = re.compile(r"^(?:(?P<osc>rsi|cci|dx)(?:_(?P<n>\d+))?|close_(?P<m>\d+)_(?P<avg>sma|ema)"
                           r"|(?P<fixed>macd|boll|boll_ub|boll_lb))$")
_DEFAULT_OSC_WINDOW = 14  # stockstats' default for a bare "rsi", "cci", "dx"
_MEMORY_BUDGET = 2**22  # floats per block (32 MB) for the sliding-window computations

DateRange = Union[tuple, list, None]


# ---------------------------------------------------------------------------- indicators
def _parse(name: str) -> tuple[str, int]:
    """Indicator name -> (kind, window)."""
    match = _INDICATOR_RE.match(name)
    if match is None:
        raise ValueError(f"unknown indicator {name!r}; use macd, boll, boll_ub, boll_lb, rsi_<n>, cci_<n>, "
                         f"dx_<n>, close_<n>_sma, close_<n>_ema (e.g. {', '.join(DEFAULT_INDICATORS)})")
    if match["fixed"] == "macd":
        return "macd", _MACD_LONG
    if match["fixed"]:
        return match["fixed"], _BOLL_WINDOW
    kind = match["osc"] or f"close_{match['avg']}"
    window = int(match["n"] or match["m"] or _DEFAULT_OSC_WINDOW)
    if window < 1:
        raise ValueError(f"indicator {name!r} needs a window >= 1")
    return kind, window


def warmup_days(indicators: Sequence[str] = DEFAULT_INDICATORS) -> int:
    """Rows (bars) before every indicator has a full window (the longest window; 60 for the
    defaults). Windows count bars, so on hourly bars ``rsi_30`` spans 30 hours."""
    return max((_parse(name)[1] for name in indicators), default=0)


def _sma(x: pd.DataFrame, n: int) -> pd.DataFrame:
    return x.rolling(n, min_periods=1).mean()


def _ema(x: pd.DataFrame, n: int) -> pd.DataFrame:
    return x.ewm(span=n, adjust=True, min_periods=1).mean()


def _smma(x: pd.DataFrame, n: int) -> pd.DataFrame:
    """Wilder's smoothed moving average, alpha = 1/n."""
    return x.ewm(alpha=1.0 / n, adjust=True, min_periods=0).mean()


def _diff(x: pd.DataFrame) -> pd.DataFrame:
    """Day-over-day change; 0 on day 0 (stockstats' convention)."""
    return x.diff().fillna(0.0)


def _safe_ratio(num: pd.DataFrame, den: pd.DataFrame, fill: float) -> pd.DataFrame:
    """num / den, ``fill`` where den is 0 or NaN (a flat window)."""
    ok = den.ne(0) & den.notna()
    return (num / den.where(ok, 1.0)).where(ok, fill)


def _rsi(close: pd.DataFrame, n: int) -> pd.DataFrame:
    change = _diff(close)
    up, down = _smma(change.clip(lower=0.0), n), _smma((-change).clip(lower=0.0), n)
    rsi = 100.0 * _safe_ratio(up, up + down, fill=0.5)
    rsi.iloc[0] = 50.0
    return rsi


def _rolling_mad(x: pd.DataFrame, n: int) -> pd.DataFrame:
    """Mean absolute deviation around the window mean, 0 before the first full window.

    pandas has no rolling MAD, and ``rolling.apply`` is a Python call per window, so this
    reads all windows as one strided numpy view and reduces them in blocks of rows.
    """
    values = x.to_numpy(dtype=np.float64)
    out = np.zeros_like(values)
    if len(values) >= n:
        windows = np.lib.stride_tricks.sliding_window_view(values, n, axis=0)  # (T-n+1, N, n)
        block = max(1, _MEMORY_BUDGET // (values.shape[1] * n))
        for s in range(0, len(windows), block):
            w = np.ascontiguousarray(windows[s:s + block])  # see turbulence: reduce contiguous rows only
            out[n - 1 + s:n - 1 + s + len(w)] = np.abs(w - w.mean(axis=-1, keepdims=True)).mean(axis=-1)
    return pd.DataFrame(out, index=x.index, columns=x.columns)


def _cci(high: pd.DataFrame, low: pd.DataFrame, close: pd.DataFrame, n: int) -> pd.DataFrame:
    tp = (high + low + close) / 3.0
    return _safe_ratio(tp - _sma(tp, n), _CCI_CONSTANT * _rolling_mad(tp, n), fill=0.0)


def _dx(high: pd.DataFrame, low: pd.DataFrame, n: int) -> pd.DataFrame:
    # +DM: today's high rise if it beats today's low drop; -DM the reverse (Wilder).
    rise, drop = _diff(high), -_diff(low)
    plus_dm = _smma(rise.where((rise > 0) & (rise > drop), 0.0), n)
    minus_dm = _smma(drop.where((drop > 0) & (drop > rise), 0.0), n)
    # +DI = 100 +DM/ATR and -DI = 100 -DM/ATR: the ATR cancels in |+DI - -DI| / (+DI + -DI).
    return 100.0 * _safe_ratio((plus_dm - minus_dm).abs(), plus_dm + minus_dm, fill=0.0)


def add_features(prices: pd.DataFrame, indicators: Sequence[str] = DEFAULT_INDICATORS) -> pd.DataFrame:
    """Technical indicators for every ticker of a price panel, causal, same index, no NaN.

    Args:
        prices: ``load_prices`` output (``(field, ticker)`` columns with at least ``close``;
            ``high`` and ``low`` are used when present), or a plain dates x tickers frame of
            closes. No NaN: ``load_prices`` fills or drops gaps.
        indicators: names as in FinRL (see the module docstring).

    Returns:
        ``DataFrame`` with the index of ``prices`` and ``MultiIndex`` columns
        ``(feature, ticker)``, features in the order given. Only the indicators: join with
        ``pd.concat([prices, features], axis=1)`` for one frame.
    """
    close, high, low = _ohlc(prices)
    if isinstance(indicators, str):
        indicators = [indicators]
    if len(set(indicators)) != len(indicators) or not indicators:
        raise ValueError(f"expected distinct indicator names, got {list(indicators)}")
    out: dict[str, pd.DataFrame] = {}
    for name in indicators:  # a handful of indicators; each is computed on all tickers at once
        kind, n = _parse(name)
        if kind == "macd":
            out[name] = _ema(close, _MACD_SHORT) - _ema(close, _MACD_LONG)
        elif kind.startswith("boll"):
            middle = _sma(close, n)
            width = _BOLL_K * close.rolling(n, min_periods=1).std().fillna(0.0)  # std of 1 value: 0
            out[name] = {"boll": middle, "boll_ub": middle + width, "boll_lb": middle - width}[kind]
        elif kind == "rsi":
            out[name] = _rsi(close, n)
        elif kind == "cci":
            out[name] = _cci(high, low, close, n)
        elif kind == "dx":
            out[name] = _dx(high, low, n)
        elif kind == "close_sma":
            out[name] = _sma(close, n)
        else:
            out[name] = _ema(close, n)
    return pd.concat(out, axis=1, names=["feature", "ticker"])


def _ohlc(prices: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(close, high, low) as dates x tickers float frames; high = low = close when absent."""
    if not isinstance(prices, pd.DataFrame) or not isinstance(prices.index, pd.DatetimeIndex):
        got = (f"a DataFrame indexed by {type(prices.index).__name__}" if isinstance(prices, pd.DataFrame)
               else type(prices).__name__)
        raise ValueError("expected a DataFrame indexed by dates (load_prices output or dates x tickers closes), "
                         f"got {got}")
    if isinstance(prices.columns, pd.MultiIndex):
        fields = prices.columns.get_level_values(0)
        if "close" not in fields:
            raise ValueError(f"prices need a 'close' field, got fields {sorted(set(fields))}")
        close = prices["close"].astype("float64")
        high = prices["high"].astype("float64") if "high" in fields else close
        low = prices["low"].astype("float64") if "low" in fields else close
    else:
        close = high = low = prices.astype("float64")
    check_dates(prices.index, "prices")
    for name, frame in (("close", close), ("high", high), ("low", low)):
        if frame.isna().to_numpy().any():
            ticker = frame.columns[frame.isna().any().to_numpy()][0]
            raise ValueError(f"NaN in {name} prices of {ticker}; load with load_prices (it fills short gaps and "
                             f"drops tickers with long ones) or fill them first")
        check_prices(frame.to_numpy(), frame.index, frame.columns, f"{name} prices")
    return close, high, low


# ---------------------------------------------------------------------------- turbulence
def turbulence(close: pd.DataFrame, window: int = 252) -> pd.Series:
    """FinRL's turbulence index: the squared Mahalanobis distance of today's returns.

    ``turbulence[t] = (r_t - mu)' pinv(Sigma) (r_t - mu)``, where ``r_t`` are the tickers'
    close-to-close returns on day t, and ``mu``, ``Sigma`` the mean and covariance (ddof=1)
    of the ``window`` daily returns before t (days t-window .. t-1). Day t uses prices up to
    day t only. The first ``window + 1`` days, which lack a full history, are 0, as in FinRL;
    negative round-off is clipped to 0. Unlike FinRL we do not zero the first two positive
    values (its guard against a start-up outlier).

    Args:
        close: dates x tickers closes (``prices["close"]``), no NaN.
        window: bars (rows) of history for the mean and covariance (252: one trading year of
            daily bars; for hourly NYSE bars a year is 1764, ``finance.bars_per_year("1h")``).

    Returns:
        ``Series`` named ``"turbulence"`` with the index of ``close``.
    """
    if isinstance(close, pd.DataFrame) and isinstance(close.columns, pd.MultiIndex):
        raise ValueError("turbulence expects closes (dates x tickers); pass prices['close']")
    window = check_int(window, "window", low=2)  # 2 days at least to estimate a covariance
    values = np.asarray(close, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"turbulence expects a dates x tickers frame of closes, got shape {values.shape}; pass "
                         f"prices['close']")
    dates = close.index if isinstance(close, pd.DataFrame) else pd.RangeIndex(len(values), name="row")
    tickers = list(close.columns) if isinstance(close, pd.DataFrame) else list(range(values.shape[1]))
    check_dates(dates, "turbulence's closes")
    check_prices(values, dates, tickers, "turbulence's closes")  # a 0 or inf price: inf returns, no covariance
    returns = values[1:] / values[:-1] - 1.0  # returns[i] is the return of day i+1,  (T-1, N)
    out = np.zeros(len(values))
    n_days = len(returns) - window  # days t = window+1 .. T-1 have a full history
    if n_days > 0:
        histories = np.lib.stride_tricks.sliding_window_view(returns, window, axis=0)  # (T-window, N, window)
        block = max(1, _MEMORY_BUDGET // (returns.shape[1] * window))
        for s in range(0, n_days, block):
            # Row k: returns of days k+1 .. k+window, the history of day t = k + window + 1. A
            # contiguous copy: numpy's mean over the window axis of the overlapping strided view
            # is not computed row by row (on the sample, changing prices after day 300 moved the
            # mean of an earlier row by an ulp), which broke exact causality; tests/test_features.py
            # checks it bit for bit.
            hist = np.ascontiguousarray(histories[s:min(s + block, n_days)])  # (B, N, window)
            b = len(hist)
            mean = hist.mean(axis=-1)  # (B, N)
            centred = hist - mean[..., None]
            cov = centred @ centred.transpose(0, 2, 1) / (window - 1)  # (B, N, N)
            today = returns[s + window:s + window + b] - mean  # (B, N)
            # pinv as in FinRL (a singular covariance is possible: a stale price, a 1:1 copy);
            # hermitian=True uses the eigendecomposition: ~2x faster than the SVD, equal to ~1e-14.
            inverse = np.linalg.pinv(cov, hermitian=True)
            out[s + window + 1:s + window + 1 + b] = np.einsum("bi,bij,bj->b", today, inverse, today)
    return pd.Series(np.maximum(out, 0.0), index=getattr(close, "index", None), name="turbulence")


# ---------------------------------------------------------------------------- scaling
class FeatureScaler:
    """Z-score every column (feature, ticker) with statistics of the training dates only.

    ``fit(train_features)`` stores each column's mean and std (ddof=0); ``transform(frame)``
    returns ``(frame - mean) / std`` clipped to ``[-clip, clip]``. A constant column (std 0)
    is only centred. Price-level features (macd, bands, moving averages) drift with the price,
    so later years can sit far outside the training range: the clip keeps them bounded.
    """

    def __init__(self, clip: float = 10.0) -> None:
        if not clip > 0:
            raise ValueError(f"clip must be > 0, got {clip}")
        self.clip = float(clip)
        self.mean_: pd.Series | None = None
        self.std_: pd.Series | None = None

    def fit(self, train_features: pd.DataFrame) -> "FeatureScaler":
        if train_features.empty:
            raise ValueError("cannot fit FeatureScaler on an empty frame; pass the training split")
        values = train_features.astype("float64")
        if values.isna().all().any():
            column = values.columns[values.isna().all().to_numpy()][0]
            raise ValueError(f"column {column} is all NaN in the training frame; drop it before fitting")
        self.mean_ = values.mean()
        std = values.std(ddof=0)
        self.std_ = std.where(std > 0, 1.0)
        return self

    def transform(self, frame: pd.DataFrame) -> pd.DataFrame:
        if self.mean_ is None or self.std_ is None:
            raise ValueError("FeatureScaler is not fitted; call fit(train_features) first")
        missing = self.mean_.index.difference(frame.columns)
        extra = frame.columns.difference(self.mean_.index)
        if len(missing) or len(extra):
            raise ValueError(f"columns differ from the fitted ones: missing {list(missing)[:5]}, unexpected "
                             f"{list(extra)[:5]}; transform frames built like the training frame")
        mean, std = self.mean_.reindex(frame.columns), self.std_.reindex(frame.columns)
        return ((frame.astype("float64") - mean) / std).clip(-self.clip, self.clip)

    def fit_transform(self, train_features: pd.DataFrame) -> pd.DataFrame:
        return self.fit(train_features).transform(train_features)


# ---------------------------------------------------------------------------- splitting
Frame = Union[pd.DataFrame, pd.Series]


def _bounds(name: str, span: DateRange) -> tuple[pd.Timestamp, pd.Timestamp]:
    """(start, end) -> inclusive Timestamps; None is open-ended."""
    if not isinstance(span, (tuple, list)) or len(span) != 2:
        raise ValueError(f"{name} must be a (start, end) pair of dates, got {span!r}")
    # Whole calendar days: the split owns every bar of its first and last day.
    start = pd.Timestamp(span[0]).normalize() if span[0] is not None else pd.Timestamp.min
    end = pd.Timestamp(span[1]).normalize() if span[1] is not None else pd.Timestamp.max
    if start > end:
        raise ValueError(f"{name} range is reversed: {span[0]} is after {span[1]}; swap them")
    return start, end


def _slice(frame: Frame, start: pd.Timestamp, end: pd.Timestamp) -> Frame:
    if not isinstance(frame.index, pd.DatetimeIndex):
        raise ValueError(f"split_by_date needs a DatetimeIndex, got {type(frame.index).__name__}")
    index = frame.index
    # `end` is a calendar day, inclusive whatever the bar size (intraday bars of that day too).
    keep = index >= start
    if end != pd.Timestamp.max:
        keep &= index < end + pd.Timedelta(days=1)
    return frame.loc[keep]


def split_by_date(data: Frame | Mapping[str, Frame], train: DateRange = None, valid: DateRange = None,
                  test: DateRange = None) -> dict[str, Frame] | dict[str, dict[str, Frame]]:
    """Cut frames into train/valid/test by date; both ends of each range are inclusive.

    Args:
        data: a DataFrame or Series with a DatetimeIndex, or a dict of them (for instance
            ``{"prices": prices, "features": features, "turbulence": turb}``).
        train, valid, test: ``(start, end)`` pairs of dates, ``None`` inside a pair for an
            open end; leave a split out with ``None``.

    Returns:
        ``{"train": frame, ...}`` for the splits given; for a dict input,
        ``{"train": {"prices": ..., "features": ...}, ...}``.

    Raises:
        ValueError: no split given, a reversed range, two ranges sharing a day, or a split
            with no rows (naming the data's date range).
    """
    spans = {name: _bounds(name, span) for name, span in (("train", train), ("valid", valid), ("test", test))
             if span is not None}
    if not spans:
        raise ValueError("give at least one of train=, valid=, test= as a (start, end) pair")
    names = list(spans)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            (a0, a1), (b0, b1) = spans[a], spans[b]
            if a0 <= b1 and b0 <= a1:
                raise ValueError(f"{a} {_show(spans[a])} and {b} {_show(spans[b])} overlap; a date may be in one "
                                 f"split only, or the evaluation sees training data")
    frames = dict(data) if isinstance(data, Mapping) else {"": data}
    if not frames:
        raise ValueError("split_by_date got an empty dict; pass frames to split")
    out: dict[str, dict[str, Frame]] = {name: {} for name in spans}
    for key, frame in frames.items():
        for name, (start, end) in spans.items():
            part = _slice(frame, start, end)
            if part.empty:
                what = f" of {key!r}" if key else ""
                have = (f"{frame.index.min().date()} .. {frame.index.max().date()}" if len(frame.index) else "no dates")
                raise ValueError(f"{name} split {_show(spans[name])}{what} is empty; the data covers {have}")
            out[name][key] = part
    if not isinstance(data, Mapping):
        return {name: parts[""] for name, parts in out.items()}
    return out


def _show(span: tuple[pd.Timestamp, pd.Timestamp]) -> str:
    start, end = span
    return (f"({'open' if start == pd.Timestamp.min else start.date()} .. "
            f"{'open' if end == pd.Timestamp.max else end.date()})")
