"""The backtest figure (issue 24): the rolling Sharpe ratio and its panel, the weights heatmap's
colour scale with short positions, the walk-forward's refit lines, and ``NotebookFigure`` outside
a kernel. That a notebook shows each figure exactly once is checked in a real kernel, by
tests/test_course.py (``test_run_lesson_shows_each_figure_once``)."""

from __future__ import annotations

import dataclasses

import empyrical
import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.figure import Figure

from finance.backtest import BacktestResult, backtest
from finance.walk_forward import WalkForwardResult
from finance.widgets import METRIC_FORMATS, NotebookFigure, format_metric, styled_metrics


def value_series(T: int = 120, seed: int = 0, start: str = "2019-01-02", freq: str = "B") -> pd.Series:
    rng = np.random.default_rng(seed)
    dates = pd.date_range(start, periods=T, freq=freq, name="date")
    return pd.Series(1e6 * np.exp(np.cumsum(rng.normal(5e-4, 0.01, T))), index=dates, name="strategy")


def a_backtest(T: int = 90, S: int = 4) -> BacktestResult:
    rng = np.random.default_rng(1)
    dates = pd.bdate_range("2019-01-02", periods=T, name="date")
    close = pd.DataFrame(np.geomspace(5, 500, S) * np.exp(np.cumsum(rng.normal(2e-4, 0.02, (T, S)), axis=0)),
                         index=dates, columns=[f"S{i}" for i in range(S)])
    return backtest(lambda obs: torch.full((1, S), 0.2), close, benchmark=close.mean(axis=1), name="steady")


# ---------------------------------------------------------------------------- rolling Sharpe
def test_rolling_sharpe_is_the_annualised_sharpe_of_each_window():
    result = BacktestResult("strategy", value_series())
    assert result.bars_per_year == 252
    rs = result.rolling_sharpe(20)
    r = result.returns()
    assert rs.index.equals(r.index) and rs.name == "strategy"
    assert rs.iloc[:19].isna().all() and rs.iloc[19:].notna().all()
    for end in (20, 57, len(r)):  # the window's last return is r[end - 1]
        window = r.iloc[end - 20:end]
        by_hand = window.mean() / window.std(ddof=1) * np.sqrt(252)
        assert rs.iloc[end - 1] == pytest.approx(by_hand, rel=1e-9)
        assert rs.iloc[end - 1] == pytest.approx(empyrical.sharpe_ratio(window, annualization=252), rel=1e-9)
    # the whole series as one window is the Sharpe ratio of the whole series
    assert result.rolling_sharpe(len(r)).iloc[-1] == pytest.approx(empyrical.sharpe_ratio(r, annualization=252))


def test_rolling_sharpe_uses_the_results_bars_per_year():
    daily = BacktestResult("d", value_series())
    hourly = BacktestResult("h", value_series(), bars_per_year=1764)  # the same numbers, hourly NYSE bars
    ratio = (hourly.rolling_sharpe(30) / daily.rolling_sharpe(30)).dropna()
    np.testing.assert_allclose(ratio, np.sqrt(1764 / 252), rtol=1e-12)


def test_rolling_sharpe_is_nan_where_the_account_does_not_move_and_checks_its_window():
    value = value_series(60)
    value.iloc[10:40] = value.iloc[10]  # all in cash for 30 bars: no risk, no Sharpe
    rs = BacktestResult("cash", value).rolling_sharpe(10)
    assert rs.iloc[19:39].isna().all()  # windows wholly inside the flat stretch
    assert rs.iloc[9:19].notna().all() and rs.iloc[48:].notna().all()
    assert np.isfinite(rs.dropna()).all()
    for bad in (1, 0, 2.5, True, "63"):
        with pytest.raises(ValueError, match="window must be an int of at least 2 bars"):
            BacktestResult("x", value).rolling_sharpe(bad)


# ---------------------------------------------------------------------------- the figure
def test_plot_has_a_rolling_sharpe_panel_for_the_result_and_each_baseline():
    result = a_backtest()
    fig = result.plot(sharpe_window=21)
    assert isinstance(fig, NotebookFigure) and isinstance(fig, Figure)
    assert len(fig.axes) == 4  # equity, drawdown, rolling Sharpe, weights (its colorbar is inset)
    panel = fig.axes[2]
    assert "rolling Sharpe" in panel.get_title() and "21" in panel.get_title()
    curves = [line for line in panel.get_lines() if len(line.get_xdata()) > 2]  # not the zero line
    names = [result, *result.baselines.values()]
    assert [c.get_label() for c in curves] == [r.name for r in names] == ["steady", "equal_weight", "index"]
    for curve, r in zip(curves, names):
        np.testing.assert_allclose(curve.get_ydata(), r.rolling_sharpe(21).to_numpy(), equal_nan=True)
    assert all(not label.get_visible() or not label.get_text() for ax in fig.axes[:3] for label in ax.get_xticklabels())
    plain = BacktestResult("index only", value_series()).plot()  # no positions: three panels
    assert len(plain.axes) == 3 and "rolling Sharpe" in plain.axes[2].get_title()


def test_weights_heatmap_is_centred_on_zero_when_a_position_is_short():
    long_only = a_backtest()
    image = long_only.plot().axes[3].images[0]
    assert image.get_cmap().name == "viridis" and image.get_clim()[0] == 0.0
    positions = long_only.positions.copy()
    positions["S1"] *= -1.0  # a short position
    short = dataclasses.replace(long_only, positions=positions)
    weights = short.weights().to_numpy()
    assert (weights < 0).any()
    axes = short.plot().axes[3]
    low, high = axes.images[0].get_clim()
    assert axes.images[0].get_cmap().name == "RdBu" and low == -high == pytest.approx(-np.abs(weights).max())
    assert "short" in axes.get_title()


def test_walk_forward_plot_marks_every_refit_on_the_three_time_panels():
    base = a_backtest()
    starts = base.account_value.index[[0, 30, 60]]
    walked = WalkForwardResult(**{f.name: getattr(base, f.name) for f in dataclasses.fields(BacktestResult)},
                               windows=pd.DataFrame({"test_start": starts}))
    fig = walked.plot()
    for ax in fig.axes[:3]:
        refits = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
        assert sorted(line.get_xdata()[0] for line in refits) == list(starts[1:])
    assert not [line for line in fig.axes[3].get_lines() if line.get_linestyle() == ":"]


def test_outside_a_kernel_the_figure_is_a_plain_figure(tmp_path):
    import finance.notebook_figure as notebook_figure
    import finance.widgets as widgets

    assert widgets.NotebookFigure is notebook_figure.NotebookFigure  # still importable where it was
    fig = a_backtest().plot()
    assert not notebook_figure._PENDING  # no kernel: nothing waits to be shown
    assert fig._repr_png_()[:8] == b"\x89PNG\r\n\x1a\n"
    fig.savefig(tmp_path / "equity.png", dpi=20)
    assert (tmp_path / "equity.png").read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------------------- the numbers
def test_metric_formats_cover_the_metrics_and_read_as_the_panel_prints_them():
    from finance.backtest import METRICS

    assert set(METRICS) <= set(METRIC_FORMATS)
    assert format_metric("sharpe", 1.23456) == "1.23" and format_metric("cumulative_return", 0.98712) == "98.7%"
    assert format_metric("costs", 0.001234) == "0.12%" and format_metric("costs", float("nan")) == "n/a"
    assert format_metric("something new", 2.0) == "2.000"
    table = pd.DataFrame({"sharpe": [0.5], "costs": [np.nan]}, index=["index"])
    html = styled_metrics(table).to_html()
    assert ">0.50<" in html and ">n/a<" in html
