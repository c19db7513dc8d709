"""The interactive backtest's logic (finance.interactive): each control changes the result the way
it should, bad settings are refused with the fix, and the panel redraws when a control moves."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
import torch

import finance
import podracer
from finance.interactive import BASELINE_POLICIES, Controls, interactive_backtest, metrics_table, run_backtest


@pytest.fixture(scope="module")
def market():
    return finance.prepare_market()


def churn(obs: torch.Tensor) -> torch.Tensor:
    """Buys on even days and sells on odd ones, deterministically: a policy that pays costs."""
    sign = 1.0 if int(obs[0, :].abs().sum() * 1e3) % 2 == 0 else -1.0
    return torch.full((obs.shape[0], 20), sign)


def cash_only(obs: torch.Tensor) -> torch.Tensor:
    return torch.full((obs.shape[0], 20), -1.0)


POLICIES = {"churn": churn, "cash only": cash_only}


def final(result) -> float:
    return float(result.account_value.iloc[-1])


def test_policy_choice_changes_the_result(market):
    results = {name: run_backtest(market, POLICIES, Controls(name)) for name in [*POLICIES, *BASELINE_POLICIES]}
    assert final(results["cash only"]) == pytest.approx(1e6)  # never buys: the cash is all there is
    sharpes = {name: r.metrics()["sharpe"] for name, r in results.items() if name != "cash only"}
    assert len({round(s, 6) for s in sharpes.values()}) == len(sharpes), sharpes
    table = metrics_table(results["churn"])
    assert list(table.index[:1]) == ["churn"] and {"equal_weight", "min_variance", "index"} <= set(table.index)


def test_index_choice_shows_the_benchmark_untraded(market):
    window = dict(start="2020-01-01", end="2021-06-30")
    index = run_backtest(market, POLICIES, Controls("index", cost_pct=0.005, **window))
    held = run_backtest(market, POLICIES, Controls("buy_and_hold", cost_pct=0.005, **window))
    assert index.name == "index" and index.account_value.equals(held.baselines["index"].account_value)
    bench = market.benchmark["test"].loc[index.account_value.index]
    pd.testing.assert_series_equal(index.account_value / 1e6, bench / bench.iloc[0], check_names=False)
    assert set(index.baselines) == {"equal_weight", "min_variance"}  # the others beside it, same days and cost
    assert index.baselines["equal_weight"].account_value.equals(held.baselines["equal_weight"].account_value)
    free = run_backtest(market, POLICIES, Controls("index", cost_pct=0.0, **window))
    assert free.account_value.equals(index.account_value)  # an index is not traded: no cost to pay
    assert list(metrics_table(index).index) == ["index", "equal_weight", "min_variance"]
    no_benchmark = dataclasses.replace(market, benchmark={})
    with pytest.raises(ValueError, match="no benchmark .* choose another policy"):
        run_backtest(no_benchmark, POLICIES, Controls("index"))
    assert "index" not in interactive_backtest(no_benchmark, POLICIES).widgets["policy"].options


def test_an_ensemble_is_a_policy(market):
    env = market.env("train", 2, dtype=torch.float32)
    a, b = (podracer.make_agent("ppo", env, seed=seed, verbose=False) for seed in (0, 1))  # untrained, different
    policies = {"a": a, "b": b, "a and b": podracer.Ensemble([a, b]), "a twice": podracer.Ensemble([a, a])}
    runs = {name: run_backtest(market, policies, Controls(name, start="2019-01-01", end="2019-12-31"))
            for name in policies}
    assert runs["a twice"].account_value.equals(runs["a"].account_value)  # the mean of equal actions is that action
    assert runs["a"].trades.abs().sum().sum() > 0  # the members do trade, so the next line can fail
    assert not runs["a and b"].trades.equals(runs["a"].trades) and not runs["a and b"].trades.equals(runs["b"].trades)


def test_higher_cost_lowers_a_trading_policy(market):
    cheap = run_backtest(market, POLICIES, Controls("churn", cost_pct=0.0))
    dear = run_backtest(market, POLICIES, Controls("churn", cost_pct=0.005))
    assert final(dear) < final(cheap)
    assert dear.costs.sum() > 0 == cheap.costs.sum()
    # the baselines pay the same cost as the policy
    assert dear.baselines["equal_weight"].costs.sum() > cheap.baselines["equal_weight"].costs.sum()


def test_dates_set_the_period(market):
    r = run_backtest(market, POLICIES, Controls("buy_and_hold", start="2020-01-01", end="2020-06-30"))
    days = r.account_value.index
    assert days[0] == pd.Timestamp("2020-01-02") and days[-1] == pd.Timestamp("2020-06-30")
    assert r.baselines["index"].account_value.index.equals(days)
    whole = run_backtest(market, POLICIES, Controls("buy_and_hold"))
    assert whole.account_value.index[0] == market.close["test"].index[0]


def test_turbulence_switch_sells_to_cash(market):
    threshold = float(market.turbulence["test"].quantile(0.8))  # low: switches on one day in five
    off = run_backtest(market, POLICIES, Controls("buy_and_hold"))
    on = run_backtest(market, POLICIES, Controls("buy_and_hold", turbulence_threshold=threshold))
    turbulent = market.turbulence["test"] >= threshold
    assert (on.positions.loc[turbulent].sum(axis=1) == 0).all()  # nothing held on a turbulent day
    assert (off.positions.loc[turbulent].sum(axis=1) > 0).all()
    assert on.metrics()["turnover"] > 5 * off.metrics()["turnover"]


def test_initial_cash_scales_the_equity(market):
    small = run_backtest(market, POLICIES, Controls("buy_and_hold", initial_cash=1e6))
    large = run_backtest(market, POLICIES, Controls("buy_and_hold", initial_cash=4e6))
    ratio = large.account_value / small.account_value
    assert ratio.iloc[0] == pytest.approx(4.0)
    # Not exactly 4 later: orders are capped at max_trade_shares a day (the agents' training rule), so
    # the larger account takes more days to invest its cash.
    assert ratio.between(3.5, 4.1).all() and (ratio.iloc[1:] != 4.0).any()


@pytest.mark.parametrize("controls, message", [
    (Controls("nope"), "unknown policy 'nope'; choose one of"),
    (Controls("churn", start="2021-01-01", end="2020-01-01"), "is after end"),
    (Controls("churn", start="2010-01-01", end="2010-12-31"), "holds 0 trading day"),
    (Controls("churn", start="2020-01-02", end="2020-01-02"), "holds 1 trading day"),
    (Controls("churn", cost_pct=-0.001), r"cost_pct must be in \[0, 1\)"),
    (Controls("churn", initial_cash=0.0), "initial_cash must be > 0"),
    (Controls("churn", turbulence_threshold=0.0), "turbulence_threshold must be > 0"),
])
def test_bad_settings_are_refused(market, controls, message):
    with pytest.raises(ValueError, match=message):
        run_backtest(market, POLICIES, controls)
    with pytest.raises(ValueError, match="taken by the baselines"):
        run_backtest(market, {"buy_and_hold": churn}, Controls("churn"))


def test_panel_redraws_when_a_control_moves(market):
    panel = interactive_backtest(market, POLICIES)
    assert panel.controls().policy == "churn" and panel.result is not None
    first = panel.result
    panel.widgets["cost_pct"].value = 0.005
    assert panel.result is not first and panel.controls().cost_pct == 0.005
    assert final(panel.result) < final(first)
    panel.widgets["policy"].value = "buy_and_hold"
    assert panel.result.name == "buy_and_hold"
    before = panel.result
    panel.widgets["turbulence_quantile"].value = 0.9  # switch off: nothing re-runs
    assert panel.result is before
    panel.widgets["turbulence_on"].value = True
    assert panel.controls().turbulence_threshold == pytest.approx(float(market.turbulence["train"].quantile(0.9)))
    assert panel.result is not before
    panel.widgets["window"].index = (3, 3)  # one day: refused on screen, the last result stays
    assert "cannot backtest this setting" in panel.status.value and panel.result.name == "buy_and_hold"
    panel.widgets["window"].index = (0, 100)
    assert len(panel.result.account_value) == 101
    assert f".. {market.close['test'].index[100].date()}:" in panel.status.value  # the window is named on screen
    panel.widgets["turbulence_on"].value = False
    panel.widgets["window"].index = (0, len(market.close["test"]) - 1)
    assert panel.backtest(panel.controls()) is panel._cache[panel.controls()]  # back to a seen setting: cached



def test_panel_reads_out_its_dates_greys_out_the_unused_quantile_and_prints_one_number_format(market):
    panel = interactive_backtest(market, POLICIES)
    dates = market.close["test"].index
    assert panel.window_readout.value == f"{dates[0].date()} .. {dates[-1].date()} ({len(dates):,} days)"
    panel.widgets["window"].index = (10, 30)
    assert panel.window_readout.value == f"{dates[10].date()} .. {dates[30].date()} (21 days)"
    panel.widgets["window"].index = (5, 5)  # refused, but the readout still says where the slider is
    assert panel.window_readout.value.endswith(" (1 day)") and "cannot backtest" in panel.status.value
    quantile = panel.widgets["turbulence_quantile"]
    assert quantile.disabled  # the switch is off: the threshold would do nothing
    panel.widgets["turbulence_on"].value = True
    assert not quantile.disabled
    panel.widgets["turbulence_on"].value = False
    assert quantile.disabled and panel.controls().turbulence_threshold is None

    panel.widgets["window"].index = (0, 250)
    m = panel.result.metrics()
    table = metrics_table(panel.result)
    html, status = table.to_html(), panel.status.value
    for shown in (f"{m['sharpe']:.2f}", f"{m['cumulative_return']:.1%}", f"{m['costs']:.2%}"):
        assert shown in status and f">{shown}<" in html, (shown, status)  # the same text in both
    assert table.data.loc["churn", "sharpe"] == m["sharpe"]  # the numbers behind it, unrounded
    panel.widgets["policy"].value = "index"
    assert "not traded" in panel.status.value and ">n/a<" in metrics_table(panel.result).to_html()
