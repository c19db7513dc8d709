"""One call from tickers and dates to ready-to-trade splits: the preparation the demo, the
notebooks and the tournament share.

``prepare_market`` loads prices, computes the indicators and the turbulence index on the whole
history (they are causal, so later rows never leak into earlier ones), rescales the price-level
indicators to ratios of the close, fits the feature scaler on the training dates only, and
splits by date. ``MarketData.env(...)`` then builds a ``StockTradingVecEnv`` on any split with
the training split's ``price_scale``, so train, validation and test envs see the same numbers
for the same price. With OHLCV data (``source="sample_ohlcv"`` or yfinance) the market keeps the
opens and the volume too, and its envs get them: ``execution="next_open"``, volume-based costs and
participation caps work on them (``docs/trading_realism.md``).

``compare_execution`` backtests one policy under several fill timings and cost models: what the
optimistic default (fills at the close the policy just saw, a proportional cost) hides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from finance.backtest import METRICS, backtest
from finance.costs import CostModel, as_cost_model
from finance.data import SAMPLE_TICKERS, load_benchmark, load_prices
from finance.env import EXECUTIONS, StockTradingVecEnv
from finance.features import DEFAULT_INDICATORS, FeatureScaler, add_features, split_by_date, turbulence

DateRange = tuple[str | None, str | None]

# Indicators measured in price units. Their level drifts with the price (a 2020 moving average
# sits far outside the 2005-2016 training range), so we feed them as ratios to the close.
PRICE_LEVEL = ("macd", "boll", "close_")  # boll: the middle band and both bands (boll_ub, boll_lb)


@dataclass
class MarketData:
    """Closes, scaled features, turbulence and the index close for each split; opens and volume
    when the prices had them."""

    close: dict[str, pd.DataFrame]  # split -> (dates, tickers)
    features: dict[str, pd.DataFrame]  # split -> (dates, (feature, ticker)), scaled on train
    turbulence: dict[str, pd.Series]  # split -> (dates,)
    benchmark: dict[str, pd.Series] = field(default_factory=dict)  # split -> index close, if any
    price_scale: np.ndarray | None = None  # first training close per ticker
    open: dict[str, pd.DataFrame] = field(default_factory=dict)  # split -> (dates, tickers), if any
    volume: dict[str, pd.DataFrame] = field(default_factory=dict)  # split -> (dates, tickers) shares, if any

    @property
    def tickers(self) -> list[str]:
        return list(self.close["train"].columns)

    def env(self, split: str = "train", num_envs: int = 1, device: str | torch.device = "cpu",
            **env_kwargs: Any) -> StockTradingVecEnv:
        """A ``StockTradingVecEnv`` on ``split``. For training pass ``random_start=True`` and an
        ``episode_length``; the default is a deterministic run over the whole split. The split's
        opens and volume go with it when the market has them (``execution="next_open"``,
        ``finance.SqrtImpact``, ``max_participation``)."""
        if split not in self.close:
            raise ValueError(f"unknown split {split!r}; this market has {sorted(self.close)}")
        if split in self.open:
            env_kwargs.setdefault("open_prices", self.open[split])
        if split in self.volume:
            env_kwargs.setdefault("volume", self.volume[split])
        return StockTradingVecEnv(self.close[split], self.features[split], self.turbulence[split],
                                  num_envs=num_envs, device=device, price_scale=self.price_scale, **env_kwargs)

    def describe(self) -> pd.DataFrame:
        """First day, last day and number of days of each split."""
        return pd.DataFrame({name: {"first": c.index[0].date(), "last": c.index[-1].date(), "days": len(c)}
                             for name, c in self.close.items()}).T


def relative_features(features: pd.DataFrame, close: pd.DataFrame) -> pd.DataFrame:
    """Price-level indicators (MACD, Bollinger bands, moving averages) as ratios to the close:
    ``x / close`` for MACD, ``x / close - 1`` for the others. Oscillators are unchanged."""
    out = features.copy()
    for name in features.columns.get_level_values(0).unique():
        if name.startswith(PRICE_LEVEL):
            ratio = features[name] / close[features[name].columns]
            out[name] = ratio if name == "macd" else ratio - 1.0
    return out


def prepare_market(tickers: str | Sequence[str] | None = SAMPLE_TICKERS, source: str = "sample",
                   train: DateRange = ("2005-01-01", "2016-12-31"),
                   valid: DateRange = ("2017-01-01", "2018-12-31"),
                   test: DateRange = ("2019-01-01", "2022-12-31"),
                   indicators: Sequence[str] = DEFAULT_INDICATORS, history_start: str | None = "2000-01-01",
                   turbulence_window: int = 252, relative: bool = True, **load_kwargs: Any) -> MarketData:
    """Load, featurise, scale (on train only) and split one market.

    ``tickers`` is one ticker, a list, or None for every ticker of the source, as in
    ``load_prices``. ``history_start`` loads earlier days so indicators and the turbulence
    window are warm on the first training day; those days are used for nothing else.

    The universe is the tickers ``load_prices`` keeps over the whole span, test years included: one
    with a gap longer than ``ffill_limit`` anywhere (a delisting, a suspension) is dropped from every
    split, train too, with a ``DataWarning``. That is a choice made with later data (survivorship);
    for a study of it, load each split's dates on their own or pass tickers that traded throughout.
    """
    dates = sorted(set(load_kwargs) & {"start", "end", "start_date", "end_date"})
    if dates:
        # load_prices takes start/end, FinRL's downloaders start_date/end_date; here the splits set the dates.
        raise TypeError(f"prepare_market takes its dates as the splits, not {dates}: train=(start, end), "
                        f"valid=(start, end), test=(start, end) (valid or test may be None), and history_start "
                        f"for the warm-up days before train; finance.load_prices(tickers, start, end) loads one span")
    if train is None:
        raise ValueError("prepare_market needs train=(start, end): the feature scaler and the price scale are "
                         "fitted on the training dates")
    end = next(span[1] for span in (test, valid, train) if span is not None)
    # Passed on as given: load_prices reads a string as one ticker (list("AAPL") would be 4 tickers).
    prices = load_prices(tickers, start=history_start, end=end, source=source, **load_kwargs)
    close = prices["close"]
    feats = add_features(prices, indicators)
    if relative:
        feats = relative_features(feats, close)
    turb = turbulence(close, window=turbulence_window)
    frames = {"close": close, "features": feats, "turbulence": turb}
    frames.update({f: prices[f] for f in ("open", "volume") if f in prices.columns.get_level_values(0)})
    splits = split_by_date(frames, train=train, valid=valid, test=test)
    scaler = FeatureScaler().fit(splits["train"]["features"])
    benchmark: dict[str, pd.Series] = {}
    if source in ("sample", "yfinance"):
        # Same bar frequency as the prices: a daily index reindexed onto hourly bars would be all NaN.
        index = load_benchmark(history_start, end, source=source, cache_dir=load_kwargs.get("cache_dir"),
                               interval=load_kwargs.get("interval", "1d") if source == "yfinance" else "1d")
        benchmark = {name: index.reindex(part["close"].index).ffill() for name, part in splits.items()}
    return MarketData(
        close={name: part["close"] for name, part in splits.items()},
        features={name: scaler.transform(part["features"]) for name, part in splits.items()},
        turbulence={name: part["turbulence"] for name, part in splits.items()},
        benchmark=benchmark,
        price_scale=splits["train"]["close"].iloc[0].to_numpy(),
        open={name: part["open"] for name, part in splits.items() if "open" in part},
        volume={name: part["volume"] for name, part in splits.items() if "volume" in part},
    )


def compare_execution(policy: Any, market_or_env: MarketData | StockTradingVecEnv,
                      executions: Sequence[str] = EXECUTIONS, costs: dict[str, Any] | None = None,
                      split: str = "test", metrics: Sequence[str] = ("sharpe", "annual_return", "costs", "turnover"),
                      **backtest_kwargs: Any) -> pd.DataFrame:
    """Backtest ``policy`` once per (execution, cost model); one row each, ``metrics`` as columns.

    Args:
        policy: anything ``finance.backtest`` runs.
        market_or_env: a ``MarketData`` (its ``split`` env) or a ``StockTradingVecEnv``.
        executions: fill timings, from ``"close"`` (optimistic), ``"next_close"``, ``"next_open"``
            (needs opens: OHLCV data).
        costs: name -> cost model (a ``finance.costs`` model, or a number: a proportional rate);
            default the env's own, as ``{"env": env.costs}``.
        metrics: columns, from ``finance.backtest.METRICS`` (``costs``: paid / initial value).
        backtest_kwargs: passed on to ``backtest`` (``bars_per_year``, ``name``).

    Returns a DataFrame indexed by (execution, costs).
    """
    env = market_or_env.env(split) if isinstance(market_or_env, MarketData) else market_or_env
    if not isinstance(env, StockTradingVecEnv):
        raise TypeError(f"compare_execution takes a MarketData or a StockTradingVecEnv, got {type(env).__name__}")
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metrics {unknown}; choose from {METRICS}")
    models: dict[str, CostModel] = {"env": env.costs} if costs is None else {
        str(name): as_cost_model(model, f"costs[{name!r}]") for name, model in costs.items()}
    rows = {}
    for execution in executions:
        for name, model in models.items():
            result = backtest(policy, env, execution=execution, costs=model, baselines=False, **backtest_kwargs)
            rows[(execution, name)] = result.metrics()[list(metrics)]
    table = pd.DataFrame(rows).T
    table.index.names = ["execution", "costs"]
    return table
