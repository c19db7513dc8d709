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
    board = pd.read_csv(tmp_path / "leaderboard.csv")
    assert len(board) == 2 * demo.SIZES["smoke"]["generations"]
    assert board["score"].notna().all()

    # Every strategy's Sharpe ratio sits inside its bootstrap interval.
    results = markdown_table(text, "## Test period").astype(float)
    assert (results["sharpe_ci_low"] < results["sharpe"]).all()
    assert (results["sharpe"] < results["sharpe_ci_high"]).all()

    # The guards count every entry as a trial; the pick is the best validation score.
    guards = markdown_table(text, "## How much was luck")
    assert list(guards.index) == ["tournament entries, validation 2017-2018 (the selection)",
                                  "tournament entries, test 2019-2022"]  # one seed: no seed rows
    assert (guards["trials"].astype(int) == len(board)).all()
    assert (guards["pick"].astype(int) == board.loc[board["score"].idxmax(), "id"]).all()
    probs = guards[["psr", "dsr", "pbo"]].astype(float)
    assert ((probs >= 0) & (probs <= 1)).all().all()
    assert (probs["dsr"] <= probs["psr"]).all()  # deflating raises the bar above 0

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
