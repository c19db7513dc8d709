"""The finance job behind `make demo`, end to end at its smallest: tournament, backtests, Sharpe
intervals, overfitting guards, walk-forward, report."""

import numpy as np
import pandas as pd
import pytest

from finance import demo


def markdown_table(text: str, heading: str) -> pd.DataFrame:
    """The first markdown table after ``heading`` in the report, as strings indexed by its first column."""
    lines = text[text.index(heading):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return pd.DataFrame(rows[2:], columns=rows[0]).set_index(rows[0][0])


@pytest.mark.slow
def test_demo_writes_report_with_agents_baselines_guards_and_walk_forward(tmp_path):
    report = demo.main(["--out", str(tmp_path), "--size", "smoke", "--pods", "2", "--seeds", "1"])
    text = report.read_text()
    for row in ("tournament best", "tournament ensemble (top 3)", "PPO seed 0", "equal_weight", "min_variance",
                "index"):
        assert f"| {row}" in text, row
    assert (tmp_path / "equity.png").stat().st_size > 10_000
    assert 'Fills: `execution="next_close"`, the default' in text  # the causal fill, said beside the results
    board = pd.read_csv(tmp_path / "leaderboard.csv")
    assert len(board) == 2 * demo.SIZES["smoke"]["generations"]
    assert board["score"].notna().all()
    # The board's score is the trading tasks' default fitness, and the report says in what units.
    assert "## Leaderboard (validation score: annualised Sharpe ratio, mean of 4 consecutive windows of 12" in text
    assert board["window_scores"].notna().all()

    # Every strategy's Sharpe ratio sits inside its bootstrap interval; equal weight against itself: beta 1.
    results = markdown_table(text, "## Test period").astype(float)
    assert (results["sharpe_ci_low"] < results["sharpe"]).all()
    assert (results["sharpe"] < results["sharpe_ci_high"]).all()
    assert set(demo.RELATIVE_COLUMNS) <= set(results.columns)
    assert results.loc["equal_weight", "beta"] == 1.0 and results.loc["equal_weight", "excess_return"] == 0.0

    # Each strategy against equal weight, and the verdict in words.
    versus = markdown_table(text, "## Is any strategy distinguishable")
    assert "equal_weight" not in versus.index and {"tournament best", "index", "PPO seed 0"} <= set(versus.index)
    p = versus[["p (Ledoit-Wolf HAC)", "p (Jobson-Korkie-Memmel)"]].astype(float)
    assert ((p > 0) & (p <= 1)).all().all()
    assert "Hansen's SPA p = " in text and ("**no strategy is shown better than equal_weight**" in text or
                                            "**distinguishable from equal_weight**" in text)

    # The guards count every entry as a trial; the pick is the best validation score.
    guards = markdown_table(text, "## How much was luck")
    assert list(guards.index) == ["tournament entries, validation 2017-2018 (the selection)",
                                  "tournament entries, test 2019-2022"]  # one seed: no seed rows
    assert (guards["trials"].astype(int) == len(board)).all()
    assert (guards["pick"].astype(int) == board.loc[board["score"].idxmax(), "id"]).all()
    probs = guards[["psr", "dsr", "dsr_effective", "pbo"]].astype(float)
    assert ((probs >= 0) & (probs <= 1)).all().all()
    assert (probs["dsr"] <= probs["psr"]).all()  # deflating raises the bar above 0
    assert (probs["dsr"] <= probs["dsr_effective"]).all()  # fewer independent trials, a lower bar
    assert ((guards["effective_trials"].astype(float) >= 1) &
            (guards["effective_trials"].astype(float) <= guards["trials"].astype(int))).all()

    # Walk-forward: the four test years, each trained on the years before it only.
    wf = markdown_table(text, "## Walk-forward")
    for row in ("PPO walk-forward seed 0", "min-variance, refitted yearly", "equal weight, rebalanced yearly",
                "equal_weight", "index"):
        assert row in wf.index, row
    windows = markdown_table(text, "Per test window:")
    assert [t[:4] for t in windows["test"]] == ["2019", "2020", "2021", "2022"]
    train_end = pd.to_datetime([t.split("..")[1] for t in windows["train"]])
    test_start = pd.to_datetime([t.split("..")[0] for t in windows["test"]])
    assert (train_end < test_start).all()


def test_walk_forward_inputs_start_the_first_test_window_on_the_test_years():
    market = demo.prepare_market()
    prices, benchmark = demo.walk_forward_prices(market.tickers)
    first = demo.WALK_FORWARD_WARMUP + demo.WALK_FORWARD_TRAIN_DAYS
    assert prices.index[first] == pd.Timestamp("2019-01-02")  # the first trading day of 2019
    assert prices.index[first - 1].year == 2018
    assert benchmark.index.equals(prices.index) and benchmark.notna().all()

    split = demo.hold_out_validation(market, 504)
    assert len(split.close["valid"]) == 504 and split.close["train"].index[-1] < split.close["valid"].index[0]
    assert len(split.close["train"]) + 504 == len(market.close["train"])
    np.testing.assert_array_equal(split.price_scale, market.price_scale)


def test_demo_takes_its_agent_settings_from_the_library_preset():
    import inspect

    import podracer

    preset = podracer.get_preset("ppo", "stock_trading")  # registered by `import finance`
    assert demo.PRESET == preset
    assert demo.SIZES["full"]["single_steps"] == preset.total_steps
    assert inspect.signature(demo.train_env).parameters["num_envs"].default == preset.num_envs
    assert not hasattr(demo, "STOCK_PPO")  # no settings of its own beyond the demo's sizes


def test_comparison_against_equal_weight_says_in_words_what_the_tests_find(monkeypatch):
    import dataclasses

    from finance.backtest import BacktestResult

    monkeypatch.setattr(demo, "SPA_RESAMPLES", 200)
    rng = np.random.default_rng(0)
    dates = pd.bdate_range("2019-01-01", periods=757)
    ew_returns = rng.normal(4e-4, 0.01, 756)

    def result(name, r, **kwargs):
        return BacktestResult(name, pd.Series(1e6 * np.cumprod(np.r_[1.0, 1.0 + r]), index=dates), **kwargs)

    equal = result("equal_weight", ew_returns)
    noise = [result(f"noise {i}", ew_returns + rng.normal(0.0, 0.003, 756)) for i in range(3)]
    noise[0] = dataclasses.replace(noise[0], baselines={"equal_weight": equal})
    table, spa = demo.comparison_table(noise)
    assert list(table.index) == ["noise 0", "noise 1", "noise 2"]
    assert table.loc["noise 1", "sharpe"] == pytest.approx(noise[1].metrics()["sharpe"], rel=1e-12)
    np.testing.assert_allclose(table["sharpe equal_weight"], equal.metrics()["sharpe"], rtol=1e-12)
    assert spa.superior == [] and spa.pvalue > 0.05
    verdict = demo.comparison_verdict(table, spa)
    assert "**no strategy is shown better than equal_weight**" in verdict and "SPA p = " in verdict

    edge = result("edge", ew_returns + 1e-3 + rng.normal(0.0, 0.003, 756))  # 0.1% a day more: t about 9
    table, spa = demo.comparison_table([noise[0], edge])
    assert table.loc["edge", "p (Ledoit-Wolf HAC)"] < 0.01 and table.loc["edge", "difference"] > 0
    assert spa.best == "edge" and spa.superior == ["edge"]
    verdict = demo.comparison_verdict(table, spa)
    assert "edge above it" in verdict and "StepM finds edge better than equal_weight" in verdict
