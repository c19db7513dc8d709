"""finance.overfitting: PSR, DSR and PBO against the DSR paper's worked example, closed forms,
a brute-force CSCV and Monte-Carlo checks of what each probability claims."""

from __future__ import annotations

import itertools
import math
import warnings

import empyrical
import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from finance.overfitting import (deflated_sharpe_ratio, effective_trials, expected_max_sharpe, pbo,
                                 probabilistic_sharpe_ratio, probability_of_backtest_overfitting, psr_from_moments,
                                 sharpe_ratio, trial_returns_from_leaderboard)
from finance.statistics import minimum_track_record_length


# ---------------------------------------------------------------------------- PSR
def three_point_returns(mu: float, a: float, k: int) -> np.ndarray:
    """k times mu - a, 4k times mu, k times mu + a: sample skewness exactly 0 and kurtosis
    exactly 3 (m4 / m2^2 = (a^4 / 3) / (a^2 / 3)^2), as for normal returns."""
    return np.repeat([mu - a, mu, mu + a], [k, 4 * k, k])


def test_psr_matches_the_normal_closed_form():
    """With skewness 0 and kurtosis 3 the PSR is Z[(SR - SR*) sqrt(n - 1) / sqrt(1 + SR^2 / 2)]
    (Lo 2002's normal-returns variance of the Sharpe ratio)."""
    r = three_point_returns(mu=0.001, a=0.02, k=42)  # 252 "days"
    assert stats.skew(r) == pytest.approx(0.0, abs=1e-12)
    assert stats.kurtosis(r, fisher=False) == pytest.approx(3.0, abs=1e-12)
    sr, n = r.mean() / r.std(ddof=1), len(r)
    for benchmark in (0.0, 0.02, -0.05):
        expected = stats.norm.cdf((sr - benchmark) * np.sqrt(n - 1) / np.sqrt(1 + sr**2 / 2))
        assert probabilistic_sharpe_ratio(r, benchmark) == pytest.approx(expected, rel=1e-12)
    # An annualised benchmark is divided by sqrt(periods_per_year) before it is compared.
    assert probabilistic_sharpe_ratio(r, 0.5, periods_per_year=252) == pytest.approx(
        probabilistic_sharpe_ratio(r, 0.5 / np.sqrt(252)), rel=1e-12)
    assert probabilistic_sharpe_ratio(pd.Series(r), 0.0) == probabilistic_sharpe_ratio(r, 0.0)


def test_psr_is_calibrated_and_its_skew_correction_matters():
    """When the true Sharpe ratio equals the benchmark, PSR > 0.95 must happen about 5% of the
    time. For strongly negatively skewed returns the normal formula is overconfident; the PSR's
    skewness/kurtosis term brings the rate back near 5%."""
    rng = np.random.default_rng(0)
    T, reps, true_sr = 500, 2000, 0.1
    normal = [probabilistic_sharpe_ratio(rng.normal(true_sr, 1.0, T), true_sr) for _ in range(reps)]
    assert 0.03 < np.mean(np.array(normal) > 0.95) < 0.08

    s = 0.8  # minus a lognormal, standardised: skewness about -3.7, kurtosis about 30
    m, sd = np.exp(s * s / 2), np.sqrt((np.exp(s * s) - 1) * np.exp(s * s))
    draws = [(m - rng.lognormal(0.0, s, T)) / sd + true_sr for _ in range(reps)]
    psr = np.array([probabilistic_sharpe_ratio(r, true_sr) for r in draws])
    naive = np.array([stats.norm.cdf((r.mean() / r.std(ddof=1) - true_sr) * np.sqrt(T - 1) /
                                     np.sqrt(1 + (r.mean() / r.std(ddof=1)) ** 2 / 2)) for r in draws])
    assert 0.03 < np.mean(psr > 0.95) < 0.085
    assert np.mean(naive > 0.95) > np.mean(psr > 0.95) + 0.015


def test_sharpe_ratio_agrees_with_empyrical():
    rng = np.random.default_rng(3)
    frame = pd.DataFrame(rng.normal(5e-4, 0.01, (300, 3)), columns=["a", "b", "c"])
    per_trial = sharpe_ratio(frame, periods_per_year=252)
    for name in frame:
        assert per_trial[name] == pytest.approx(empyrical.sharpe_ratio(frame[name], annualization=252), rel=1e-12)
    assert sharpe_ratio(frame["a"]) == pytest.approx(per_trial["a"] / np.sqrt(252), rel=1e-12)


# ---------------------------------------------------------------------------- DSR
def test_dsr_reproduces_the_papers_numerical_example():
    """Bailey & López de Prado (2014), numerical example: N = 100 trials whose annualised Sharpe
    ratios have variance 1/2, best annualised SR 2.5 over T = 1250 daily returns (250 a year),
    skewness -3, kurtosis 10: SR0 about 0.1132 and SR^ about 0.1581 per day, DSR about 0.9004."""
    sr0 = expected_max_sharpe(100, np.sqrt(0.5)) / np.sqrt(250)
    sr = 2.5 / np.sqrt(250)
    assert sr0 == pytest.approx(0.1132, abs=5e-5)
    assert sr == pytest.approx(0.1581, abs=5e-5)
    assert psr_from_moments(sr, 1250, skew=-3.0, kurtosis=10.0, benchmark_sharpe=sr0) == pytest.approx(0.9004,
                                                                                                        abs=5e-5)


def test_expected_max_sharpe_matches_simulated_maxima():
    rng = np.random.default_rng(4)
    for n in (10, 100, 1000):
        simulated = rng.standard_normal((4000, n)).max(axis=1).mean()
        assert expected_max_sharpe(n, 2.0) == pytest.approx(2.0 * simulated, rel=0.03)
    assert expected_max_sharpe(1, 2.0) == 0.0


def test_dsr_falls_as_trials_grow_and_units_agree():
    rng = np.random.default_rng(5)
    r = rng.normal(1e-3, 0.01, 750)  # about 1.6 annualised
    dsr = [deflated_sharpe_ratio(r, n, 0.05) for n in (1, 2, 10, 100, 1000, 10_000)]
    assert dsr[0] == pytest.approx(probabilistic_sharpe_ratio(r, 0.0))  # one trial: nothing was selected
    assert all(a > b for a, b in zip(dsr, dsr[1:]))
    assert dsr[0] > 0.95 > dsr[-1]
    # Annualised trial spread with periods_per_year == the per-period spread without it.
    assert deflated_sharpe_ratio(r, 100, 0.05 * np.sqrt(252), periods_per_year=252) == pytest.approx(dsr[3])
    # trial_sharpes: N = their count and the spread their std (ddof=1); num_trials may override N.
    sharpes = rng.normal(0.0, 0.05, 40)
    assert deflated_sharpe_ratio(r, trial_sharpes=sharpes) == pytest.approx(
        deflated_sharpe_ratio(r, 40, sharpes.std(ddof=1)))
    assert deflated_sharpe_ratio(r, 500, trial_sharpes=sharpes) == pytest.approx(
        deflated_sharpe_ratio(r, 500, sharpes.std(ddof=1)))


def test_dsr_rejects_the_luckiest_of_many_noise_trials_but_keeps_a_real_edge():
    """Pick the best of 50 skill-less strategies: its plain PSR(0) almost always looks
    significant; its DSR must not (false-positive rate at most 5%, about 0.5 on average)."""
    rng = np.random.default_rng(6)
    psr, dsr = [], []
    for _ in range(300):
        x = rng.normal(0.0, 0.01, (500, 50))
        sharpes = x.mean(axis=0) / x.std(axis=0, ddof=1)
        best = x[:, sharpes.argmax()]
        psr.append(probabilistic_sharpe_ratio(best))
        dsr.append(deflated_sharpe_ratio(best, trial_sharpes=sharpes))
    assert np.mean(np.array(psr) > 0.95) > 0.8
    assert np.mean(np.array(dsr) > 0.95) <= 0.05
    assert 0.35 < np.mean(dsr) < 0.65
    x = rng.normal(0.0, 0.01, (500, 50))
    x[:, 7] += 0.003  # a daily Sharpe ratio of 0.3 (about 4.8 a year)
    sharpes = x.mean(axis=0) / x.std(axis=0, ddof=1)
    assert sharpes.argmax() == 7
    assert deflated_sharpe_ratio(x[:, 7], trial_sharpes=sharpes) > 0.95


# ---------------------------------------------------------------------------- PBO
def brute_force_logits(frame: pd.DataFrame, S: int) -> np.ndarray:
    """CSCV written plainly from the paper's steps, with pandas, for comparison."""
    B = len(frame) // S
    blocks = [frame.iloc[len(frame) - B * S:].iloc[i * B:(i + 1) * B] for i in range(S)]
    logits = []
    for chosen in itertools.combinations(range(S), S // 2):
        train = pd.concat([blocks[i] for i in chosen])
        test = pd.concat([blocks[i] for i in range(S) if i not in chosen])
        is_sr, oos_sr = train.mean() / train.std(), test.mean() / test.std()
        best = is_sr.idxmax()
        omega = oos_sr.rank()[best] / (len(frame.columns) + 1)
        logits.append(np.log(omega / (1 - omega)))
    return np.array(logits)


def test_pbo_matches_a_brute_force_cscv():
    rng = np.random.default_rng(7)
    frame = pd.DataFrame(rng.normal(2e-4, 0.01, (123, 5)), columns=list("abcde"))  # 123 % 6 = 3 dates dropped
    result = probability_of_backtest_overfitting(frame, n_splits=6)
    expected = brute_force_logits(frame, 6)
    assert len(result.logits) == 20
    np.testing.assert_allclose(result.logits, expected, rtol=1e-9)
    assert result.pbo == pytest.approx(np.mean(expected <= 0))
    assert set(result.selected) <= set(frame.columns)
    table = result.to_frame()
    assert list(table.columns) == ["selected", "is_metric", "oos_metric", "logit"] and len(table) == 20
    assert pbo is probability_of_backtest_overfitting
    # A custom metric gives the same ranks as the built-in one when it is the same function.
    custom = probability_of_backtest_overfitting(frame, 6, metric=lambda a: a.mean(0) / a.std(0, ddof=1))
    np.testing.assert_allclose(custom.logits, result.logits, rtol=1e-9)


def test_pbo_near_zero_when_one_trial_truly_dominates():
    rng = np.random.default_rng(8)
    frame = pd.DataFrame(rng.normal(0.0, 0.01, (1000, 10)))
    frame[3] += 0.002  # a real daily edge; the others are noise
    result = probability_of_backtest_overfitting(frame, periods_per_year=252)
    assert result.pbo < 0.05
    assert (result.selected == 3).mean() > 0.95
    assert result.prob_oos_loss < 0.05
    assert np.median(result.oos_metric) > 1.5  # annualised Sharpe of the pick out of sample


def test_pbo_is_a_coin_toss_for_pure_noise():
    """With no trial better than another the OOS rank of the IS winner is uniform, so PBO
    averages 0.5 (one noise panel alone can land anywhere from 0.2 to 0.9)."""
    rng = np.random.default_rng(9)
    values = [probability_of_backtest_overfitting(pd.DataFrame(rng.normal(0.0, 0.01, (800, 20)))).pbo
              for _ in range(40)]
    assert 0.4 < np.mean(values) < 0.6


def test_pbo_near_one_when_in_sample_luck_is_out_of_sample_bad_luck():
    """Each trial earns +d in half of the 8 blocks and -d in the other half, one trial per such
    pattern: the in-sample winner is the one whose good half is the IS set, so out of sample
    it has only bad blocks and ranks last."""
    S, B, d = 8, 30, 0.002
    rng = np.random.default_rng(10)
    patterns = list(itertools.combinations(range(S), S // 2))
    drift = np.full((S, len(patterns)), -d)
    for j, good in enumerate(patterns):
        drift[list(good), j] = d
    frame = pd.DataFrame(np.repeat(drift, B, axis=0) + rng.normal(0.0, 0.002, (S * B, len(patterns))))
    result = probability_of_backtest_overfitting(frame, n_splits=S)
    assert result.pbo > 0.95
    assert result.prob_oos_loss > 0.95


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs, frame_shape, message", [
    (dict(n_splits=16), (20, 4), "20 dates, too few for n_splits=16.*pass n_splits=10"),
    (dict(n_splits=15), (200, 4), "even.*pass 14 or 16"),
    (dict(n_splits=0), (200, 4), "even whole number >= 2"),
    (dict(n_splits=24), (2000, 4), "pass n_splits=16"),
    (dict(metric="sortino"), (200, 4), "unknown metric 'sortino'"),
    (dict(), (200, 1), "at least 2 trials"),
])
def test_pbo_input_errors_name_the_problem_and_the_fix(kwargs, frame_shape, message):
    frame = pd.DataFrame(np.random.default_rng(0).normal(0, 0.01, frame_shape))
    with pytest.raises(ValueError, match=message):
        probability_of_backtest_overfitting(frame, **kwargs)


def test_nan_returns_are_refused_with_the_fix():
    frame = pd.DataFrame(np.random.default_rng(0).normal(0, 0.01, (200, 3)), columns=["x", "y", "z"])
    frame.iloc[5, 1] = np.nan
    with pytest.raises(ValueError, match=r"1 NaN.*\['y'\].*dropna"):
        probability_of_backtest_overfitting(frame)
    with pytest.raises(ValueError, match="NaN.*dropna"):
        probabilistic_sharpe_ratio(frame["y"])
    with pytest.raises(ValueError, match="constant"):
        probabilistic_sharpe_ratio(np.zeros(50))
    with pytest.raises(ValueError, match="at least 3"):
        probabilistic_sharpe_ratio([0.01, 0.02])
    with pytest.raises(ValueError, match="trial_sharpes=sharpe_ratio"):
        deflated_sharpe_ratio(frame["x"].fillna(0), num_trials=10)
    with pytest.raises(ValueError, match="not both"):
        deflated_sharpe_ratio(frame["x"], trial_sharpes=[0.1, 0.2], trials_sharpe_std=0.1)
    with pytest.raises(ValueError, match="num_trials must be a whole number"):
        expected_max_sharpe(0, 1.0)
    with pytest.raises(ValueError, match="excess kurtosis, add 3"):
        psr_from_moments(0.1, 100, 0.0, 0.0)


# ---------------------------------------------------------------------------- tournament entries
def test_trial_returns_from_leaderboard_backtests_each_entry(tmp_path):
    from podracer import make_agent
    from podracer.tournament import Leaderboard
    from finance.backtest import backtest
    from finance.env import StockTradingVecEnv

    rng = np.random.default_rng(11)
    dates = pd.bdate_range("2019-01-02", periods=60, name="date")
    close = pd.DataFrame(50 * np.exp(np.cumsum(rng.normal(0, 0.02, (60, 3)), axis=0)), index=dates,
                         columns=["A", "B", "C"])
    env = StockTradingVecEnv(close, max_trade_shares=100)
    board = Leaderboard(tmp_path)
    agents = [make_agent("ppo", env, seed=s, preset=None, hidden_sizes=(8,), num_steps=4, verbose=False)
              for s in range(3)]
    for agent in agents:  # a fresh policy's mean action is about 0 (no trades): give each its own buys
        with torch.no_grad():
            agent.model.actor[2].bias.copy_(torch.as_tensor(rng.uniform(0.2, 1.0, 3)))
    ids = [board.submit(a, score=float(s)).id for s, a in enumerate(agents)]

    frame = trial_returns_from_leaderboard(board, env)
    assert list(frame.columns) == ids and len(frame) == 59 and not frame.isna().any().any()
    expected = backtest(agents[1], env, baselines=False).returns()
    np.testing.assert_allclose(frame[ids[1]].to_numpy(), expected.to_numpy())
    assert not np.allclose(frame[ids[0]], frame[ids[2]])  # each entry's own policy, not one reused
    assert list(trial_returns_from_leaderboard(tmp_path, env, entries=ids[:2]).columns) == ids[:2]
    with pytest.raises(ValueError, match="at least 2 trials"):
        trial_returns_from_leaderboard(board, env, entries=ids[:1])


# ---------------------------------------------------------------------------- bootstrap Sharpe interval
def test_bootstrap_sharpe_ci_covers_the_true_sharpe_about_as_often_as_it_says():
    """IID normal returns with a known Sharpe ratio: the 95% interval must contain it in about
    95% of samples (percentile intervals run a little narrow on two years of data: ~93%)."""
    from finance.overfitting import bootstrap_sharpe_ci

    rng = np.random.default_rng(0)
    true_sr, draws = 0.1, 200
    hits = [lo <= true_sr <= hi for lo, hi in (bootstrap_sharpe_ci(rng.normal(true_sr, 1.0, 500), n_resamples=500,
                                                                   seed=i) for i in range(draws))]
    assert 0.88 <= np.mean(hits) <= 0.99


def test_bootstrap_sharpe_ci_keeps_the_dependence_an_iid_bootstrap_breaks():
    """Positively autocorrelated returns (AR(1), φ = 0.5) have a Sharpe ratio estimate about
    sqrt((1 + φ) / (1 - φ)) = 1.7 times as variable as IID ones: the block interval widens by
    about that, the IID one (block_length=1) does not."""
    from finance.overfitting import bootstrap_sharpe_ci

    rng = np.random.default_rng(1)
    eps = rng.normal(0.0, 1.0, 2000)
    r = np.empty_like(eps)
    r[0] = eps[0]
    for t in range(1, len(r)):
        r[t] = 0.5 * r[t - 1] + eps[t]
    r += 0.05
    width = {L: np.subtract(*bootstrap_sharpe_ci(r, block_length=L, n_resamples=1000)[::-1]) for L in (1, 40)}
    assert 1.35 < width[40] / width[1] < 2.1


def test_bootstrap_sharpe_ci_narrows_with_data_is_seeded_and_annualises():
    from finance.overfitting import bootstrap_sharpe_ci

    rng = np.random.default_rng(2)
    long = rng.normal(0.0005, 0.01, 4000)
    lo, hi = bootstrap_sharpe_ci(long[:250], seed=3)
    lo4, hi4 = bootstrap_sharpe_ci(long, seed=3)
    assert lo < sharpe_ratio(long[:250]) < hi and lo4 < sharpe_ratio(long) < hi4
    assert 0.17 < (hi4 - lo4) / (hi - lo) < 0.35  # 16x the data: about 1/4 the width
    assert bootstrap_sharpe_ci(long, seed=3) == (lo4, hi4)  # same seed, same interval
    assert bootstrap_sharpe_ci(long, seed=4) != (lo4, hi4)
    annual = bootstrap_sharpe_ci(pd.Series(long), seed=3, periods_per_year=252)
    np.testing.assert_allclose(annual, np.array([lo4, hi4]) * np.sqrt(252), rtol=1e-12)
    assert bootstrap_sharpe_ci(long, confidence=0.5, seed=3).low > lo4  # a 50% interval sits inside


def test_bootstrap_sharpe_ci_rejects_bad_input_with_the_fix():
    from finance.overfitting import bootstrap_sharpe_ci

    r = np.random.default_rng(3).normal(0.001, 0.01, 300)
    with pytest.raises(ValueError, match="NaN.*dropna"):
        bootstrap_sharpe_ci(np.append(r, np.nan))
    with pytest.raises(ValueError, match="too few to bootstrap.*at least 20"):
        bootstrap_sharpe_ci(r[:12])
    with pytest.raises(ValueError, match="at least 80.*shorter block_length"):
        bootstrap_sharpe_ci(r[:60], block_length=40)
    with pytest.raises(ValueError, match="confidence must be between 0 and 1"):
        bootstrap_sharpe_ci(r, confidence=95)
    with pytest.raises(ValueError, match="block_length must be a whole number"):
        bootstrap_sharpe_ci(r, block_length=0)
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap_sharpe_ci(r, n_resamples=10)


# ---------------------------------------------------------------------------- effective number of trials
def test_effective_trials_counts_clusters_not_copies():
    rng = np.random.default_rng(10)
    T = 1000
    independent = pd.DataFrame(rng.normal(size=(T, 20)))
    assert effective_trials(independent) == pytest.approx(20, rel=0.02)
    assert effective_trials(independent, "correlation") == pytest.approx(20, rel=0.06)
    # Two lineages of ten near-copies each: two independent trials (Galwey), and about two for the design
    # effect too, whose mean correlation is about 9/19.
    lineages = pd.DataFrame(np.repeat(rng.normal(size=(T, 2)), 10, axis=1) + 0.01 * rng.normal(size=(T, 20)))
    assert effective_trials(lineages) == pytest.approx(2.0, abs=0.15)
    rho = np.corrcoef(lineages.to_numpy().T)[~np.eye(20, dtype=bool)].mean()
    assert effective_trials(lineages, "correlation") == pytest.approx(20 / (1 + 19 * rho), rel=1e-9)
    # One lineage with a common factor (correlation 0.5): between 1 and N, fewer the more alike.
    common = [effective_trials(pd.DataFrame(np.sqrt(c) * rng.normal(size=(T, 1)) + np.sqrt(1 - c) *
                                            rng.normal(size=(T, 20)))) for c in (0.2, 0.5, 0.8)]
    assert 20 > common[0] > common[1] > common[2] > 1
    with pytest.raises(ValueError, match="unknown method 'pca'"):
        effective_trials(independent, "pca")


def test_dsr_with_effective_trials_is_calibrated_for_clustered_trials():
    """Fifty skill-less trials in five lineages of ten near-copies: counting 50 trials makes the DSR
    of the best too harsh (a true discovery would be missed); counting the 5 it is worth keeps the
    DSR's promise, at most 5% or so of lucky picks above 0.95, about 0.5 on average."""
    rng = np.random.default_rng(11)
    plain, effective = [], []
    for _ in range(150):
        x = np.repeat(rng.normal(0.0, 0.01, (500, 5)), 10, axis=1) + rng.normal(0.0, 0.001, (500, 50))
        frame = pd.DataFrame(x)
        best = frame[frame.mean().div(frame.std()).idxmax()]
        plain.append(deflated_sharpe_ratio(best, trial_returns=frame))
        effective.append(deflated_sharpe_ratio(best, "effective", trial_returns=frame))
    assert np.mean(np.array(effective) > 0.95) <= 0.08
    assert 0.35 < np.mean(effective) < 0.65
    assert np.mean(plain) < np.mean(effective) - 0.1
    # "effective" is N = round(effective_trials(...)) with the same trial Sharpe ratios.
    sharpes = frame.mean() / frame.std()
    assert deflated_sharpe_ratio(best, "effective", trial_returns=frame) == pytest.approx(
        deflated_sharpe_ratio(best, round(effective_trials(frame)), trial_sharpes=sharpes), rel=1e-12)
    with pytest.raises(ValueError, match="pass trial_returns"):
        deflated_sharpe_ratio(best, "effective", trial_sharpes=sharpes)
    with pytest.raises(ValueError, match="not several"):
        deflated_sharpe_ratio(best, trial_returns=frame, trial_sharpes=sharpes)


# ---------------------------------------------------------------------------- degenerate trials, units, text
def test_degenerate_trial_sets_are_refused_or_flagged():
    rng = np.random.default_rng(12)
    r = rng.normal(0.0, 0.01, 200)
    with pytest.raises(ValueError, match="4 trials but they are all identical"):  # was PBO 1.0, silently
        probability_of_backtest_overfitting(pd.DataFrame(np.repeat(r[:, None], 4, axis=1)))
    with pytest.raises(ValueError, match="every trial in trial_returns is constant"):
        probability_of_backtest_overfitting(pd.DataFrame({"cash": np.zeros(200), "bond": np.full(200, 1e-4)}))
    frame = pd.DataFrame({"a": r, "b": rng.normal(0.0, 0.01, 200), "a again": r})
    with pytest.warns(UserWarning, match=r"1 trial\(s\) \['a again'\] repeat another trial exactly.*2 distinct"):
        probability_of_backtest_overfitting(frame, n_splits=4)
    with pytest.raises(ValueError, match=r"trial_returns: 1 column\(s\) hold non-numbers: \['name'\]"):
        probability_of_backtest_overfitting(frame.drop(columns="a again").assign(name="x"))
    with pytest.raises(ValueError, match=r"returns: holds non-numbers \(str"):
        probabilistic_sharpe_ratio(pd.Series(r).astype(str))


def test_returns_constant_but_not_zero_are_not_read_as_a_huge_sharpe_ratio():
    """Found by re-deriving the maths: cash at a fixed rate (a constant 1e-4 a day) has a std of
    round-off (1e-20), not 0, so it passed the constant-returns check with a Sharpe ratio of 1e15,
    and as one trial among others it took the DSR's expected maximum with it (DSR 0.0) or won
    every CSCV split."""
    cash = np.full(252, 1e-4)
    assert cash.std() > 0  # the round-off the check no longer relies on
    for call in (sharpe_ratio, probabilistic_sharpe_ratio, minimum_track_record_length):
        with pytest.raises(ValueError, match=r"constant \(0.0001 every period\).*pass excess returns"):
            call(cash)
    rng = np.random.default_rng(14)
    trials = pd.DataFrame(rng.normal(5e-4, 0.01, (1000, 8)), columns=[f"t{i}" for i in range(8)])
    r = rng.normal(1e-3, 0.01, 1000)
    with_cash = trials.assign(cash=0.03 / 252)
    with pytest.warns(UserWarning, match=r"\['cash'\] earn the same non-zero return every period.*Sharpe 0"):
        dsr = deflated_sharpe_ratio(r, trial_returns=with_cash)
    flat = deflated_sharpe_ratio(r, trial_returns=trials.assign(cash=0.0))  # the flat trial it now equals
    assert dsr == pytest.approx(flat) and dsr > 0.5  # was 0.0
    with pytest.warns(UserWarning, match="earn the same non-zero return"):
        result = probability_of_backtest_overfitting(with_cash, n_splits=8)
    assert result.pbo == pytest.approx(probability_of_backtest_overfitting(trials.assign(cash=0.0), n_splits=8).pbo)


def test_a_sharpe_ratio_in_the_wrong_units_warns():
    r = np.random.default_rng(13).normal(5e-4, 0.01, 500)  # per period about 0.05
    with pytest.warns(UserWarning, match=r"benchmark_sharpe=1 is read per period.*pass periods_per_year"):
        assert probabilistic_sharpe_ratio(r, 1.0) < 1e-50  # what the issue saw: 5.7e-205 and no word
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert 0.01 < probabilistic_sharpe_ratio(r, 1.0, periods_per_year=252) < 0.99
        probabilistic_sharpe_ratio(r, 0.04)  # a plausible daily benchmark
        deflated_sharpe_ratio(r, trial_sharpes=[0.01, 0.03, 0.05])
    with pytest.warns(UserWarning, match=r"median \|trial_sharpes\|=1.25 is read per period"):
        deflated_sharpe_ratio(r, trial_sharpes=[1.0, 2.0, 0.5, 1.5])
    with pytest.warns(UserWarning, match=r"trials_sharpe_std=0.8 is read per period"):
        deflated_sharpe_ratio(r, 10, 0.8)
    with pytest.warns(UserWarning, match=r"benchmark_sharpe=1 is read per period"):  # was inf without a word
        assert minimum_track_record_length(r, 1.0) == math.inf
