"""Validation schemes and scores (finance.validation), on cases small enough to check by hand."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from finance import deflated_sharpe_ratio, probabilistic_sharpe_ratio
from finance.validation import (SCORES, CombinatorialPurged, ConsecutiveWindows, SingleSplit, select, select_on,
                                window_scores)
from test_benchmarks_run import script


def _rows(split):
    return split.train.tolist(), [w.tolist() for w in split.windows]


# ---------------------------------------------------------------------------- schemes
def test_single_split_tests_the_last_rows_and_purges_the_row_before():
    (split,) = SingleSplit(test_size=3, label_horizon=1).splits(10)
    assert _rows(split) == ([0, 1, 2, 3, 4, 5], [[7, 8, 9]])  # row 6's label is row 7's return: purged


def test_consecutive_windows_walk_forward():
    splits = ConsecutiveWindows(n_windows=2, window_size=3, label_horizon=0).splits(10)
    assert [_rows(s) for s in splits] == [([0, 1, 2, 3], [[4, 5, 6]]), ([0, 1, 2, 3, 4, 5, 6], [[7, 8, 9]])]
    assert [s.groups for s in splits] == [(0,), (1,)]


def test_cpcv_purges_and_embargoes_around_each_test_group():
    scheme = CombinatorialPurged(n_groups=4, n_test_groups=2, label_horizon=1, embargo=0)
    splits = scheme.splits(12)  # groups [0, 1, 2] [3, 4, 5] [6, 7, 8] [9, 10, 11]
    assert len(splits) == math.comb(4, 2) == 6 and scheme.n_paths == 3
    by_groups = {s.groups: s for s in splits}
    # test groups 0 and 2: rows 0-2 and 6-8; purged: row 3 (after group 0), rows 5 and 9 (around group 2)
    assert _rows(by_groups[(0, 2)]) == ([4, 10, 11], [[0, 1, 2], [6, 7, 8]])
    embargoed = CombinatorialPurged(4, 2, label_horizon=1, embargo=1).splits(12)
    assert {s.groups: s.train.tolist() for s in embargoed}[(0, 2)] == [11]  # rows 4 and 10 embargoed too
    tested = np.bincount(np.concatenate([s.groups for s in splits]), minlength=4)
    assert tested.tolist() == [3, 3, 3, 3]  # each group tested k C(N, k) / N = 3 times: one per path
    for s in splits:  # train and test never share a row
        assert not set(s.train) & set(np.concatenate(s.windows))


def test_schemes_refuse_too_little_data():
    with pytest.raises(ValueError, match="at least 9 rows"):
        ConsecutiveWindows(n_windows=2, window_size=4).splits(8)
    with pytest.raises(ValueError, match="n_test_groups must be below"):
        CombinatorialPurged(n_groups=3, n_test_groups=3).splits(100)


# ---------------------------------------------------------------------------- scores
def test_scores_by_hand():
    r = np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])  # candidate 0: mean 2, std 1; candidate 1: flat
    np.testing.assert_allclose(window_scores(r, "mean"), [2.0, 0.0])
    np.testing.assert_allclose(window_scores(r, "sharpe"), [2.0, 0.0])  # a flat candidate has Sharpe 0
    # [1, 2, 3]: skew 0, plain kurtosis 1.5, so Var(SR) = (1 + 0.5/4 * 4) / (n - 1) = 0.75
    lcb = 2.0 - stats.norm.ppf(0.95) * math.sqrt(0.75)
    assert window_scores(r, "sharpe_lcb")[0] == pytest.approx(lcb)
    assert window_scores(r, "sharpe_lcb", confidence=0.5)[0] == pytest.approx(2.0)
    assert window_scores(r, "psr")[1] == pytest.approx(0.5)  # no skill either way


def test_psr_and_dsr_agree_with_the_overfitting_module():
    rng = np.random.default_rng(0)
    r = rng.normal(0.0005, 0.01, (300, 5)) + np.array([0.0, 0.0005, 0.001, -0.0005, 0.0015])
    psr = window_scores(r, "psr")
    dsr = window_scores(r, "dsr")
    for i in range(5):
        assert psr[i] == pytest.approx(probabilistic_sharpe_ratio(r[:, i]), rel=1e-12)
        assert dsr[i] == pytest.approx(deflated_sharpe_ratio(r[:, i], trial_returns=pd.DataFrame(r)), rel=1e-12)
    # deflating for more trials lowers every DSR
    assert (window_scores(r, "dsr", num_trials=100) < dsr).all()


def test_window_scores_reject_bad_input():
    with pytest.raises(ValueError, match="unknown score"):
        window_scores(np.zeros((5, 2)), "sortino")
    with pytest.raises(ValueError, match="at least 3 periods"):
        window_scores(np.zeros((2, 2)), "sharpe")
    with pytest.raises(ValueError, match="NaN"):
        window_scores(np.array([[1.0], [np.nan], [2.0]]), "mean")


# ---------------------------------------------------------------------------- selection
def test_select_averages_windows_and_measures_their_spread():
    # three windows of three days; candidate b's window means are 2, 4, 0 against a's 1, 1, 1
    a = [np.array([1.0, 1.0, 1.0])] * 3
    b = [np.array([2.0, 2.0, 2.0]), np.array([4.0, 4.0, 4.0]), np.array([0.0, 0.0, 0.0])]
    windows = [np.column_stack([x, y]) for x, y in zip(a, b)]
    sel = select(windows, "mean", names=["a", "b"])
    assert sel.pick_name == "b" and sel.scores.tolist() == [1.0, 2.0]
    assert sel.stderr[1] == pytest.approx(2.0 / math.sqrt(3))  # std of (2, 4, 0) is 2
    assert sel.difference(1, 0) == pytest.approx((1.0, 2.0 / math.sqrt(3)))  # b - a per window: 1, 3, -1
    assert not sel.separated(1, 0, z=1.0)  # 1 < 1.15: the lead does not survive the windows' noise
    # windows of one group count once: group 0 holds the first two windows, their mean is 3 for b
    grouped = select(windows, "mean", groups=[0, 0, 1])
    assert grouped.window_scores[:, 1].tolist() == [3.0, 0.0] and grouped.scores[1] == 1.5


def test_a_single_window_has_no_noise_estimate():
    sel = select([np.array([[1.0, 2.0], [2.0, 3.0], [3.0, 4.0]])], "mean")
    assert sel.pick == 1 and np.isnan(sel.stderr).all()
    assert not sel.separated(1, 0)
    assert list(sel.frame().index) == ["window 0", "score", "stderr"]


def test_ties_pick_the_first_candidate():
    assert select([np.ones((4, 3)) * np.array([1.0, 2.0, 2.0])], "mean").pick == 1


@pytest.mark.parametrize("scheme", [SingleSplit(100), ConsecutiveWindows(4, 100), CombinatorialPurged(6, 2)])
@pytest.mark.parametrize("score", SCORES)
def test_every_scheme_and_score_finds_a_clearly_better_candidate(scheme, score):
    rng = np.random.default_rng(1)
    returns = pd.DataFrame(rng.normal(0.0, 0.01, (600, 4)), columns=list("abcd"))
    returns["c"] += 0.004  # a daily Sharpe of 0.4: unmistakable in 100 days
    sel = select_on(returns, scheme, score)
    assert sel.pick_name == "c"
    assert sel.window_scores.shape == ({"single": 1, "windows": 4, "cpcv": 6}[scheme.name], 4)


def test_select_checks_its_arguments():
    with pytest.raises(ValueError, match="at least one"):
        select([], "mean")
    with pytest.raises(ValueError, match="names has 1"):
        select([np.zeros((3, 2))], "mean", names=["x"])
    with pytest.raises(ValueError, match="one per window"):
        select([np.zeros((3, 2))] * 2, "mean", groups=[0])


# ---------------------------------------------------------------------------- the benchmark
@pytest.mark.slow  # ~2 s on an idle core
def test_selection_power_benchmark_runs_tiny(capsys):
    bench = script("selection_power")
    table = bench.main(["--reps", "1", "--strengths", "none,easy"])
    assert len(table) == 2 * len(bench.SCHEMES) * len(SCORES)
    none = table[table.strength == "none"]
    assert (none["P(best)"] == "n/a (no best)").all()  # ic = 0: every candidate's true skill is 0
    assert table[table.strength == "easy"]["_p"].between(0, 1).all()
    assert "recommended: scheme=" in capsys.readouterr().out


@pytest.mark.slow  # ~1 s on an idle core
def test_selection_power_split_mode_cuts_one_split_into_windows(capsys):
    bench = script("selection_power")
    table = bench.main(["--mode", "split", "--reps", "2", "--strengths", "none,easy"])
    assert len(table) == 2 * len(bench.VALID_SPANS) * len(bench.SPLIT_WINDOWS)
    assert list(table["scheme"][:4]) == ["2y / 1", "2y / 2", "2y / 4", "2y / 8"]
    assert list(table["score"][:4]) == ["503d", "251d", "125d", "62d"]  # (504 - 1) // k days each
    one = table[table["scheme"].str.endswith("/ 1")]
    assert (one["false sep"] == "n/a").all()  # one window: no paired standard error, nothing separated
    assert "recommended" not in capsys.readouterr().out


def test_consecutive_windows_with_no_window_are_refused_when_built():
    with pytest.raises(ValueError, match="n_windows"):
        ConsecutiveWindows(0, 252)
    with pytest.raises(ValueError, match="window_size"):
        ConsecutiveWindows(4, 1)
