"""The finance job behind `make demo`, end to end at its smallest: tournament, backtests, report."""

import pandas as pd

from finance import demo


def test_demo_writes_report_with_agents_and_baselines(tmp_path):
    report = demo.main(["--out", str(tmp_path), "--size", "smoke", "--pods", "2", "--seeds", "1"])
    text = report.read_text()
    for row in ("tournament best", "tournament ensemble (top 3)", "PPO seed 0", "equal_weight", "min_variance",
                "index"):
        assert f"| {row}" in text, row
    assert (tmp_path / "equity.png").stat().st_size > 10_000
    board = pd.read_csv(tmp_path / "leaderboard.csv")
    assert len(board) == 2 * demo.SIZES["smoke"]["generations"]
    assert board["score"].notna().all()


def test_demo_takes_its_agent_settings_from_the_library_preset():
    import inspect

    import podracer

    preset = podracer.get_preset("ppo", "stock_trading")  # registered by `import finance`
    assert demo.PRESET == preset
    assert demo.SIZES["full"]["single_steps"] == preset.total_steps
    assert inspect.signature(demo.train_env).parameters["num_envs"].default == preset.num_envs
    assert not hasattr(demo, "STOCK_PPO")  # no settings of its own beyond the demo's sizes
