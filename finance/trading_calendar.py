"""Bars per year: annualise by the bar frequency and the trading calendar, not a fixed 252.

A Sharpe ratio or a volatility of per-bar returns is annualised with ``sqrt(bars_per_year)``;
with hourly bars and 252 the volatility comes out sqrt(7) ~ 2.6x too small. ``bars_per_year``
gives the factor from a yfinance interval (``"1h"``) or infers it from the bars themselves.

A calendar here is the few numbers that count bars. Two are built in, with round numbers:

==========  =========  ===================  ====================================================
calendar    days/year  regular session      hourly bars per day (Yahoo labels them from the open)
==========  =========  ===================  ====================================================
``XNYS``    252        09:30-16:00 (390 m)  7: 09:30, 10:30, ..., 15:30 (the last is 30 minutes)
``24/7``    365        00:00-24:00          24 (crypto)
==========  =========  ===================  ====================================================

Any other name is looked up in ``exchange_calendars`` (``"XLON"``, ``"XTKS"``, ``"CMES"``,
``"24/5"``, aliases such as ``"LSE"``; ``exchange_calendars.get_calendar_names()`` lists them):
its sessions per year averaged over 2015-2024 with the holidays, its trading minutes a day
(lunch breaks taken out) and its weekdays (``get_calendar``).

The rule for a ``DatetimeIndex`` (``bars_per_year(prices.index)``):

1. the calendar, unless given: ``24/7`` if bars fall on both Saturdays and Sundays; an exchange
   week of 5 days (``XNYS``'s numbers) if the sample spans a weekend day without a bar (a futures
   market that opens on Sunday evening has no Saturday bars: it counts as 5 days). A sample that
   spans no weekend cannot tell, and a ``CalendarWarning`` says what was assumed: ``24/7`` when
   the bars cover the whole day (hourly crypto from Tuesday to Thursday: 8,760, not 6,048),
   ``XNYS`` for daily bars (five weekdays of daily crypto are 252 unless you pass ``"24/7"``);
   intraday bars of a shorter session are an exchange's, without a warning;
2. intraday (some calendar day has more than one bar): bars per day are *counted from the data*,
   the most common count of bars in a day (ties: the larger), so half days and a partial first or
   last day do not change it, and extended-hours data counts its extra bars;
   ``bars_per_year = days_per_year x bars per day`` (NYSE: 1h -> 7 x 252 = 1764, 5m -> 78 x 252
   = 19656; 24/7: 1h -> 24 x 365 = 8760);
3. otherwise from the median spacing between bars in calendar days: up to 4 days is daily
   (``days_per_year``: 252, or 365 for 24/7), longer is ``round(365.25 / spacing)`` (weekly 52,
   monthly 12, quarterly 4).

Timestamps are read as given: ``load_prices`` keeps the exchange's wall-clock time (tz-naive), and
a bar's calendar day is its day there. An index without dates (a ``RangeIndex``) cannot be
inferred: ``resolve_bars_per_year`` treats it as daily bars (252), as every backtest did before
this module; a single date is treated the same way, with a ``CalendarWarning``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import re
import warnings
from typing import Any, Union

import numpy as np
import pandas as pd

DAILY_BARS_PER_YEAR = 252  # NYSE trading days in a year: the default for data without dates
EXCHANGE_YEARS = ("2015-01-01", "2024-12-31")  # exchange_calendars' sessions are averaged over these ten years
ROUND_THE_CLOCK_HOURS = 22.0  # intraday bars covering this much of a day: a market without a session (crypto, FX)


class CalendarWarning(UserWarning):
    """The bars do not say which calendar they follow, or are too few to annualise; the message
    says what was assumed and what to pass instead."""


@dataclasses.dataclass(frozen=True)
class TradingCalendar:
    """The numbers that count a market's bars (no holidays: see the module docstring)."""

    name: str
    days_per_year: int  # trading days in a year: 252 (NYSE), 365 (24/7)
    open: str  # regular session open, exchange wall-clock "HH:MM"
    session_minutes: int  # regular session length: 390 (NYSE 09:30-16:00), 1440 (24/7)
    weekdays: tuple[int, ...]  # days with a session, Monday = 0


CALENDARS: dict[str, TradingCalendar] = {
    "XNYS": TradingCalendar("XNYS", 252, "09:30", 390, (0, 1, 2, 3, 4)),
    "24/7": TradingCalendar("24/7", 365, "00:00", 1440, (0, 1, 2, 3, 4, 5, 6)),
}

_INTERVAL_RE = re.compile(r"^(?P<n>\d+)(?P<unit>m|h|d|wk|mo)$")
_DAILY_MAX_GAP = 4.0  # calendar days: a long weekend plus a holiday is still daily data

Frequency = Union[str, pd.Index, pd.Series, pd.DataFrame]


def get_calendar(calendar: str | TradingCalendar) -> TradingCalendar:
    """A ``TradingCalendar`` by name, or the one given.

    ``"XNYS"`` and ``"24/7"`` are built in (``CALENDARS``); any other name (an ISO MIC such as
    ``"XLON"``, ``"24/5"``, an alias such as ``"LSE"``) comes from ``exchange_calendars``: its
    sessions per year averaged over ``EXCHANGE_YEARS`` (holidays included), the median minutes of
    trading in a session (breaks taken out) and its weekmask.
    """
    if isinstance(calendar, TradingCalendar):
        return calendar
    if not isinstance(calendar, str):
        raise ValueError(f"calendar must be a name such as 'XNYS', '24/7' or 'XLON', or a TradingCalendar, got "
                         f"{calendar!r}")
    if calendar in CALENDARS:
        return CALENDARS[calendar]
    return _exchange_calendar(calendar)


@functools.lru_cache(maxsize=None)
def _exchange_calendar(name: str) -> TradingCalendar:
    import exchange_calendars as xcals  # 1 s to import: only when an exchange is named

    try:
        canonical = xcals.resolve_alias(name)
        if canonical in CALENDARS:  # "NYSE" -> the built-in XNYS, the same numbers as "XNYS"
            return CALENDARS[canonical]
        with warnings.catch_warnings():  # exchange_calendars' own pandas deprecations, not the caller's business
            warnings.simplefilter("ignore", DeprecationWarning)
            cal = xcals.get_calendar(canonical, start=EXCHANGE_YEARS[0], end=EXCHANGE_YEARS[1])
            minutes = (cal.closes - cal.opens).dt.total_seconds() / 60.0
            if cal.has_break:
                minutes -= ((cal.break_ends - cal.break_starts).dt.total_seconds() / 60.0).fillna(0.0)
    except xcals.errors.InvalidCalendarName:
        raise ValueError(f"unknown calendar {name!r}; use one of {list(CALENDARS)}, an exchange_calendars name "
                         f"(exchange_calendars.get_calendar_names(), e.g. 'XLON', 'XTKS', '24/5') or a "
                         f"TradingCalendar") from None
    years = (pd.Timestamp(EXCHANGE_YEARS[1]) - pd.Timestamp(EXCHANGE_YEARS[0])).days / 365.25
    weekdays = tuple(i for i, day in enumerate(cal.weekmask) if day == "1")
    return TradingCalendar(canonical, round(len(cal.sessions) / years), cal.open_times[-1][1].strftime("%H:%M"),
                           int(minutes.median()), weekdays)


def parse_interval(interval: str) -> tuple[int, str]:
    """A yfinance interval -> (count, unit): ``"1h"`` -> (60, "m"), ``"5m"`` -> (5, "m"), ``"1wk"`` ->
    (1, "wk"). Minutes and hours both come back in minutes."""
    match = _INTERVAL_RE.match(interval) if isinstance(interval, str) else None
    if match is None or int(match["n"]) < 1:
        raise ValueError(f"unknown interval {interval!r}; use a yfinance interval such as '1d', '1h', '60m', "
                         f"'5m', '1wk', '1mo'")
    n, unit = int(match["n"]), match["unit"]
    return (n * 60, "m") if unit == "h" else (n, unit)


def bars_per_session(minutes: int, calendar: str | TradingCalendar = "XNYS") -> int:
    """Bars of ``minutes`` in one regular session, labelled from the open as Yahoo does: the last
    bar may be short (NYSE: 60 -> 7, 90 -> 5, 5 -> 78)."""
    return math.ceil(get_calendar(calendar).session_minutes / minutes)


def bars_per_year(index_or_interval: Frequency, calendar: str | TradingCalendar | None = None) -> int:
    """Bars in a trading year, for annualising per-bar returns.

    Args:
        index_or_interval: a yfinance interval (``"1d"``, ``"1h"``, ``"60m"``, ``"5m"``, ``"1wk"``,
            ``"1mo"``), or bars to infer it from: a ``DatetimeIndex``, or a Series/DataFrame
            indexed by one (the rule is in the module docstring).
        calendar: ``"XNYS"``, ``"24/7"``, an ``exchange_calendars`` name (``"XLON"``, ``"24/5"``)
            or a ``TradingCalendar``; None infers it from an index (bars on weekends: 24/7; a
            ``CalendarWarning`` when the bars cannot tell) and means ``"XNYS"`` for an interval.

    Returns:
        252 for daily NYSE bars, 1764 hourly, 19656 five-minute, 52 weekly, 12 monthly; 365 for
        daily 24/7 bars.
    """
    if isinstance(index_or_interval, str):
        return _from_interval(index_or_interval, get_calendar(calendar or "XNYS"))
    index = index_or_interval.index if isinstance(index_or_interval, (pd.Series, pd.DataFrame)) else index_or_interval
    if not isinstance(index, pd.DatetimeIndex):
        raise ValueError(f"cannot infer bars per year from a {type(index).__name__} without dates; pass a "
                         f"DatetimeIndex, a yfinance interval such as '1h', or bars_per_year explicitly (252 for "
                         f"daily bars)")
    return _from_index(index, calendar)


def resolve_bars_per_year(value: Any, index: pd.Index) -> int | float:
    """``value`` checked (a positive number) if given; a calendar name (``"24/7"``, ``"XLON"``)
    infers it from ``index`` on that calendar; None infers it from ``index`` with ``bars_per_year``,
    or gives 252 (daily bars) for an index without dates, and for a single date with a
    ``CalendarWarning``."""
    if isinstance(value, (str, TradingCalendar)):
        try:
            cal = get_calendar(value)
        except ValueError as error:
            raise ValueError(f"bars_per_year must be a positive number (252 for daily bars), a calendar name or None "
                             f"to infer it from the dates, got {value!r}: {error}") from None
        if not isinstance(index, pd.DatetimeIndex) or index.dropna().nunique() < 2:
            return _from_interval("1d", cal)  # no bars to count: daily bars on that calendar
        return bars_per_year(index, cal)
    if value is not None:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not value > 0 \
                or not np.isfinite(value):
            raise ValueError(f"bars_per_year must be a positive number (252 for daily bars), a calendar name "
                             f"('24/7', 'XNYS') or None to infer it from the dates, got {value!r}")
        return int(value) if isinstance(value, numbers.Integral) else float(value)
    if not isinstance(index, pd.DatetimeIndex):
        return DAILY_BARS_PER_YEAR
    if index.dropna().nunique() < 2:
        warnings.warn(f"cannot infer bars per year from {index.dropna().nunique()} date(s); annualising as daily "
                      f"bars ({DAILY_BARS_PER_YEAR} a year). Pass bars_per_year explicitly, or more than one bar",
                      CalendarWarning, stacklevel=3)
        return DAILY_BARS_PER_YEAR
    return bars_per_year(index)


def session_index(start: Any, end: Any, interval: str = "1h",
                  calendar: str | TradingCalendar = "XNYS") -> pd.DatetimeIndex:
    """Bar timestamps of the regular sessions from ``start`` to ``end`` (calendar days, inclusive),
    as Yahoo labels them: each bar by its start in exchange wall-clock time (NYSE hourly: 09:30 ..
    15:30), daily bars at midnight. Weekends are skipped (XNYS), holidays are not (no list)."""
    cal = get_calendar(calendar)
    minutes, unit = parse_interval(interval)
    days = pd.date_range(pd.Timestamp(start).normalize(), pd.Timestamp(end).normalize(), freq="D")
    days = days[days.day_of_week.isin(cal.weekdays)]
    if unit == "d" and minutes == 1:
        return pd.DatetimeIndex(days, name="date").as_unit("ns")
    if unit != "m":
        raise ValueError(f"session_index makes daily or intraday bars, got interval {interval!r}; resample daily "
                         f"bars for weekly or monthly ones")
    hours, mins = map(int, cal.open.split(":"))
    offsets = pd.to_timedelta(hours * 60 + mins + minutes * np.arange(bars_per_session(minutes, cal)), unit="min")
    stamps = (days.to_numpy()[:, None] + offsets.to_numpy()[None, :]).ravel()
    return pd.DatetimeIndex(stamps, name="date").as_unit("ns")


# ---------------------------------------------------------------------------- the rules
def _from_interval(interval: str, cal: TradingCalendar) -> int:
    n, unit = parse_interval(interval)
    if unit == "m":
        return cal.days_per_year * bars_per_session(n, cal)
    per_year = {"d": cal.days_per_year, "wk": 52, "mo": 12}[unit]
    return max(1, round(per_year / n))  # "5d" -> 50, "3mo" -> 4


def _from_index(index: pd.DatetimeIndex, calendar: str | TradingCalendar | None) -> int:
    stamps = index.dropna().unique().sort_values()
    if len(stamps) < 2:
        raise ValueError(f"cannot infer bars per year from {len(stamps)} timestamp(s); need at least 2, or pass "
                         f"bars_per_year explicitly (252 for daily bars)")
    days = stamps.normalize()
    per_day = days.value_counts()  # bars on each calendar day
    intraday = per_day.max() > 1
    usual = 1
    if intraday:  # count the usual session from the data
        days_with = per_day.value_counts()  # bars-in-a-day -> how many days have that many
        usual = int(days_with[days_with == days_with.max()].index.max())
    cal = get_calendar(calendar if calendar is not None else _infer_calendar(stamps, days, usual))
    if intraday:
        return cal.days_per_year * usual
    gap = float(np.median(np.diff(days.to_numpy()) / np.timedelta64(1, "D")))  # median spacing in days
    if gap <= _DAILY_MAX_GAP:
        return cal.days_per_year
    return max(1, round(365.25 / gap))


def _infer_calendar(stamps: pd.DatetimeIndex, days: pd.DatetimeIndex, usual: int) -> str:
    """``"24/7"`` or ``"XNYS"`` (a 5-day exchange week) from where the bars fall; a warning when
    the sample spans no weekend day without bars, so the week cannot be told."""
    weekend = {5, 6}
    with_bars = set(days.day_of_week) & weekend
    if with_bars == weekend:  # Saturday and Sunday bars: a market open every day
        return "24/7"
    spanned = set(pd.date_range(days[0], days[-1], freq="D").day_of_week) & weekend
    if spanned - with_bars:  # a weekend day the sample covers has no bar: a 5-day week
        return "XNYS"
    if _is_daily_spacing(days) and usual == 1:
        warnings.warn(f"daily bars from {days[0].date()} to {days[-1].date()} span no weekend, so they cannot show "
                      f"whether the market trades 5 days a week ({CALENDARS['XNYS'].days_per_year} bars a year, "
                      f"assumed) or 7 (crypto: {CALENDARS['24/7'].days_per_year}); pass calendar='24/7' (or "
                      f"bars_per_year='24/7' to a backtest) for a market open every day", CalendarWarning,
                      stacklevel=4)
        return "XNYS"
    if usual == 1:
        return "XNYS"  # weekly or monthly bars: the calendar does not count
    if with_bars or _covered_hours(stamps, days, usual) >= ROUND_THE_CLOCK_HOURS:
        warnings.warn(f"intraday bars from {days[0].date()} to {days[-1].date()} trade around the clock but span no "
                      f"weekend without bars, so they cannot show whether the market trades 7 days a week (crypto, "
                      f"assumed: {CALENDARS['24/7'].days_per_year} days a year) or 5 (FX, futures); pass "
                      f"calendar='24/5' or 'XNYS' for a 5-day week", CalendarWarning, stacklevel=4)
        return "24/7"
    return "XNYS"  # a session shorter than the day: an exchange, open on weekdays


def _is_daily_spacing(days: pd.DatetimeIndex) -> bool:
    return float(np.median(np.diff(days.to_numpy()) / np.timedelta64(1, "D"))) <= _DAILY_MAX_GAP


def _covered_hours(stamps: pd.DatetimeIndex, days: pd.DatetimeIndex, usual: int) -> float:
    """Hours a usual day's bars cover: ``usual`` x the median spacing of bars within one day."""
    same_day = days[1:] == days[:-1]
    spacing = np.diff(stamps.to_numpy())[same_day] / np.timedelta64(1, "h")
    return usual * float(np.median(spacing))
