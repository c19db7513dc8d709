"""Podracer finance: real prices, causal features, a batched stock-trading env, honest backtests.

Data flows ``load_prices -> add_features / turbulence -> split_by_date -> StockTradingVecEnv ->
train -> backtest``. See notebooks 05, 06 and 10. Importing ``finance`` registers the
``stock_trading`` env, its agent presets (``finance/presets.yaml``) and the demo's env factories
with podracer (``finance.presets``).
"""

# Data: clean price panels (dates x (field, ticker)) from Yahoo, the bundled samples or a file.
from finance.data import (FIELDS, SAMPLE_OHLCV_TICKERS, SAMPLE_TICKERS, DataError, DataUnavailableError,
                          DataWarning, load_benchmark, load_prices, synthetic_prices)
from finance.trading_calendar import bars_per_year

# Features: causal indicators, the turbulence index, a scaler fitted on train, date splits;
# prepare_market does all of it in one call.
from finance.features import (DEFAULT_INDICATORS, FeatureScaler, add_features, split_by_date, turbulence,
                              warmup_days)
from finance.market import MarketData, prepare_market, relative_features

# Env: the batched stock-trading task (task "stock_trading", with presets).
from finance.env import StockTradingVecEnv
from finance import presets as _presets

# Backtest: a policy through a test period beside baselines, and the metrics table.
from finance.backtest import (METRICS, BacktestResult, BuyAndHoldPolicy, backtest, buy_and_hold, compare,
                              index_baseline, min_variance_weights)

# Walk-forward: refit on moving training windows, trade each next window out of sample, stitch.
from finance.walk_forward import RebalancePolicy, WalkForwardResult, walk_forward

# Overfitting guards: PSR, deflated Sharpe (DSR), the probability of backtest overfitting (CSCV), and a
# block-bootstrap confidence interval for the Sharpe ratio.
from finance.overfitting import (PBOResult, deflated_sharpe_ratio, expected_max_sharpe, probabilistic_sharpe_ratio,
                                 probability_of_backtest_overfitting, psr_from_moments, sharpe_ratio,
                                 trial_returns_from_leaderboard, SharpeInterval, bootstrap_sharpe_ci)

# The interactive backtest: one function per setting (policy, dates, cost, turbulence, cash) and its panel.
# (ipywidgets is imported only when the panel is built.)
from finance.interactive import Controls, interactive_backtest, run_backtest

_presets.register()  # presets, the stock_trading env and trusted factories, with podracer

__all__ = [
    # data
    "FIELDS", "SAMPLE_OHLCV_TICKERS", "SAMPLE_TICKERS", "DataError", "DataUnavailableError", "DataWarning",
    "load_benchmark", "load_prices", "synthetic_prices", "bars_per_year",
    # features
    "DEFAULT_INDICATORS", "FeatureScaler", "MarketData", "add_features", "prepare_market", "relative_features",
    "split_by_date", "turbulence", "warmup_days",
    # env
    "StockTradingVecEnv",
    # backtest
    "METRICS", "BacktestResult", "BuyAndHoldPolicy", "backtest", "buy_and_hold", "compare", "index_baseline",
    "min_variance_weights",
    # walk-forward
    "RebalancePolicy", "WalkForwardResult", "walk_forward",
    # overfitting
    "PBOResult", "deflated_sharpe_ratio", "expected_max_sharpe", "probabilistic_sharpe_ratio",
    "probability_of_backtest_overfitting", "psr_from_moments", "sharpe_ratio", "trial_returns_from_leaderboard",
    "SharpeInterval", "bootstrap_sharpe_ci",
    # interactive backtest
    "Controls", "interactive_backtest", "run_backtest",
]
