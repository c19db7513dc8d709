"""Is a strategy better than another, or than a benchmark? Tests that compare strategies.

``BacktestResult.metrics()`` describes one strategy; these say whether a difference between
strategies is more than the luck of one sample path. Each is written from its paper, or wraps the
``arch`` package where it has the procedure:

- ``sharpe_difference_test``: H0 SR_a = SR_b for two return series on the same dates. Method
  ``"hac"``: Ledoit & Wolf (2008), "Robust performance hypothesis testing with the Sharpe ratio",
  J. of Empirical Finance 15(5), delta method with a kernel (HAC) covariance, valid for fat tails
  and autocorrelation. Method ``"memmel"``: Jobson & Korkie (1981) with Memmel's (2003)
  correction, "Performance hypothesis testing with the Sharpe ratio", Finance Letters 1, a closed
  form for IID normal returns.
- ``minimum_track_record_length`` (MinTRL): Bailey & López de Prado (2012), "The Sharpe Ratio
  Efficient Frontier", J. of Risk 15(2): how many returns a track record needs before its Sharpe
  ratio is above a benchmark at a given confidence.
- ``lo_sharpe_ratio``: Lo (2002), "The Statistics of Sharpe Ratios", Financial Analysts Journal
  58(4): annualise a per-period Sharpe ratio with its autocorrelations, not with sqrt(q).
- ``spa_test``: the best of N strategies against a benchmark, corrected for having looked at N:
  White's (2000) Reality Check, "A Reality Check for Data Snooping", Econometrica 68(5), and
  Hansen's (2005) test for Superior Predictive Ability, J. of Business & Economic Statistics
  23(4), with Romano & Wolf's (2005) StepM, Econometrica 73(4), for which strategies beat it;
  the bootstraps and recentring are ``arch.bootstrap.SPA`` and ``StepM``.

Sharpe ratios inside the formulas are per period (mean / std with ddof=1 of per-period returns,
as ``finance.overfitting.sharpe_ratio``); ``periods_per_year`` only annualises what is reported.
Pass excess returns (returns minus the risk-free rate) to test excess-return Sharpe ratios.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from finance.data.checks import check_numeric
from finance.overfitting import _check_returns, _per_period, _warn_if_annualised

SHARPE_DIFFERENCE_METHODS = ("hac", "memmel")
HAC_KERNELS = ("qs", "parzen", "bartlett")  # arch.covariance.kernel: QuadraticSpectral, Parzen, Bartlett
SPA_BOOTSTRAPS = ("stationary", "circular", "moving block")
SPA_MIN_DATES = 60  # a few dozen bootstrap blocks at the least; a useful test needs hundreds of dates


# ---------------------------------------------------------------------------- inputs
def _paired_returns(returns_a: Any, returns_b: Any) -> tuple[np.ndarray, np.ndarray]:
    """Two return series on the same dates as float arrays, or an error naming the mismatch."""
    if isinstance(returns_a, pd.Series) and isinstance(returns_b, pd.Series):
        if not returns_a.index.equals(returns_b.index):
            both = returns_a.index.intersection(returns_b.index)
            raise ValueError(f"returns_a and returns_b must be on the same dates: {len(returns_a)} and "
                             f"{len(returns_b)} dates, {len(both)} shared; align them first (pd.concat([a, b], axis=1).dropna())")
    a = _check_returns(check_numeric(returns_a, "returns_a"), "returns_a")
    b = _check_returns(check_numeric(returns_b, "returns_b"), "returns_b")
    if len(a) != len(b):
        raise ValueError(f"returns_a and returns_b must be paired, one return of each per date; got {len(a)} and "
                         f"{len(b)} returns")
    return a, b


# ---------------------------------------------------------------------------- Sharpe difference
class SharpeDifference(NamedTuple):
    """The test of H0: SR_a = SR_b. Sharpe ratios, their difference and its standard error are
    per period, or annualised when ``periods_per_year`` was given; ``z`` and the two-sided
    ``p_value`` do not depend on the units."""

    sharpe_a: float
    sharpe_b: float
    difference: float
    std_error: float
    z: float
    p_value: float
    method: str


def sharpe_difference_test(returns_a: pd.Series | np.ndarray, returns_b: pd.Series | np.ndarray,
                           method: str = "hac", periods_per_year: float | None = None, kernel: str = "qs",
                           bandwidth: float | None = None) -> SharpeDifference:
    """Test H0: SR_a = SR_b for two strategies' returns on the same dates (two-sided).

    Δ^ = SR^_a - SR^_b, z = Δ^ / se(Δ^), p = 2 (1 - Z(|z|)), Z the standard normal CDF.

    ``method="hac"`` (default), Ledoit & Wolf (2008), HAC inference: with v = (μ_a, μ_b, γ_a, γ_b)
    the means and uncentred second moments, Δ = f(v) = μ_a / sqrt(γ_a - μ_a^2) - μ_b / sqrt(γ_b - μ_b^2),
    and by the delta method se(Δ^)^2 = ∇f(v^)' Ψ^ ∇f(v^) / T, where Ψ^ is a kernel (HAC) estimate
    of the long-run covariance of y_t = (r_at - μ^_a, r_bt - μ^_b, r_at^2 - γ^_a, r_bt^2 - γ^_b):
    valid under fat tails, volatility clustering and autocorrelation. The kernel is ``arch``'s
    (``"qs"``: Quadratic Spectral, as in the paper; ``"parzen"``, ``"bartlett"``) with its
    automatic bandwidth unless ``bandwidth`` is given (0: no autocorrelation, the IID case); the
    paper prewhitens first (Andrews & Monahan 1992), this does not. For a few hundred returns
    the paper prefers its studentised block bootstrap; the HAC test then rejects a little too often.

    ``method="memmel"``: Jobson & Korkie (1981) corrected by Memmel (2003), for IID normal returns:
    se(Δ^)^2 = [2 - 2ρ + (SR_a^2 + SR_b^2 - 2 SR_a SR_b ρ^2) / 2] / T, ρ the correlation of the two
    return series. Exact in its assumptions, overconfident for fat-tailed or autocorrelated returns.

    Args:
        returns_a, returns_b: per-period (excess) returns, paired by date, no NaN.
        method: ``"hac"`` or ``"memmel"``.
        periods_per_year: annualise the reported Sharpe ratios, difference and standard error
            by sqrt(periods_per_year); None reports them per period.
        kernel, bandwidth: the HAC estimate's kernel and bandwidth (lags); ignored by ``"memmel"``.
    """
    from scipy import stats  # on use: keeps `import finance` light
    if method not in SHARPE_DIFFERENCE_METHODS:
        raise ValueError(f"unknown method {method!r}; use 'hac' (Ledoit & Wolf 2008) or 'memmel' (Jobson & Korkie "
                         "with Memmel's correction)")
    a, b = _paired_returns(returns_a, returns_b)
    T = len(a)
    sr_a, sr_b = a.mean() / a.std(ddof=1), b.mean() / b.std(ddof=1)
    if method == "memmel":
        rho = float(np.corrcoef(a, b)[0, 1])
        var = (2.0 - 2.0 * rho + 0.5 * (sr_a**2 + sr_b**2 - 2.0 * sr_a * sr_b * rho**2)) / T
    else:
        var = _ledoit_wolf_variance(a, b, kernel, bandwidth)
    se = math.sqrt(max(var, 0.0))
    diff = sr_a - sr_b
    z = diff / se if se > 0 else (0.0 if diff == 0 else math.copysign(math.inf, diff))
    scale = 1.0 / _per_period(1.0, periods_per_year, "the Sharpe ratios")  # sqrt(periods_per_year), or 1
    return SharpeDifference(float(sr_a * scale), float(sr_b * scale), float(diff * scale), float(se * scale),
                            float(z), float(2.0 * stats.norm.sf(abs(z))), method)


def _ledoit_wolf_variance(a: np.ndarray, b: np.ndarray, kernel: str, bandwidth: float | None) -> float:
    """∇f' Ψ^ ∇f / T of Ledoit & Wolf (2008), with σ the ddof=1 standard deviations."""
    from arch.covariance.kernel import Bartlett, Parzen, QuadraticSpectral

    kernels = {"qs": QuadraticSpectral, "parzen": Parzen, "bartlett": Bartlett}
    if kernel not in kernels:
        raise ValueError(f"unknown kernel {kernel!r}; use one of {HAC_KERNELS}")
    if bandwidth is not None and not (bandwidth >= 0 and math.isfinite(bandwidth)):
        raise ValueError(f"bandwidth must be a number of lags >= 0 (None: arch's automatic choice), got {bandwidth}")
    mu_a, mu_b = a.mean(), b.mean()
    s_a, s_b = a.std(ddof=1), b.std(ddof=1)
    y = np.column_stack([a - mu_a, b - mu_b, a**2 - (a**2).mean(), b**2 - (b**2).mean()])
    psi = long_run_covariance(y, kernels[kernel](y, bandwidth=bandwidth).kernel_weights)
    # ∂f/∂(μ_a, μ_b, γ_a, γ_b), with γ - μ^2 = σ^2
    grad = np.array([(s_a**2 + mu_a**2) / s_a**3, -(s_b**2 + mu_b**2) / s_b**3,
                     -mu_a / (2 * s_a**3), mu_b / (2 * s_b**3)])
    return float(grad @ psi @ grad / len(a))


def long_run_covariance(y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Ψ^ = Γ^_0 + Σ_{h>=1} w_h (Γ^_h + Γ^_h'), Γ^_h = Σ_t y_{t+h} y_t' / T of the centred rows of ``y``.

    What ``arch.covariance.kernel``'s ``.cov.long_run`` computes from its kernel ``weights`` (w_0 =
    1, w_1, ...), here with every lag's Γ^_h from one FFT: arch's loop over lags is compiled by
    numba on first use, which takes seconds.
    """
    x = y - y.mean(axis=0)
    T = len(x)
    H = min(len(weights), T)
    n = 1 << (2 * T - 1).bit_length()  # zero-padded: linear, not circular, cross-covariances
    f = np.fft.rfft(x, n, axis=0)  # (n/2 + 1, k)
    gamma = np.fft.irfft(f[:, :, None] * f.conj()[:, None, :], n, axis=0)[:H] / T  # (H, k, k): Γ^_h[i, j]
    lagged = np.tensordot(np.asarray(weights[1:H], dtype=np.float64), gamma[1:], axes=1)
    return gamma[0] + lagged + lagged.T


# ---------------------------------------------------------------------------- MinTRL
def min_track_record_from_moments(sharpe: float, skew: float, kurtosis: float, benchmark_sharpe: float = 0.0,
                                  confidence: float = 0.95) -> float:
    """MinTRL from summary statistics, all per period: the number of returns n at which the PSR
    of an observed Sharpe ratio ``sharpe`` against ``benchmark_sharpe`` reaches ``confidence``.

    Bailey & López de Prado (2012), the minimum track record length:
    MinTRL = 1 + [1 - γ3 SR^ + (γ4 - 1)/4 SR^2] (Z^-1[c] / (SR^ - SR*))^2,
    γ3 the skewness, γ4 the (Pearson, not excess) kurtosis, c the confidence. Infinite when
    SR^ <= SR*: no track record that keeps these statistics ever shows SR > SR*.
    """
    from scipy import stats  # on use: keeps `import finance` light
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), 0.95 for 95%, got {confidence}")
    if kurtosis < 1.0:
        raise ValueError(f"kurtosis must be the plain (Pearson) kurtosis, 3 for normal returns, got {kurtosis}; if you "
                         "have excess kurtosis, add 3")
    if sharpe <= benchmark_sharpe:
        return math.inf
    var = 1.0 - skew * sharpe + (kurtosis - 1.0) / 4.0 * sharpe**2
    return float(1.0 + var * (stats.norm.ppf(confidence) / (sharpe - benchmark_sharpe)) ** 2)


def minimum_track_record_length(returns: pd.Series | np.ndarray, benchmark_sharpe: float = 0.0,
                                confidence: float = 0.95, periods_per_year: float | None = None) -> float:
    """How many returns a track record with these statistics needs before the PSR says its true
    Sharpe ratio is above ``benchmark_sharpe`` with probability ``confidence`` (MinTRL).

    Bailey & López de Prado (2012): see ``min_track_record_from_moments`` for the formula; SR^,
    γ3 and γ4 are the sample Sharpe ratio (ddof=1), skewness and kurtosis of ``returns``, as in
    ``finance.overfitting.probabilistic_sharpe_ratio``. Compare the answer with ``len(returns)``:
    shorter, and the PSR is already above ``confidence``. In periods (bars); divide by
    ``periods_per_year`` for years. Infinite when the observed Sharpe ratio is not above the
    benchmark.

    Args:
        returns: per-period (excess) returns of one strategy, no NaN.
        benchmark_sharpe: SR*, per period, or annualised when ``periods_per_year`` is given.
        confidence: c, e.g. 0.95.
        periods_per_year: bars per year when ``benchmark_sharpe`` is annualised.
    """
    from scipy import stats  # on use: keeps `import finance` light
    r = _check_returns(check_numeric(returns, "returns"))
    sr = r.mean() / r.std(ddof=1)
    benchmark = _per_period(benchmark_sharpe, periods_per_year, "benchmark_sharpe")
    if periods_per_year is None:  # as probabilistic_sharpe_ratio: an annualised SR* would give inf without a word
        _warn_if_annualised(benchmark, sr, "benchmark_sharpe")
    return min_track_record_from_moments(sr, float(stats.skew(r)), float(stats.kurtosis(r, fisher=False)), benchmark,
                                         confidence)


# ---------------------------------------------------------------------------- Lo (2002)
def lo_scale_factor(q: int, autocorrelations: np.ndarray | list[float]) -> float:
    """η(q) of Lo (2002): SR(q) = η(q) SR for returns aggregated over q periods.

    η(q) = q / sqrt(q + 2 Σ_{k=1}^{q-1} (q - k) ρ_k), ρ_k the lag-k autocorrelation of the
    per-period returns; ``autocorrelations`` holds ρ_1, ρ_2, ... (missing lags count as 0). IID
    returns give sqrt(q), the usual annualisation; positive autocorrelation (smoothed, illiquid
    returns) gives less.
    """
    q = int(q)
    if q < 1:
        raise ValueError(f"q must be a whole number of periods >= 1 (periods per year to annualise), got {q}")
    rho = np.zeros(q - 1)
    given = np.asarray(autocorrelations, dtype=np.float64).ravel()[: q - 1]
    rho[: len(given)] = given
    k = np.arange(1, q)
    inner = q + 2.0 * float(np.sum((q - k) * rho))
    if inner <= 0:
        raise ValueError(f"the autocorrelations make the variance of the {q}-period return non-positive ({inner:.3g}); "
                         "they are estimated from too few returns: pass a smaller max_lag")
    return q / math.sqrt(inner)


def autocorrelations(returns: np.ndarray, max_lag: int) -> np.ndarray:
    """Sample autocorrelations ρ^_1 .. ρ^_max_lag: Σ_t (r_t - r̄)(r_{t-k} - r̄) / Σ_t (r_t - r̄)^2."""
    x = returns - returns.mean()
    denom = float(x @ x)
    return np.array([float(x[k:] @ x[:-k]) / denom for k in range(1, max_lag + 1)])


def lo_sharpe_ratio(returns: pd.Series | np.ndarray, periods_per_year: int, max_lag: int | None = None) -> float:
    """The Sharpe ratio annualised for autocorrelation: η(q) SR^ with q = ``periods_per_year``.

    Lo (2002), "The Statistics of Sharpe Ratios": returns aggregated over q
    periods have the Sharpe ratio η(q) SR (``lo_scale_factor``), not sqrt(q) SR, when they are
    autocorrelated; SR^ = mean / std (ddof=1) per period, ρ_k their sample autocorrelations.

    Lo sums all q - 1 lags (monthly to annual: 11). With daily returns that is 251 sample
    autocorrelations, mostly noise of about 1/sqrt(T) each, so by default only the first
    ``max_lag`` = floor(4 (T/100)^(2/9)) are used (Newey & West's 1994 rule of thumb: 6 for
    1,000 returns) and the rest count as 0; ``max_lag=periods_per_year - 1`` is Lo's full sum.
    """
    r = _check_returns(check_numeric(returns, "returns"))
    q = int(periods_per_year)
    if q != periods_per_year or q < 1:
        raise ValueError(f"periods_per_year must be a whole number >= 1 (12 for monthly returns, 252 daily), got "
                         f"{periods_per_year!r}")
    lags = min(q - 1, int(4 * (len(r) / 100) ** (2 / 9))) if max_lag is None else int(max_lag)
    if not 0 <= lags < len(r) - 1:
        raise ValueError(f"max_lag must be between 0 and {len(r) - 2} for {len(r)} returns, got {max_lag}")
    rho = autocorrelations(r, lags) if lags else np.zeros(0)
    return float(lo_scale_factor(q, rho) * r.mean() / r.std(ddof=1))


# ---------------------------------------------------------------------------- best of N: Reality Check, SPA, StepM
@dataclasses.dataclass(frozen=True)
class SPAResult:
    """The best of N strategies against one benchmark, by mean per-period return.

    Attributes:
        pvalue: Hansen's (2005) SPA p-value (studentised, consistent recentring) of H0: no
            strategy's expected return exceeds the benchmark's. Small: the best is really better.
        pvalue_lower, pvalue_upper: Hansen's bounds on it (recentring every strategy that did
            worse than the benchmark / none).
        reality_check_pvalue: White's (2000) Reality Check, not studentised and not recentred:
            conservative when poor strategies are in the set.
        best: the strategy with the largest studentised mean excess return over the benchmark.
        superior: the strategies StepM (Romano & Wolf 2005) finds better than the benchmark
            with family-wise error ``size``; empty when none is.
        mean_excess: per-period mean return over the benchmark, by strategy.
        block_length, reps, size: the bootstrap's mean block length and resamples, StepM's size.
    """

    pvalue: float
    pvalue_lower: float
    pvalue_upper: float
    reality_check_pvalue: float
    best: str
    superior: list[str]
    mean_excess: pd.Series
    block_length: int
    reps: int
    size: float

    def __repr__(self) -> str:
        return (f"SPAResult(pvalue={self.pvalue:.3f}, reality_check_pvalue={self.reality_check_pvalue:.3f}, "
                f"best={self.best!r}, superior={self.superior}, strategies={len(self.mean_excess)}, "
                f"block_length={self.block_length}, reps={self.reps})")


def stationary_bootstrap_variance(d: np.ndarray, block_length: float) -> np.ndarray:
    """ω^_k^2 of Hansen (2005): the variance of sqrt(T) d̄_k under the stationary bootstrap,
    ω^^2 = γ^_0 + 2 Σ_{i=1}^{T-1} κ(T, i) γ^_i, κ(T, i) = (1 - i/T)(1 - p)^i + (i/T)(1 - p)^(T-i),
    p = 1 / block_length, γ^_i the lag-i autocovariances (divided by T) of each column of ``d``."""
    T = len(d)
    x = d - d.mean(axis=0)
    n = 1 << (2 * T - 1).bit_length()  # zero-padded FFT: linear, not circular, autocovariances
    spectrum = np.fft.rfft(x, n, axis=0)
    acov = np.fft.irfft(spectrum * spectrum.conj(), n, axis=0)[:T] / T  # γ^_0 .. γ^_{T-1}
    i = np.arange(1, T)
    p = 1.0 / block_length
    kappa = (1 - i / T) * (1 - p) ** i + (i / T) * (1 - p) ** (T - i)
    return acov[0] + 2.0 * (kappa[:, None] * acov[1:]).sum(axis=0)


def spa_test(strategies: pd.DataFrame, benchmark: pd.Series, block_length: int | None = None, reps: int = 1_000,
             bootstrap: str = "stationary", size: float = 0.05, seed: int | None = 0) -> SPAResult:
    """Is the best of N strategies better than the benchmark, once the search over N is counted?

    With d_kt = r_kt - r_bt the strategies' returns over the benchmark's, White's (2000) Reality
    Check tests H0: max_k E[d_k] <= 0 with the statistic max_k sqrt(T) d̄_k, its null distribution
    from block-bootstrap resamples of d recentred on d̄. Hansen's (2005) SPA studentises,
    T_SPA = max(max_k sqrt(T) d̄_k / ω^_k, 0), and recentres only strategies that are not clearly
    worse than the benchmark (d̄_k >= -sqrt(ω^_k^2 / T · 2 log log T)), so that bad strategies in
    the set no longer dilute the test. StepM (Romano & Wolf 2005) then names the strategies
    better than the benchmark, controlling the family-wise error rate at ``size``.

    The bootstrap and recentring are ``arch.bootstrap.SPA``; StepM is ``step_down``, arch's
    ``StepM`` loop over that SPA, which stops once every model is rejected (arch 8's raises there). arch's
    ``studentize=True`` does not divide by ω^_k (arch 7 and 8), so the differentials are divided
    by ω^_k here (``stationary_bootstrap_variance``, Hansen's estimator, arch's own) before
    they go in: the max over k of d̄_k / ω^_k is Hansen's statistic, and for the Reality Check the
    raw differentials go in as they are. arch compares the resampled maxima with max_k of the
    studentised d̄_k without Hansen's floor at 0; the two differ only when every strategy's mean is
    below the benchmark's, and then arch's p-value is the larger (the more conservative).

    The criterion is the mean return (White's and Hansen's loss is -return); pass excess returns,
    or any per-period performance series, to compare something else.

    Args:
        strategies: dates x strategies, per-period returns of every strategy tried (all of
            them, not only the best: the correction needs them), no NaN.
        benchmark: per-period returns of the benchmark on the same dates.
        block_length: mean block length of the bootstrap; None: ``arch.bootstrap.optimal_block_length``
            (Politis & White 2004) of the differentials, averaged, at least 1.
        reps: bootstrap resamples (1,000: p-values to about ±0.015).
        bootstrap: ``"stationary"`` (Politis & Romano 1994, the papers' choice), ``"circular"``
            or ``"moving block"``.
        size: StepM's family-wise error rate.
        seed: seeds the bootstrap (same seed, same p-values); None draws fresh randomness.
    """
    from arch.bootstrap import SPA, optimal_block_length

    frame, bench = _check_spa_inputs(strategies, benchmark)
    if bootstrap not in SPA_BOOTSTRAPS:
        raise ValueError(f"unknown bootstrap {bootstrap!r}; use one of {SPA_BOOTSTRAPS}")
    if isinstance(reps, bool) or not isinstance(reps, (int, np.integer)) or reps < 100:
        raise ValueError(f"reps must be a whole number >= 100 (1,000 is a good default), got {reps!r}")
    if not 0.0 < size < 1.0:
        raise ValueError(f"size must be in (0, 1), 0.05 for a 5% family-wise error rate, got {size}")
    d = frame.to_numpy() - bench[:, None]  # (T, N) returns over the benchmark's
    T = len(d)
    flat = [str(c) for c, spread in zip(frame.columns, np.ptp(d, axis=0)) if spread == 0]
    if flat:
        raise ValueError(f"strategies {flat[:8]} have the same return as the benchmark on every date (or the same plus "
                         "a constant): no variance to studentise by; leave them out")
    if block_length is None:
        block_length = max(1, round(float(optimal_block_length(d)["stationary"].mean())))
    if isinstance(block_length, bool) or not isinstance(block_length, (int, np.integer)) or not 1 <= block_length < T:
        raise ValueError(f"block_length must be a whole number of periods in [1, {T - 1}] (None: chosen from the "
                         f"data), got {block_length!r}")
    omega = np.sqrt(stationary_bootstrap_variance(d, block_length))
    zeros = np.zeros(T)  # the benchmark's loss after subtracting it: models' losses are then -d
    options = dict(block_size=int(block_length), reps=int(reps), bootstrap=bootstrap)
    spa = SPA(zeros, -d / omega, seed=seed, **options)
    spa.compute()
    rc = SPA(zeros, -d, seed=seed, **options)
    rc.compute()
    superior = step_down(SPA(zeros, -d / omega, seed=seed, **options), size)
    names = [str(c) for c in frame.columns]
    return SPAResult(pvalue=float(spa.pvalues["consistent"]), pvalue_lower=float(spa.pvalues["lower"]),
                     pvalue_upper=float(spa.pvalues["upper"]), reality_check_pvalue=float(rc.pvalues["upper"]),
                     best=names[int(np.argmax(d.mean(axis=0) / omega))],
                     superior=[names[i] for i in superior],
                     mean_excess=pd.Series(d.mean(axis=0), index=names, name="mean_excess"),
                     block_length=int(block_length), reps=int(reps), size=float(size))


def step_down(spa: Any, size: float) -> list[int]:
    """Romano and Wolf's (2005) StepM over an ``arch.bootstrap.SPA`` of the models' losses: the
    column indices of the models better than the benchmark at family-wise error rate ``size``.

    Step 1 rejects the models whose mean beats the SPA critical value of them all; each next step
    recomputes it over the models not yet rejected; it stops when a step rejects none, or none is
    left. arch's ``StepM.compute`` (arch 8) runs the same loop but tests "rejected this step < k"
    where it means "rejected so far < k", so once a later step rejects every model left it
    computes an SPA over no model and raises ``ValueError: zero-size array to reduction operation
    maximum``, losing the SPA p-value with it (issue 34). Same bootstrap, same answer otherwise."""
    k = spa.models.shape[1]
    spa.compute()
    rejected = [int(i) for i in spa.better_models(size)]
    found = rejected[:]
    while rejected and len(found) < k:
        selector = np.ones(k, dtype=bool)
        selector[found] = False
        spa.subset(selector)
        spa.compute()
        rejected = [int(i) for i in spa.better_models(size)]
        found.extend(rejected)
    spa.subset(np.ones(k, dtype=bool))
    return sorted(found)


def _check_spa_inputs(strategies: Any, benchmark: Any) -> tuple[pd.DataFrame, np.ndarray]:
    frame = strategies.to_frame() if isinstance(strategies, pd.Series) else strategies
    if not isinstance(frame, pd.DataFrame):
        frame = pd.DataFrame(np.asarray(strategies))
        if frame.ndim != 2:
            raise ValueError("strategies must be a dates x strategies frame of per-period returns")
    values = check_numeric(frame, "strategies")
    if isinstance(benchmark, pd.Series) and isinstance(strategies, (pd.DataFrame, pd.Series)):
        if not benchmark.index.equals(frame.index):
            raise ValueError(f"benchmark and strategies must be on the same dates: {len(benchmark)} and {len(frame)} "
                             "dates; align them first (strategies.join(benchmark, how='inner'))")
    bench = check_numeric(benchmark, "benchmark")
    if bench.ndim != 1 or len(bench) != len(frame):
        raise ValueError(f"benchmark must be one series of {len(frame)} per-period returns, one per date of "
                         f"strategies, got shape {bench.shape}")
    bad = ~np.isfinite(values)
    if bad.any() or not np.isfinite(bench).all():
        raise ValueError("strategies or benchmark hold NaN or infinite returns; drop those dates (dropna()) or fill "
                         "days without a position with 0.0")
    if len(frame) < SPA_MIN_DATES:
        raise ValueError(f"{len(frame)} dates are too few to bootstrap; pass at least {SPA_MIN_DATES} (hundreds for a "
                         "useful test)")
    return pd.DataFrame(values, index=frame.index, columns=frame.columns), bench

