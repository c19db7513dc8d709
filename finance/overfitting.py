"""Overfitting guards for choosing among many backtests: PSR, DSR and PBO.

A tournament, a hyperparameter sweep or a walk-forward search tries many strategies and keeps the
best. The best backtest then looks better than the strategy is. Three guards, from the papers:

- ``probabilistic_sharpe_ratio`` (PSR): Bailey & López de Prado (2012), "The Sharpe Ratio
  Efficient Frontier", J. of Risk 15(2). The probability that the true Sharpe ratio exceeds a
  benchmark, given the track length and the skewness and kurtosis of the returns.
- ``deflated_sharpe_ratio`` (DSR): Bailey & López de Prado (2014), "The Deflated Sharpe Ratio:
  Correcting for Selection Bias, Backtest Overfitting and Non-Normality", J. of Portfolio
  Management 40(5). The PSR against the Sharpe ratio the best of N skill-less trials would show.
- ``probability_of_backtest_overfitting`` (PBO): Bailey, Borwein, López de Prado & Zhu (2017),
  "The Probability of Backtest Overfitting", J. of Computational Finance 20(4). Combinatorially
  symmetric cross-validation (CSCV): how often the in-sample winner is below the out-of-sample
  median.

Trials of one lineage (tournament entries, neighbouring hyperparameters) are correlated, so their
count overstates the independent trials the DSR should deflate for: ``effective_trials`` estimates
the number from the trials' correlation matrix, and ``deflated_sharpe_ratio(num_trials="effective",
trial_returns=...)`` uses it.

Sharpe ratios inside the formulas are per period (per bar: daily for daily returns), never
annualised; ``periods_per_year`` only converts the Sharpe ratios you pass in or get back. A
per-period Sharpe ratio above ``PLAUSIBLE_PER_PERIOD_SHARPE`` that the data do not come near
warns: it is most likely an annualised one passed without ``periods_per_year``. No
maintained library we could install cheaply computes all three (skfolio has PSR and DSR but
brings scikit-learn and cvxpy; empyrical has neither), so they are written here from the papers
and tested against the DSR paper's worked example, closed forms and Monte-Carlo checks.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import warnings
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import pandas as pd

from finance.data.checks import check_numeric

EULER_GAMMA = float(np.euler_gamma)  # γ ≈ 0.5772, in the expected maximum of N normals (DSR paper)
MIN_OBSERVATIONS = 3  # skewness needs three returns; a useful PSR needs far more
# A per-period Sharpe ratio of 0.5 is 7.9 a year on daily bars, 1.7 on monthly ones: above it, and
# well above what the returns show, a Sharpe ratio was most likely annualised (see _warn_if_annualised).
PLAUSIBLE_PER_PERIOD_SHARPE = 0.5
EFFECTIVE_TRIALS_METHODS = ("eigenvalues", "correlation")


# ---------------------------------------------------------------------------- input checks
def _check_returns(returns: Any, what: str = "returns") -> np.ndarray:
    """A 1-D float array of returns without NaN, or an error saying what is wrong and the fix."""
    r = check_numeric(returns, what)
    if r.ndim != 1:
        raise ValueError(f"{what} must be one series of per-period returns, got shape {r.shape}; pass one column "
                         "(e.g. trial_returns[name])")
    bad = int((~np.isfinite(r)).sum())
    if bad:
        raise ValueError(f"{what} holds {bad} NaN or infinite value(s); drop the dates before the strategy "
                         "started (returns.dropna()) or fill days without a position with 0.0")
    if len(r) < MIN_OBSERVATIONS:
        raise ValueError(f"{what} has {len(r)} observation(s); the PSR needs at least {MIN_OBSERVATIONS} "
                         "(and is only meaningful with dozens): pass a longer series")
    if np.ptp(r) == 0.0:  # exact: the std of a constant 1e-4 is round-off (1e-20), not 0, and its "Sharpe" 1e15
        raise ValueError(f"{what} are constant ({r[0]:g} every period), so the Sharpe ratio is undefined; "
                         "a strategy that never trades has nothing to test (cash at a fixed rate: pass excess "
                         "returns, returns minus the risk-free rate)")
    return r


def _per_period(sharpe: float, periods_per_year: float | None, what: str) -> float:
    """A Sharpe ratio in the caller's units (annualised when ``periods_per_year`` is given) per period."""
    if periods_per_year is None:
        return float(sharpe)
    if not periods_per_year > 0:
        raise ValueError(f"periods_per_year must be positive (252 for daily bars), got {periods_per_year} "
                         f"(converting {what})")
    return float(sharpe) / math.sqrt(periods_per_year)


def _warn_if_annualised(sharpe: float, observed: float, what: str) -> None:
    """Warn when a per-period Sharpe ratio ``sharpe`` looks annualised: above
    ``PLAUSIBLE_PER_PERIOD_SHARPE`` and more than twice the ``observed`` per-period one."""
    if abs(sharpe) > PLAUSIBLE_PER_PERIOD_SHARPE and abs(sharpe) > 2.0 * abs(observed):
        warnings.warn(f"{what}={sharpe:g} is read per period (periods_per_year is None), {sharpe * math.sqrt(252):.1f} "
                      f"a year on daily bars, while the returns show {observed:.3g} per period; if it is annualised, "
                      f"pass periods_per_year (252 for daily bars)", UserWarning, stacklevel=3)


# ---------------------------------------------------------------------------- Sharpe ratio and PSR
def sharpe_ratio(returns: pd.Series | pd.DataFrame | np.ndarray,
                 periods_per_year: float | None = None) -> float | pd.Series:
    """Sharpe ratio mean / std (ddof=1) of per-period returns (no risk-free rate: pass excess returns).

    Per period when ``periods_per_year`` is None, else annualised by ``sqrt(periods_per_year)``:
    the same number as ``empyrical.sharpe_ratio(r, annualization=periods_per_year)`` and the
    ``sharpe`` of ``BacktestResult.metrics()``. A DataFrame (dates x trials) gives one per column,
    ready for ``deflated_sharpe_ratio(trial_sharpes=...)``.
    """
    scale = 1.0 / _per_period(1.0, periods_per_year, "the Sharpe ratio")  # sqrt(periods_per_year), or 1
    if isinstance(returns, pd.DataFrame):
        return pd.Series({name: sharpe_ratio(_check_returns(col, f"trial {name!r}"), periods_per_year)
                          for name, col in returns.items()}, name="sharpe", dtype=np.float64)
    r = _check_returns(returns)
    return float(r.mean() / r.std(ddof=1) * scale)


def psr_from_moments(sharpe: float, num_obs: int, skew: float, kurtosis: float,
                     benchmark_sharpe: float = 0.0) -> float:
    """PSR from summary statistics, all per period (not annualised).

    PSR(SR*) = Z[(SR^ - SR*) sqrt(n - 1) / sqrt(1 - γ3 SR^ + (γ4 - 1)/4 SR^2)], the PSR of
    Bailey & López de Prado (2012, Section 3), with Z the standard normal CDF. The denominator is
    the asymptotic standard deviation of the estimated Sharpe ratio for IID non-normal returns
    (Mertens 2002, used in Section 2 of the 2012 paper), scaled by sqrt(n - 1).

    Args:
        sharpe: SR^, the observed per-period Sharpe ratio.
        num_obs: n, the number of returns it was measured on.
        skew: γ3, skewness of the returns (0 for normal).
        kurtosis: γ4, kurtosis, NOT excess kurtosis (3 for normal).
        benchmark_sharpe: SR*, per period.
    """
    from scipy import stats  # on use: keeps `import finance` light
    if num_obs < 2:
        raise ValueError(f"num_obs must be at least 2, got {num_obs}")
    if kurtosis < 1.0:
        raise ValueError(f"kurtosis must be the plain (Pearson) kurtosis, 3 for normal returns, got {kurtosis}; "
                         "if you have excess kurtosis, add 3")
    var = 1.0 - skew * sharpe + (kurtosis - 1.0) / 4.0 * sharpe**2
    if var <= 0.0:  # impossible for moments of one sample: γ4 >= 1 + γ3^2 makes it a square
        raise ValueError(f"skew={skew} and kurtosis={kurtosis} are not the moments of one distribution "
                         f"(kurtosis >= 1 + skew^2 is required): the Sharpe ratio's variance comes out {var:.3g}")
    z = (sharpe - benchmark_sharpe) * math.sqrt(num_obs - 1) / math.sqrt(var)
    return float(stats.norm.cdf(z))


def probabilistic_sharpe_ratio(returns: pd.Series | np.ndarray, benchmark_sharpe: float = 0.0,
                               periods_per_year: float | None = None) -> float:
    """Probability that the true Sharpe ratio of ``returns`` exceeds ``benchmark_sharpe`` (PSR).

    Bailey & López de Prado (2012), "The Sharpe Ratio Efficient Frontier": see
    ``psr_from_moments`` for the formula. The observed Sharpe ratio, skewness γ3 and kurtosis γ4
    are the sample moments of ``returns`` (``scipy.stats.skew`` and ``kurtosis(fisher=False)``,
    the plain moment estimators: they keep the variance term positive), with n = len(returns).
    Returns are assumed IID; autocorrelated returns make the PSR overconfident.

    Units of ``benchmark_sharpe``: per period (a daily Sharpe ratio for daily returns) when
    ``periods_per_year`` is None; annualised when ``periods_per_year`` is given (e.g. 252 with
    ``benchmark_sharpe=1.0`` tests "annual Sharpe above 1"), converted to per period by
    dividing by ``sqrt(periods_per_year)``. The formula itself always works per period.

    Args:
        returns: per-period simple (or excess) returns of one strategy, no NaN.
        benchmark_sharpe: SR*, the Sharpe ratio to beat (0: "any skill at all").
        periods_per_year: bars per year when ``benchmark_sharpe`` is annualised.
    """
    r = _check_returns(returns)
    benchmark = _per_period(benchmark_sharpe, periods_per_year, "benchmark_sharpe")
    if periods_per_year is None:
        _warn_if_annualised(benchmark, r.mean() / r.std(ddof=1), "benchmark_sharpe")
    return _psr(r, benchmark)


def _psr(r: np.ndarray, benchmark_sharpe: float) -> float:
    """The PSR of checked returns ``r`` against a per-period ``benchmark_sharpe``."""
    from scipy import stats  # on use: keeps `import finance` light
    sr = r.mean() / r.std(ddof=1)
    return psr_from_moments(sr, len(r), float(stats.skew(r)), float(stats.kurtosis(r, fisher=False)),
                            benchmark_sharpe)


# ---------------------------------------------------------------------------- DSR
def expected_max_sharpe(num_trials: int, trials_sharpe_std: float) -> float:
    """SR0: the expected maximum Sharpe ratio of ``num_trials`` trials whose true Sharpe is zero.

    Bailey & López de Prado (2014), the DSR benchmark:
    SR0 = sqrt(V[{SR_n}]) ((1 - γ) Z^-1[1 - 1/N] + γ Z^-1[1 - 1/(N e)]), γ the Euler-Mascheroni
    constant: the expected maximum of N standard normals (extreme-value approximation, good for
    N >= 10, a few % high below), scaled by the spread of the trials' Sharpe ratios. One trial has
    nothing to select from: SR0 = 0. Same units as ``trials_sharpe_std``.
    """
    from scipy import stats  # on use: keeps `import finance` light
    if isinstance(num_trials, bool) or not float(num_trials).is_integer() or num_trials < 1:
        raise ValueError(f"num_trials must be a whole number >= 1 (every strategy tried, kept or not), "
                         f"got {num_trials!r}")
    if not (trials_sharpe_std >= 0.0 and math.isfinite(trials_sharpe_std)):
        raise ValueError(f"trials_sharpe_std must be a finite standard deviation >= 0, got {trials_sharpe_std}")
    n = int(num_trials)
    if n == 1:
        return 0.0
    z = (1 - EULER_GAMMA) * stats.norm.ppf(1 - 1 / n) + EULER_GAMMA * stats.norm.ppf(1 - 1 / (n * math.e))
    return float(trials_sharpe_std * z)


def effective_trials(trial_returns: pd.DataFrame | np.ndarray, method: str = "eigenvalues") -> float:
    """N_eff, the number of independent trials that ``trial_returns`` (dates x trials) are worth.

    Correlated trials (entries of one tournament lineage, neighbouring hyperparameters) are fewer
    independent draws than their count N; the DSR should deflate for the best of N_eff. From the
    correlation matrix C of the trials' returns:

    - ``"eigenvalues"`` (default): Galwey (2009), "A new measure of the effective number of
      tests, a practical tool for comparing families of non-independent significance tests",
      Genetic Epidemiology 33(7): N_eff = (Σ_i sqrt(λ_i))^2 / Σ_i λ_i, λ_i >= 0 the eigenvalues
      of C. Each cluster of near-identical trials counts about once (two independent clusters of
      ten copies: 2), N uncorrelated trials count N, and it moves smoothly with the correlations.
    - ``"correlation"``: Kish's (1965, "Survey Sampling") design effect,
      N_eff = N / (1 + (N - 1) ρ̄), ρ̄ the mean off-diagonal correlation: the number of
      independent trials whose mean is as noisy as the mean of N equicorrelated ones. Blind to
      clusters, and harsh on a common factor.

    Both give N when uncorrelated, 1 when identical; the result is clipped to [1, N]. A trial
    that never trades (constant returns) has no correlation with anything. Note that the DSR's
    spread of the trials' Sharpe ratios already shrinks by sqrt(1 - ρ) under a common factor, so
    N_eff matters most when trials come in clusters. Returns a float; ``deflated_sharpe_ratio``
    rounds it.
    """
    return _effective_trials(_check_trials(trial_returns, None), method)


def _effective_trials(frame: pd.DataFrame, method: str) -> float:
    if method not in EFFECTIVE_TRIALS_METHODS:
        raise ValueError(f"unknown method {method!r}; use one of {EFFECTIVE_TRIALS_METHODS}")
    x = frame.to_numpy(dtype=np.float64)
    N = x.shape[1]
    std = x.std(axis=0)
    z = np.divide(x - x.mean(axis=0), std, out=np.zeros_like(x), where=std > 0)
    corr = z.T @ z / len(x)
    np.fill_diagonal(corr, 1.0)  # a constant trial: correlation 1 with itself, 0 with the others
    if method == "correlation":
        mean_rho = (corr.sum() - N) / (N * (N - 1))
        n_eff = N / (1.0 + (N - 1) * mean_rho) if mean_rho > 0 else float(N)
    else:
        lam = np.clip(np.linalg.eigvalsh(corr), 0.0, None)  # round-off can make a zero eigenvalue -1e-17
        n_eff = float(np.sqrt(lam).sum() ** 2 / lam.sum())
    return float(np.clip(n_eff, 1.0, N))


def deflated_sharpe_ratio(returns: pd.Series | np.ndarray, num_trials: int | str | None = None,
                          trials_sharpe_std: float | None = None, *,
                          trial_sharpes: Sequence[float] | pd.Series | np.ndarray | None = None,
                          trial_returns: pd.DataFrame | None = None, effective_method: str = "eigenvalues",
                          periods_per_year: float | None = None) -> float:
    """Probability that the selected strategy's true Sharpe ratio is positive, after selection (DSR).

    Bailey & López de Prado (2014): DSR = PSR(SR0), the PSR of the selected strategy's
    ``returns`` against SR0 = ``expected_max_sharpe(N, std of the trials' Sharpe ratios)``, the
    Sharpe ratio the best of N skill-less trials is expected to show. DSR >= 0.95 is the paper's
    bar for a discovery at 95% confidence.

    Give the trials one of three ways:
        ``trial_sharpes``: the Sharpe ratios of every trial evaluated, not only the winner
            (``sharpe_ratio(trial_returns, periods_per_year)``); N = their count and the spread
            their sample std (ddof=1), unless ``num_trials`` overrides N (e.g. with an estimate
            of the number of *independent* trials, smaller when trials are correlated);
        ``trial_returns``: every trial's per-period returns (dates x trials); the Sharpe ratios
            are computed from them (a trial that never trades counts with Sharpe 0), and
            ``num_trials="effective"`` sets N to ``round(effective_trials(trial_returns,
            effective_method))``, the number of independent trials they are worth;
        ``num_trials`` and ``trials_sharpe_std``.

    Units: ``trial_sharpes`` and ``trials_sharpe_std`` are per period when ``periods_per_year``
    is None, annualised when it is given (divided by ``sqrt(periods_per_year)`` here), like the
    benchmark of ``probabilistic_sharpe_ratio``. ``returns`` are per-period returns either way.
    """
    r = _check_returns(returns)
    if num_trials == "effective" and trial_returns is None:
        raise ValueError("num_trials='effective' estimates the independent trials from their returns: pass "
                         "trial_returns (dates x trials) too")
    if trial_returns is not None:
        if trial_sharpes is not None or trials_sharpe_std is not None:
            raise ValueError("pass trial_returns, or trial_sharpes, or trials_sharpe_std, not several: each gives "
                             "the trials' Sharpe ratios")
        frame = _check_trials(trial_returns, None)
        varies = frame.max() > frame.min()  # a constant trial's std is round-off, not 0: Sharpe 0 (_check_distinct)
        trial_sharpes = (frame.mean() / frame.std(ddof=1).where(varies)).fillna(0.0).to_numpy()  # per period
        periods_per_year = None
        if num_trials == "effective":
            num_trials = max(1, round(_effective_trials(frame, effective_method)))
    elif isinstance(num_trials, str):
        raise ValueError(f"num_trials must be a whole number or 'effective' (with trial_returns), got {num_trials!r}")
    if trial_sharpes is not None:
        if trials_sharpe_std is not None:
            raise ValueError("pass either trial_sharpes or trials_sharpe_std, not both: the spread is computed from "
                             "trial_sharpes")
        s = np.asarray(trial_sharpes, dtype=np.float64).ravel()
        if len(s) < 2 or not np.isfinite(s).all():
            raise ValueError(f"trial_sharpes needs at least 2 finite Sharpe ratios (every trial tried), got "
                             f"{len(s)} with {int((~np.isfinite(s)).sum())} non-finite")
        if periods_per_year is None:
            _warn_if_annualised(float(np.median(np.abs(s))), r.mean() / r.std(ddof=1), "median |trial_sharpes|")
        trials_sharpe_std = float(s.std(ddof=1))
        num_trials = len(s) if num_trials is None else num_trials
    elif num_trials is None or trials_sharpe_std is None:
        raise ValueError("say how many trials were run and how spread their Sharpe ratios are: pass "
                         "trial_sharpes=sharpe_ratio(trial_returns), or num_trials=N and trials_sharpe_std=std")
    std = _per_period(trials_sharpe_std, periods_per_year, "trials_sharpe_std")
    if periods_per_year is None and trial_sharpes is None:
        _warn_if_annualised(std, r.mean() / r.std(ddof=1), "trials_sharpe_std")
    return _psr(r, expected_max_sharpe(num_trials, std))


# ---------------------------------------------------------------------------- PBO by CSCV
PBO_METRICS = ("sharpe", "mean")
MAX_COMBINATIONS = 200_000  # binom(20, 10) = 184,756; the paper's S = 16 gives 12,870


@dataclasses.dataclass(frozen=True)
class PBOResult:
    """CSCV over C = binom(S, S/2) ways to split the S date blocks into in-sample (IS) and
    out-of-sample (OOS) halves; arrays hold one value per split, in ``itertools.combinations`` order.

    Attributes:
        pbo: φ, the share of splits whose IS-best trial ranks at or below the OOS median
            (λ_c <= 0). Near 0: picking the in-sample winner works out of sample; near 0.5: the
            pick is a coin toss (no trial is really better; exactly (N + 1) / (2N) on average
            for an odd number N of trials, since the median rank counts); above 0.5: the pick
            is worse than a random trial out of sample.
        logits: (C,) λ_c = ln(ω_c / (1 - ω_c)), with ω_c = rank / (N + 1) the OOS relative rank
            of the IS-best trial among the N trials (rank 1 = worst).
        is_metric: (C,) R_n*, the IS metric of the trial picked in sample.
        oos_metric: (C,) R̄_n*, the same trial's OOS metric: plotted against ``is_metric`` it is the
            paper's performance degradation.
        selected: (C,) column label of the IS-best trial of each split.
        n_splits: S, the number of equal date blocks.
        metric: the metric's name.
    """

    pbo: float
    logits: np.ndarray
    is_metric: np.ndarray
    oos_metric: np.ndarray
    selected: np.ndarray
    n_splits: int
    metric: str

    @property
    def degradation_slope(self) -> float:
        """β of the least-squares fit R̄_n* = α + β R_n* + ε over the splits (the paper's
        performance degradation): below 0, a better in-sample result predicts a worse one out of
        sample. NaN when the IS metric does not vary."""
        x, y = self.is_metric, self.oos_metric
        ok = np.isfinite(x) & np.isfinite(y)
        if ok.sum() < 2 or np.ptp(x[ok]) == 0:
            return float("nan")
        return float(np.polyfit(x[ok], y[ok], 1)[0])

    @property
    def prob_oos_loss(self) -> float:
        """Share of splits where the IS-best trial loses out of sample (R̄_n* < 0): the paper's
        probability of loss."""
        return float(np.mean(self.oos_metric < 0))

    def to_frame(self) -> pd.DataFrame:
        """One row per split: ``selected``, ``is_metric``, ``oos_metric``, ``logit``."""
        return pd.DataFrame({"selected": self.selected, "is_metric": self.is_metric,
                             "oos_metric": self.oos_metric, "logit": self.logits})

    def __repr__(self) -> str:
        return (f"PBOResult(pbo={self.pbo:.3f}, splits={len(self.logits)} of S={self.n_splits} blocks, "
                f"metric={self.metric!r}, degradation_slope={self.degradation_slope:.3g}, "
                f"prob_oos_loss={self.prob_oos_loss:.3f})")


def _check_trials(trial_returns: Any, n_splits: int | None) -> pd.DataFrame:
    """The (dates x trials) returns as a float frame, or an error naming the problem and the fix.
    ``n_splits`` None skips the CSCV checks (``effective_trials``, the DSR)."""
    if isinstance(trial_returns, pd.Series) or (not isinstance(trial_returns, pd.DataFrame) and
                                                np.ndim(trial_returns) != 2):
        raise ValueError("trial_returns needs at least 2 trials (columns) to select among, got a 1-D series; pass a "
                         "DataFrame with one column of per-period returns per strategy tried (dates x trials)")
    frame = trial_returns if isinstance(trial_returns, pd.DataFrame) else pd.DataFrame(np.asarray(trial_returns))
    values = check_numeric(frame, "trial_returns")
    if frame.shape[1] < 2:
        raise ValueError(f"trial_returns needs at least 2 trials (columns) to select among, got {frame.shape[1]}; pass "
                         "a DataFrame with one column of per-period returns per strategy tried (dates x trials)")
    frame = pd.DataFrame(values, index=frame.index, columns=frame.columns)
    bad = ~np.isfinite(values)
    if bad.any():
        cols = [str(c) for c in frame.columns[bad.any(axis=0)]]
        raise ValueError(f"trial_returns holds {int(bad.sum())} NaN or infinite value(s) in trial(s) {cols[:8]}; CSCV "
                         "compares every trial on the same dates: drop the dates where a trial has no return "
                         "(trial_returns.dropna()) or fill days without a position with 0.0")
    _check_distinct(frame)
    if n_splits is None:
        return frame
    if isinstance(n_splits, bool) or not isinstance(n_splits, (int, np.integer)) or n_splits < 2 or n_splits % 2:
        hint = f"; pass {n_splits - 1} or {n_splits + 1}" if isinstance(n_splits, (int, np.integer)) and n_splits > 2 \
            else ""
        raise ValueError(f"n_splits must be an even whole number >= 2 (half the date blocks go in sample, half out; "
                         f"the paper uses 16), got {n_splits!r}{hint}")
    if math.comb(n_splits, n_splits // 2) > MAX_COMBINATIONS:
        raise ValueError(f"n_splits={n_splits} gives {math.comb(n_splits, n_splits // 2):,} splits, more than "
                         f"{MAX_COMBINATIONS:,}; pass n_splits=16 (12,870 splits) or fewer")
    if len(frame) < 2 * n_splits:
        fit = 2 * (len(frame) // 4)
        fix = f"pass n_splits={fit} or more dates" if fit >= 2 else "pass more dates"
        raise ValueError(f"trial_returns has {len(frame)} dates, too few for n_splits={n_splits}: each of the "
                         f"{n_splits} blocks needs at least 2 dates (dozens for a useful Sharpe ratio); {fix}")
    return frame


def _check_distinct(frame: pd.DataFrame) -> None:
    """Raise when fewer than 2 trials differ or every trial is flat; warn about exact duplicates.

    Identical trials tie on every split, and CSCV then reads each tie as the median: a PBO of
    1.0 that says nothing about overfitting. Duplicates also count twice in N."""
    values = np.ascontiguousarray(frame.to_numpy().T)  # one trial per row
    first: dict[bytes, int] = {}
    for i, trial in enumerate(values):
        first.setdefault(trial.tobytes(), i)  # the exact bytes: identical returns on every date
    if len(first) < 2:
        raise ValueError(f"trial_returns has {frame.shape[1]} trials but they are all identical (the same return on "
                         "every date); with nothing to choose between, PBO and DSR are meaningless. Pass the returns "
                         "of the different strategies tried (did every entry load the same checkpoint?)")
    if (np.ptp(values, axis=1) == 0).all():
        raise ValueError("every trial in trial_returns is constant (no trial ever varies: a strategy that never "
                         "trades); there is no Sharpe ratio to compare. Pass the returns of strategies that trade")
    fixed = [str(c) for c, trial in zip(frame.columns, values) if np.ptp(trial) == 0 and trial[0] != 0]
    if fixed:
        warnings.warn(f"trial_returns: trial(s) {fixed[:8]} earn the same non-zero return every period (cash at a "
                      "fixed rate?): a Sharpe ratio is undefined there and they count as Sharpe 0, as a flat trial "
                      "does; pass excess returns (minus the risk-free rate) so that cash is 0", UserWarning,
                      stacklevel=4)
    dropped = sorted(set(range(frame.shape[1])) - set(first.values()))
    if dropped:
        names = [str(frame.columns[i]) for i in dropped]
        warnings.warn(f"trial_returns: {len(dropped)} trial(s) {names[:8]} repeat another trial exactly; each copy "
                      f"counts as a trial (N = {frame.shape[1]}, {len(first)} distinct). Drop them "
                      "(trial_returns.T.drop_duplicates().T) if they are the same strategy run twice",
                      UserWarning, stacklevel=4)


def _moment_metrics(blocks: np.ndarray, train: np.ndarray, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """Sharpe ratio or mean of every trial on both halves of every split, from per-block sums.

    blocks: (S, B, N) returns; train: (C, S) 0/1, the IS blocks of each split. Returns two (C, N)
    arrays. The variance uses returns centred on each trial's full-sample mean (it is shift
    invariant), so the sums do not cancel catastrophically.
    """
    n = blocks.shape[1] * blocks.shape[0] // 2  # dates in each half
    total = blocks.sum(axis=1)  # (S, N)
    centred = blocks - blocks.mean(axis=(0, 1))
    c1, c2 = centred.sum(axis=1), (centred**2).sum(axis=1)  # (S, N)

    def half(w: np.ndarray) -> np.ndarray:
        mean = w @ total / n
        if metric == "mean":
            return mean
        s1, s2 = w @ c1, w @ c2
        std = np.sqrt(np.maximum(s2 - s1**2 / n, 0.0) / (n - 1))
        with np.errstate(divide="ignore", invalid="ignore"):
            sr = mean / std
        # A trial constant over the half (all cash) has no variance: Sharpe 0, not 0/0 or, when its
        # constant is not 0, mean / round-off (±inf or 1e15). No real strategy's std is 1e-9 of its mean.
        return np.where(std > 1e-9 * np.abs(mean), sr, 0.0)

    return half(train), half(1.0 - train)


def probability_of_backtest_overfitting(trial_returns: pd.DataFrame, n_splits: int = 16,
                                        metric: str | Callable[[np.ndarray], np.ndarray] = "sharpe",
                                        periods_per_year: float | None = None) -> PBOResult:
    """Probability that picking the best backtest in sample picks a below-median one out of sample.

    Combinatorially symmetric cross-validation (CSCV), Bailey, Borwein, López de Prado & Zhu
    (2017), the CSCV procedure, steps 1-5:
      1. M = ``trial_returns``, T dates x N trials, one column per strategy tried.
      2. Cut M by rows into S = ``n_splits`` blocks of equal length (the oldest T mod S dates
         are dropped so the blocks are equal).
      3. Form all C = binom(S, S/2) ways to choose S/2 blocks.
      4. For each: the chosen blocks (in time order) are the IS set J, the rest the OOS set J̄.
      5. Compute the metric of every trial on J (R) and on J̄ (R̄); take n* = argmax R; find the
         relative rank ω_c of R̄_n* among R̄ (rank / (N + 1), rank 1 = worst, ties averaged) and
         its logit λ_c = ln(ω_c / (1 - ω_c)).
    PBO φ = share of splits with λ_c <= 0, the paper's integral of the logit density up to 0.

    Args:
        trial_returns: (dates x trials) per-period returns of every trial on the same dates, no
            NaN; at least 2 trials and 2 dates per block (use dozens).
        n_splits: S, even; 16 in the paper (12,870 splits).
        metric: "sharpe" (mean / std; 0 for a trial flat over a half, e.g. all cash) or "mean"
            of the returns, or a function from a (dates x N) array to N scores (higher is better).
        periods_per_year: annualise the reported ``is_metric``/``oos_metric`` (Sharpe x sqrt,
            mean x periods_per_year); ranks, logits and the PBO do not depend on it.
    """
    frame = _check_trials(trial_returns, n_splits)
    if not callable(metric) and metric not in PBO_METRICS:
        raise ValueError(f"unknown metric {metric!r}; use one of {PBO_METRICS} or a function "
                         "(dates x N array) -> N scores")
    T, N = frame.shape
    B = T // n_splits
    blocks = frame.to_numpy(dtype=np.float64)[T - B * n_splits:].reshape(n_splits, B, N)  # step 2
    combos = np.array(list(itertools.combinations(range(n_splits), n_splits // 2)))  # step 3: (C, S/2)
    train = np.zeros((len(combos), n_splits))
    train[np.arange(len(combos))[:, None], combos] = 1.0

    if callable(metric):
        name = getattr(metric, "__name__", "custom")
        scores = [(np.asarray(metric(blocks[w == 1].reshape(-1, N)), np.float64),
                   np.asarray(metric(blocks[w == 0].reshape(-1, N)), np.float64)) for w in train]
        is_all, oos_all = (np.stack(s) for s in zip(*scores))
        if is_all.shape != (len(combos), N) or np.isnan(is_all).any() or np.isnan(oos_all).any():
            raise ValueError(f"metric {name!r} must return {N} non-NaN scores (one per trial) for a "
                             f"(dates x {N}) array; got shape {is_all.shape[1:]} or NaN")
    else:
        name = metric
        is_all, oos_all = _moment_metrics(blocks, train, metric)

    rows = np.arange(len(combos))
    best = is_all.argmax(axis=1)  # step 5: n*
    is_best, oos_best = is_all[rows, best], oos_all[rows, best]
    rank = (oos_all < oos_best[:, None]).sum(axis=1) + ((oos_all == oos_best[:, None]).sum(axis=1) + 1) / 2
    omega = rank / (N + 1)
    logits = np.log(omega / (1.0 - omega))
    scale = 1.0
    if periods_per_year is not None and not callable(metric):
        per_year = 1.0 / _per_period(1.0, periods_per_year, "the metric") ** 2  # periods_per_year, checked
        scale = math.sqrt(per_year) if metric == "sharpe" else per_year
    return PBOResult(pbo=float(np.mean(logits <= 0)), logits=logits, is_metric=is_best * scale,
                     oos_metric=oos_best * scale, selected=np.asarray(frame.columns)[best], n_splits=n_splits,
                     metric=name)


pbo = probability_of_backtest_overfitting  # short alias


# ---------------------------------------------------------------------------- tournament entries as trials
def trial_returns_from_leaderboard(board: Any, env: Any = None, entries: Sequence[Any] | None = None) -> pd.DataFrame:
    """Per-period returns of leaderboard entries: (periods x entry id).

    With ``env=None`` they are read from the board itself: the daily validation returns each entry's
    fitness kept (a tournament with ``fitness="windowed"``, ``finance.fitness``), nothing re-run; a
    board without them (another fitness, an older store) is an error that says to pass the env.
    With ``env`` each entry's checkpoint is loaded (verified) and backtested deterministically on it
    with ``finance.backtest`` (no baselines), indexed by date: pass the split to compare on, the one
    the tournament selected on (``market.env("valid")``) or the test split.

    On the split the tournament selected on, the frame is the trials matrix M of
    ``probability_of_backtest_overfitting`` and, through ``sharpe_ratio``, the ``trial_sharpes`` of
    ``deflated_sharpe_ratio``. Entries of one lineage are correlated trials: N overstates the
    number of independent ones.

    Args:
        board: a ``podracer.Leaderboard`` or its store directory.
        env: a ``StockTradingVecEnv`` (or ``MarketData.env(split)``) over the dates to compare on;
            ``None``: the validation returns stored in the board.
        entries: entry ids or ``Entry`` objects; default every entry not flagged corrupt.
    """
    from podracer.tournament import Leaderboard

    board = board if isinstance(board, Leaderboard) else Leaderboard(board)
    chosen = [e for e in board.entries() if not e.corrupt] if entries is None else \
        [board.get(getattr(e, "id", e)) for e in entries]
    if len(chosen) < 2:
        raise ValueError(f"{board!r} gives {len(chosen)} usable entr{'y' if len(chosen) == 1 else 'ies'}; overfitting "
                         "statistics compare at least 2 trials: run the tournament longer or pass more entries")
    if env is None:
        missing = [e.id for e in chosen if e.returns is None]
        if missing:
            raise ValueError(f"entries {missing[:5]}{'...' if len(missing) > 5 else ''} of {board!r} kept no "
                             f"validation returns (their fitness was not 'windowed', or the store predates it): "
                             f"pass the validation env to backtest them, "
                             f"trial_returns_from_leaderboard(board, market.env('valid'))")
        stored = board.validation_returns(include_corrupt=True)
        return stored[[e.id for e in chosen]].rename_axis(index="period", columns="entry")
    from finance.backtest import backtest  # torch and the env: only needed here

    returns = {e.id: backtest(board.load_agent(e), env, name=f"entry {e.id}", baselines=False).returns()
               for e in chosen}
    return pd.DataFrame(returns).rename_axis(columns="entry")


# ---------------------------------------------------------------------------- bootstrap interval
class SharpeInterval(NamedTuple):
    """A confidence interval for a Sharpe ratio, in the units it was asked for."""

    low: float
    high: float


BOOTSTRAP_MIN_OBSERVATIONS = 20  # fewer returns than this give a resampling distribution of a handful of blocks


def default_block_length(num_obs: int) -> int:
    """n^(1/3), rounded: the order of the optimal mean block length for variance-type statistics
    (Hall, Horowitz & Jing 1995; Politis & White 2004); 10 for four years of daily returns."""
    return max(1, round(num_obs ** (1.0 / 3.0)))


def stationary_bootstrap_indices(num_obs: int, n_resamples: int, block_length: float,
                                 rng: np.random.Generator) -> np.ndarray:
    """(n_resamples, num_obs) row indices of the stationary bootstrap (Politis & Romano 1994).

    Each resample is a chain of blocks: a block starts at a uniform random row, runs on row by
    row (wrapping from the last row to the first), and ends after each row with probability
    1 / block_length, so block lengths are geometric with mean ``block_length``. Resamples keep
    the short-range dependence of the series (volatility clusters) that an IID bootstrap breaks.
    """
    t = np.arange(num_obs)
    new_block = rng.random((n_resamples, num_obs)) < 1.0 / block_length
    new_block[:, 0] = True
    starts = rng.integers(0, num_obs, (n_resamples, num_obs))
    block_start = np.maximum.accumulate(np.where(new_block, t, 0), axis=1)  # column where the current block began
    return (np.take_along_axis(starts, block_start, axis=1) + t - block_start) % num_obs


def bootstrap_sharpe_ci(returns: pd.Series | np.ndarray, confidence: float = 0.95, n_resamples: int = 2_000,
                        block_length: int | None = None, seed: int | None = 0,
                        periods_per_year: float | None = None) -> SharpeInterval:
    """Percentile confidence interval for the Sharpe ratio mean / std (ddof=1), by stationary
    block bootstrap (Politis & Romano 1994, "The Stationary Bootstrap", JASA 89(428)).

    Daily returns are a little autocorrelated and their volatility clusters, so resampling single
    days (``scipy.stats.bootstrap``, IID) understates the uncertainty; resampling blocks of
    consecutive days keeps that dependence. The interval is [q_(1-c)/2, q_(1+c)/2] of the
    Sharpe ratios of ``n_resamples`` resampled series. Unlike the PSR it assumes no distribution,
    but it is only as good as the sample: a few years of data cannot show a rare crash.

    Args:
        returns: per-period simple (or excess) returns of one strategy, no NaN, at least
            ``BOOTSTRAP_MIN_OBSERVATIONS`` and two mean blocks' worth.
        confidence: c, the interval's coverage, in (0, 1).
        n_resamples: B, bootstrap resamples (2,000 gives the 2.5% quantile to about ±0.02 of a
            typical annual Sharpe ratio's interval width; more for a 99% interval).
        block_length: mean block length in periods; default ``default_block_length(n)`` =
            n^(1/3) rounded (10 for 1,000 days, 6 for 250). 1 resamples single periods (an IID bootstrap).
        seed: seeds the resampling (same seed, same interval); None draws fresh randomness.
        periods_per_year: annualise the interval by sqrt(periods_per_year) (252 for daily bars),
            like ``sharpe_ratio`` and ``BacktestResult.metrics()["sharpe"]``; None: per period.
    """
    r = _check_returns(returns)
    n = len(r)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1 (0.95 for a 95% interval), got {confidence}")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 100:
        raise ValueError(f"n_resamples must be a whole number >= 100 (2,000 is a good default), got {n_resamples!r}")
    length = default_block_length(n) if block_length is None else block_length
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 1:
        raise ValueError(f"block_length must be a whole number of periods >= 1 (None: n^(1/3) rounded = "
                         f"{default_block_length(n)} here), got {block_length!r}")
    need = max(BOOTSTRAP_MIN_OBSERVATIONS, 2 * length)
    if n < need:
        raise ValueError(f"returns has {n} observations, too few to bootstrap a Sharpe ratio with "
                         f"block_length={length}: pass at least {need} (hundreds for a useful interval) or a shorter "
                         "block_length")
    scale = 1.0 / _per_period(1.0, periods_per_year, "the interval")  # sqrt(periods_per_year), or 1
    idx = stationary_bootstrap_indices(n, int(n_resamples), float(length), np.random.default_rng(seed))
    sample = r[idx]  # (B, n)
    with np.errstate(divide="ignore", invalid="ignore"):  # a constant resample has no Sharpe ratio: dropped
        sharpes = sample.mean(axis=1) / sample.std(axis=1, ddof=1)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.nanpercentile(sharpes, [tail, 100.0 - tail]) * scale
    return SharpeInterval(float(low), float(high))
