"""finance.statistics: the Sharpe-difference tests against hand computations and their size under
the null, MinTRL against the PSR it inverts, Lo's annualisation against aggregated returns, and
the SPA / Reality Check / StepM wrapper against what arch computes and what the tests claim."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from finance.overfitting import psr_from_moments
from finance.statistics import (lo_scale_factor, lo_sharpe_ratio, long_run_covariance, min_track_record_from_moments,
                                minimum_track_record_length, sharpe_difference_test, spa_test, step_down,
                                stationary_bootstrap_variance)


def correlated_normals(rng: np.random.Generator, T: int, mean: tuple[float, float], rho: float) -> np.ndarray:
    """(T, 2) normal returns with unit variances, the given means and correlation rho."""
    z = rng.standard_normal((T, 2))
    z[:, 1] = rho * z[:, 0] + math.sqrt(1 - rho**2) * z[:, 1]
    return z + np.asarray(mean)


# ---------------------------------------------------------------------------- Sharpe difference
def test_memmel_test_is_the_closed_form_by_hand():
    rng = np.random.default_rng(0)
    x = correlated_normals(rng, 400, (0.08, 0.02), 0.6)
    a, b = x[:, 0], x[:, 1]
    sa, sb = a.mean() / a.std(ddof=1), b.mean() / b.std(ddof=1)
    rho = np.corrcoef(a, b)[0, 1]
    theta = (2 - 2 * rho + 0.5 * (sa**2 + sb**2 - 2 * sa * sb * rho**2)) / 400  # Memmel (2003)
    z = (sa - sb) / math.sqrt(theta)
    out = sharpe_difference_test(pd.Series(a), pd.Series(b), "memmel")
    assert out.z == pytest.approx(z, rel=1e-12)
    assert out.p_value == pytest.approx(2 * stats.norm.sf(abs(z)), rel=1e-12)
    assert out.difference == pytest.approx(sa - sb, rel=1e-12)
    # Annualised: the Sharpe ratios and the standard error scale by sqrt(252), z and p do not.
    annual = sharpe_difference_test(a, b, "memmel", periods_per_year=252)
    assert annual.std_error == pytest.approx(out.std_error * math.sqrt(252), rel=1e-12)
    assert (annual.z, annual.p_value) == pytest.approx((out.z, out.p_value), rel=1e-12)


def test_ledoit_wolf_agrees_with_memmel_for_iid_normal_returns_and_widens_for_autocorrelation():
    """For IID normal returns the delta-method variance of Ledoit & Wolf is Memmel's θ (both are
    the asymptotic variance of SR_a - SR_b): with bandwidth 0 (no lags) the two standard errors
    agree on a long sample. For AR(1) returns with φ = 0.3 the variance of a mean is (1 + φ)/(1 - φ)
    = 1.86 times the IID one: the HAC standard error is about sqrt(1.86) = 1.36 times Memmel's."""
    rng = np.random.default_rng(1)
    x = correlated_normals(rng, 5_000, (0.05, 0.03), 0.5)
    hac = sharpe_difference_test(x[:, 0], x[:, 1], "hac", bandwidth=0)
    memmel = sharpe_difference_test(x[:, 0], x[:, 1], "memmel")
    assert hac.std_error == pytest.approx(memmel.std_error, rel=0.05)
    e = rng.standard_normal((5_000, 2))
    ar = np.empty_like(e)
    ar[0] = e[0]
    for t in range(1, len(e)):
        ar[t] = 0.3 * ar[t - 1] + e[t]
    ratio = sharpe_difference_test(ar[:, 0], ar[:, 1]).std_error / sharpe_difference_test(ar[:, 0], ar[:, 1],
                                                                                           "memmel").std_error
    assert 1.2 < ratio < 1.5


def test_long_run_covariance_is_the_kernel_sum():
    """Ψ^ with weights (1, w1, w2) is Γ0 + w1 (Γ1 + Γ1') + w2 (Γ2 + Γ2'), written out by lag."""
    rng = np.random.default_rng(2)
    y = rng.standard_normal((300, 3))
    y[1:] += 0.4 * y[:-1]
    x = y - y.mean(axis=0)
    gamma = [x[h:].T @ x[:len(x) - h] / len(x) for h in range(3)]
    expected = gamma[0] + 0.7 * (gamma[1] + gamma[1].T) + 0.2 * (gamma[2] + gamma[2].T)
    np.testing.assert_allclose(long_run_covariance(y, np.array([1.0, 0.7, 0.2])), expected, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(long_run_covariance(y, np.array([1.0])), np.cov(y.T, ddof=0), rtol=1e-10)


def test_sharpe_difference_tests_have_their_size_under_the_null():
    """Equal true Sharpe ratios (correlated normal returns): p < 0.05 about 5% of the time."""
    rng = np.random.default_rng(3)
    p = {"hac": [], "memmel": []}
    for _ in range(300):
        x = correlated_normals(rng, 500, (0.05, 0.05), 0.5)
        for method in p:
            p[method].append(sharpe_difference_test(x[:, 0], x[:, 1], method).p_value)
    for method, values in p.items():
        assert 0.02 <= np.mean(np.array(values) < 0.05) <= 0.09, method
    # And the power against a real difference (0.15 per period) is high.
    x = correlated_normals(rng, 500, (0.2, 0.05), 0.5)
    assert sharpe_difference_test(x[:, 0], x[:, 1]).p_value < 0.01


def test_sharpe_difference_input_errors():
    a = pd.Series(np.random.default_rng(4).normal(0, 0.01, 100), index=pd.bdate_range("2020-01-01", periods=100))
    with pytest.raises(ValueError, match="same dates"):
        sharpe_difference_test(a, a.iloc[1:])
    with pytest.raises(ValueError, match="paired"):
        sharpe_difference_test(a.to_numpy(), a.to_numpy()[1:])
    with pytest.raises(ValueError, match="unknown method 'jk'"):
        sharpe_difference_test(a, a, "jk")
    with pytest.raises(ValueError, match="unknown kernel"):
        sharpe_difference_test(a, a, kernel="gauss")
    with pytest.raises(ValueError, match=r"returns_b: holds non-numbers \(str"):
        sharpe_difference_test(a, a.astype(str))


# ---------------------------------------------------------------------------- MinTRL
def test_min_track_record_length_is_where_the_psr_reaches_the_confidence():
    # Normal returns (skew 0, kurtosis 3), SR 0.1 a period against 0: 1 + (1 + 0.1^2/2) (1.6449 / 0.1)^2.
    z = stats.norm.ppf(0.95)
    assert min_track_record_from_moments(0.1, 0.0, 3.0) == pytest.approx(1 + 1.005 * (z / 0.1) ** 2, rel=1e-12)
    # PSR(n = MinTRL) = confidence, for non-normal moments and a benchmark too (the formula inverts the PSR).
    for sr, skew, kurt, bench, conf in ((0.1, -1.0, 6.0, 0.0, 0.95), (0.3, 0.5, 4.0, 0.1, 0.99)):
        n = min_track_record_from_moments(sr, skew, kurt, bench, conf)
        assert psr_from_moments(sr, n, skew, kurt, bench) == pytest.approx(conf, rel=1e-12)
    assert min_track_record_from_moments(0.05, 0.0, 3.0, benchmark_sharpe=0.05) == math.inf
    # From returns: a track record longer than its MinTRL has PSR above the confidence, and the other way round.
    rng = np.random.default_rng(5)
    r = rng.normal(0.001, 0.01, 1000)
    n = minimum_track_record_length(r)
    assert (n < len(r)) == (psr_from_moments(r.mean() / r.std(ddof=1), len(r), stats.skew(r),
                                             stats.kurtosis(r, fisher=False)) > 0.95)
    assert minimum_track_record_length(r, 1.0, periods_per_year=252) == pytest.approx(
        minimum_track_record_length(r, 1.0 / math.sqrt(252)), rel=1e-12)
    with pytest.raises(ValueError, match="excess kurtosis, add 3"):
        min_track_record_from_moments(0.1, 0.0, 0.0)
    with pytest.raises(ValueError, match="confidence must be in"):
        minimum_track_record_length(r, confidence=95)


# ---------------------------------------------------------------------------- Lo (2002)
def test_lo_scale_factor_matches_the_ar1_closed_form():
    """Lo (2002), AR(1) returns with ρ_k = φ^k: η(q) = q [q + 2φ/(1 - φ) (q - (1 - φ^q)/(1 - φ))]^(-1/2)."""
    for phi, q in ((0.3, 12), (-0.2, 12), (0.1, 252)):
        closed = q / math.sqrt(q + 2 * phi / (1 - phi) * (q - (1 - phi**q) / (1 - phi)))
        assert lo_scale_factor(q, phi ** np.arange(1, q)) == pytest.approx(closed, rel=1e-12)
    assert lo_scale_factor(12, []) == pytest.approx(math.sqrt(12), rel=1e-15)  # IID: the usual sqrt(q)


def test_lo_sharpe_ratio_is_the_sharpe_ratio_of_aggregated_returns():
    """Monthly AR(1) returns with φ = 0.4 (smoothed, like an illiquid fund's): the Sharpe ratio of
    the yearly sums is what Lo's η(12) gives, well below sqrt(12) x the monthly one."""
    rng = np.random.default_rng(6)
    phi, T = 0.4, 120_000
    e = rng.normal(0.0, 1.0, T)
    r = np.empty(T)
    r[0] = e[0]
    for t in range(1, T):
        r[t] = phi * r[t - 1] + e[t]
    r += 0.1
    yearly = r.reshape(-1, 12).sum(axis=1)
    target = yearly.mean() / yearly.std(ddof=1)
    naive = math.sqrt(12) * r.mean() / r.std(ddof=1)
    lo = lo_sharpe_ratio(r, 12, max_lag=11)  # Lo's full sum of 11 lags
    assert lo == pytest.approx(target, rel=0.03)
    assert naive > 1.2 * target
    assert lo_sharpe_ratio(r, 12) == pytest.approx(lo, rel=0.02)  # the default truncation keeps the lags that matter
    with pytest.raises(ValueError, match="periods_per_year must be a whole number"):
        lo_sharpe_ratio(r, 12.5)


# ---------------------------------------------------------------------------- Reality Check, SPA, StepM
def spa_data(rng: np.random.Generator, T: int = 500, edge: float = 0.0) -> tuple[pd.DataFrame, pd.Series]:
    """A benchmark and 5 strategies that track it with noise; the last has ``edge`` more mean return a day."""
    dates = pd.bdate_range("2019-01-01", periods=T)
    bench = pd.Series(rng.normal(3e-4, 0.01, T), index=dates)
    noise = rng.normal(0.0, 0.005, (T, 5)) + np.array([-2e-4, -1e-4, 0.0, 0.0, edge])
    return pd.DataFrame(bench.to_numpy()[:, None] + noise, index=dates, columns=list("abcde")), bench


def test_spa_finds_a_real_edge_and_not_noise():
    rng = np.random.default_rng(7)
    strategies, bench = spa_data(rng, edge=1.5e-3)  # 0.15% a day over the benchmark, noise 0.5%
    out = spa_test(strategies, bench, reps=300, seed=0)
    assert out.best == "e" and out.superior == ["e"]
    assert out.pvalue < 0.01 and out.reality_check_pvalue < 0.01
    assert out.mean_excess.idxmax() == "e"
    strategies, bench = spa_data(rng)  # no strategy has an edge
    out = spa_test(strategies, bench, reps=300, seed=0)
    assert out.pvalue > 0.05 and out.superior == []
    assert out.pvalue_lower <= out.pvalue <= out.pvalue_upper
    # Seeded: the same seed gives the same p-values.
    assert spa_test(strategies, bench, reps=300, seed=0).pvalue == out.pvalue


def test_spa_studentises_what_arch_leaves_raw():
    """arch's SPA(studentize=True) returns the p-values of the raw differentials; spa_test divides
    by ω^_k first (Hansen 2005). A strategy with the most mean excess but 4x the noise is not the
    studentised best, and the SPA (studentised) is far more certain than the Reality Check (raw)."""
    from arch.bootstrap import SPA

    rng = np.random.default_rng(8)
    T = 600
    bench = pd.Series(rng.normal(0, 0.01, T), index=pd.bdate_range("2020-01-01", periods=T))
    noise = rng.normal(0, 1.0, (T, 2)) * np.array([5e-4, 0.04]) + np.array([2e-4, 3e-3])  # t-stats about 10 and 2
    strategies = pd.DataFrame(bench.to_numpy()[:, None] + noise, index=bench.index, columns=["steady", "wild"])
    out = spa_test(strategies, bench, block_length=5, reps=500, seed=1)
    assert out.mean_excess.idxmax() == "wild" and out.best == "steady"
    d = strategies.to_numpy() - bench.to_numpy()[:, None]
    raw = SPA(np.zeros(T), -d, block_size=5, reps=500, seed=1)
    raw.compute()
    assert out.reality_check_pvalue == raw.pvalues["upper"]
    assert out.pvalue < 0.01 < out.reality_check_pvalue
    # Hansen's ω^2 is arch's own variance estimator.
    arch_var = SPA(np.zeros(T), -d, block_size=5)
    arch_var._compute_variance()
    np.testing.assert_allclose(stationary_bootstrap_variance(d, 5), arch_var._loss_diff_var, rtol=1e-10)


def several_winners(seed: int, T: int = 1000) -> tuple[pd.DataFrame, pd.Series]:
    """Three strategies 0.04% a day over the benchmark (noise 0.3%) and one with no edge (noise 2%)."""
    rng = np.random.default_rng(seed)
    bench = rng.normal(4e-4, 0.01, T)
    strategies = pd.DataFrame({f"good{k}": bench + rng.normal(4e-4, 0.003, T) for k in range(3)})
    strategies["noisy"] = bench + rng.normal(0.0, 0.02, T)
    return strategies, pd.Series(bench)


def test_spa_and_stepm_survive_several_winners():
    """Issue 34: arch 8's StepM.compute raised ``zero-size array to reduction operation maximum``
    once a step rejected every model left (seed 4 below: the goods, then the noisy one at t = 1.7),
    and the SPA p-value went with it. ``step_down`` stops there; elsewhere it is arch's StepM."""
    from arch.bootstrap import SPA, StepM

    everything = []
    for seed in range(6):
        strategies, bench = several_winners(seed)
        out = spa_test(strategies, bench, block_length=3, reps=200, seed=0)
        assert out.pvalue < 0.01 and out.best.startswith("good")
        assert len([name for name in out.superior if name.startswith("good")]) >= 2
        d = strategies.to_numpy() - bench.to_numpy()[:, None]
        losses = -d / np.sqrt(stationary_bootstrap_variance(d, 3))
        options = dict(block_size=3, reps=200, bootstrap="stationary")
        found = step_down(SPA(np.zeros(len(d)), losses, seed=0, **options), 0.05)
        assert [strategies.columns[i] for i in found] == out.superior
        stepm = StepM(np.zeros(len(d)), losses, size=0.05, seed=0, **options)
        try:
            stepm.compute()
        except ValueError:  # arch's bug: only where every model is rejected
            assert len(found) == d.shape[1]
        else:
            assert list(stepm.superior_models) == found
        everything.append(len(found) == d.shape[1])
    assert any(everything), "the case arch fails on (every model rejected) must be among the seeds"


def test_spa_input_errors():
    rng = np.random.default_rng(9)
    strategies, bench = spa_data(rng, T=200)
    with pytest.raises(ValueError, match="same dates"):
        spa_test(strategies, bench.iloc[1:])
    with pytest.raises(ValueError, match=r"strategies \['b'\] have the same return as the benchmark"):
        spa_test(strategies.assign(b=bench), bench, reps=100)
    holes = strategies.copy()
    holes.iloc[3, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        spa_test(holes, bench)
    with pytest.raises(ValueError, match="unknown bootstrap"):
        spa_test(strategies, bench, bootstrap="iid")
    with pytest.raises(ValueError, match="too few to bootstrap"):
        spa_test(strategies.iloc[:20], bench.iloc[:20])
    with pytest.raises(ValueError, match=r"strategies: 1 column\(s\) hold non-numbers: \['name'\]"):
        spa_test(strategies.assign(name="x"), bench)
