"""Podracer finance: real prices, causal features, a batched stock-trading env, honest backtests.

Data flows ``load_prices -> add_features / turbulence -> split_by_date -> StockTradingVecEnv ->
train -> backtest``. See notebooks 03 and 04.
"""

from finance.backtest import (METRICS, BacktestResult, BuyAndHoldPolicy, backtest, buy_and_hold, compare,
                              index_baseline, min_variance_weights)
from finance.data import (FIELDS, SAMPLE_OHLCV_TICKERS, SAMPLE_TICKERS, DataError, DataUnavailableError,
                          DataWarning, load_benchmark, load_prices)
from finance.env import StockTradingVecEnv
from finance.market import MarketData, prepare_market, relative_features
from finance.features import (DEFAULT_INDICATORS, FeatureScaler, add_features, split_by_date, turbulence,
                              warmup_days)

__all__ = [
    "DEFAULT_INDICATORS", "FIELDS", "METRICS", "SAMPLE_OHLCV_TICKERS", "SAMPLE_TICKERS", "BacktestResult",
    "BuyAndHoldPolicy", "DataError", "DataUnavailableError", "DataWarning", "FeatureScaler", "MarketData", "StockTradingVecEnv",
    "add_features", "backtest", "buy_and_hold", "compare", "index_baseline", "load_benchmark", "load_prices",
    "min_variance_weights", "prepare_market", "relative_features", "split_by_date", "turbulence", "warmup_days",
]
