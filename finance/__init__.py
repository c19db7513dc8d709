"""Podracer finance: real prices, causal features, a batched stock-trading env, honest backtests.

Data flows ``load_prices -> add_features / turbulence -> split_by_date -> StockTradingVecEnv ->
train -> backtest``. See notebooks 06, 07 and 11. Importing ``finance`` registers the
``stock_trading`` env, its agent presets (``finance/presets.yaml``) and the demo's env factories
with podracer (``finance.presets``).
"""

# Data: clean price panels (dates x (field, ticker)) from Yahoo, the bundled samples or a file.
from finance.data import (FIELDS, SAMPLE_OHLCV_TICKERS, SAMPLE_TICKERS, DataError, DataUnavailableError,
                          DataWarning, load_benchmark, load_prices, synthetic_prices)
from finance.trading_calendar import CalendarWarning, bars_per_year

# Features: causal indicators, the turbulence index, a scaler fitted on train, date splits;
# prepare_market does all of it in one call.
from finance.features import (DEFAULT_INDICATORS, FeatureScaler, add_features, split_by_date, turbulence,
                              warmup_days)
from finance.market import MarketData, prepare_market, relative_features

# Env: the batched stock-trading task (task "stock_trading") and portfolio allocation by target
# weights (task "portfolio"), both with presets.
from finance.env import StockTradingVecEnv
from finance.portfolio_env import PortfolioVecEnv, differential_sharpe
from finance import presets as _presets

# Backtest: a policy through a test period beside baselines, and the metrics table.
from finance.backtest import (BENCHMARK_METRICS, METRICS, BacktestResult, BuyAndHoldPolicy, backtest,
                              backtest_portfolio, buy_and_hold, compare, drawdown_durations, index_baseline,
                              min_variance_weights, rebalanced, risk_metric_names)

# Market model: fill timing, cost models and margin accounts for the env (docs/trading_realism.md);
# compare_execution backtests one policy under each.
from finance.costs import BorrowFee, CostModel, FixedPerTrade, HalfSpread, Proportional, SqrtImpact
from finance.env import DEFAULT_EXECUTION, EXECUTIONS, OptimisticExecutionWarning
from finance.execution import Financing, Margin
from finance.market import compare_execution

# Walk-forward: refit on moving training windows, trade each next window out of sample, stitch.
from finance.walk_forward import RebalancePolicy, WalkForwardResult, walk_forward

# Overfitting guards: PSR, deflated Sharpe (DSR), the probability of backtest overfitting (CSCV), and a
# block-bootstrap confidence interval for the Sharpe ratio.
from finance.overfitting import (PBOResult, deflated_sharpe_ratio, expected_max_sharpe, probabilistic_sharpe_ratio,
                                 probability_of_backtest_overfitting, psr_from_moments, sharpe_ratio,
                                 trial_returns_from_leaderboard, SharpeInterval, bootstrap_sharpe_ci, effective_trials)

# Comparing strategies: the Sharpe-difference test (Ledoit-Wolf HAC, Jobson-Korkie-Memmel), the minimum track
# record length, Lo's autocorrelation-adjusted Sharpe ratio, and the best of N against a benchmark (Reality Check,
# SPA, StepM).
from finance.statistics import (SharpeDifference, SPAResult, lo_sharpe_ratio, minimum_track_record_length,
                                sharpe_difference_test, spa_test)

# Markets with planted skill: synthetic panels whose returns a known signal predicts with a chosen
# information coefficient, so an agent's true skill is known (benchmarks/selection_power.py).
from finance.planted import (PLANTED_STRENGTHS, PlantedMarket, conditional_mean_return, planted_market,
                             planted_prices, signal_sharpe)

# Choosing among candidates on held-out returns: validation schemes (one split, consecutive windows,
# combinatorial purged cross-validation) x scores (mean, Sharpe, its lower bound, PSR, DSR).
from finance.validation import (SCORES, CombinatorialPurged, ConsecutiveWindows, Selection, SingleSplit, Split,
                                select, select_on, window_scores)
# The tournament's fitness on the validation split: windows of the backtest's daily returns, scored
# (the trading tasks' default, DEFAULT_FITNESS).
from finance.fitness import DEFAULT_FITNESS, WindowedFitness

# The interactive backtest: one function per setting (policy, dates, cost, turbulence, cash) and its panel.
# (ipywidgets is imported only when the panel is built.)
from finance.interactive import Controls, interactive_backtest, run_backtest

_presets.register()  # presets, the stock_trading env and trusted factories, with podracer

__all__ = [
    # data
    "FIELDS", "SAMPLE_OHLCV_TICKERS", "SAMPLE_TICKERS", "DataError", "DataUnavailableError", "DataWarning",
    "load_benchmark", "load_prices", "synthetic_prices", "bars_per_year", "CalendarWarning",
    # features
    "DEFAULT_INDICATORS", "FeatureScaler", "MarketData", "add_features", "prepare_market", "relative_features",
    "split_by_date", "turbulence", "warmup_days",
    # env
    "StockTradingVecEnv", "PortfolioVecEnv", "differential_sharpe",
    # backtest
    "METRICS", "BacktestResult", "BuyAndHoldPolicy", "backtest", "backtest_portfolio", "buy_and_hold", "compare",
    "index_baseline", "min_variance_weights", "rebalanced", "BENCHMARK_METRICS", "drawdown_durations",
    "risk_metric_names",
    # market model
    "BorrowFee", "CostModel", "FixedPerTrade", "HalfSpread", "Proportional", "SqrtImpact", "EXECUTIONS", "Margin",
    "compare_execution", "DEFAULT_EXECUTION", "OptimisticExecutionWarning", "Financing",
    # walk-forward
    "RebalancePolicy", "WalkForwardResult", "walk_forward",
    # overfitting
    "PBOResult", "deflated_sharpe_ratio", "expected_max_sharpe", "probabilistic_sharpe_ratio",
    "probability_of_backtest_overfitting", "psr_from_moments", "sharpe_ratio", "trial_returns_from_leaderboard",
    "SharpeInterval", "bootstrap_sharpe_ci", "effective_trials",
    # comparing strategies
    "SharpeDifference", "SPAResult", "lo_sharpe_ratio", "minimum_track_record_length", "sharpe_difference_test",
    "spa_test",
    # planted skill
    "PLANTED_STRENGTHS", "PlantedMarket", "conditional_mean_return", "planted_market", "planted_prices",
    "signal_sharpe",
    # validation schemes and scores
    "SCORES", "CombinatorialPurged", "ConsecutiveWindows", "Selection", "SingleSplit", "Split", "select", "select_on",
    "window_scores", "DEFAULT_FITNESS", "WindowedFitness",
    # interactive backtest
    "Controls", "interactive_backtest", "run_backtest",
]
