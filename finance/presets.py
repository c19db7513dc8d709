"""Finance plugs into podracer here: its agent presets (``finance/presets.yaml``), its env under a
name, and the env factories a stored tournament may name. ``finance/__init__.py`` calls
``register()`` on import, and podracer imports ``finance`` by itself when a lookup needs it (the
``podracer.domains`` entry point in ``pyproject.toml``). After that::

    podracer.get_preset("ppo", "stock_trading")  # Preset(num_envs=128, total_steps=393216, config={...}, ...)
    podracer.make_env("stock_trading", 64)       # training accounts on the bundled sample
    agent = podracer.make_agent("ppo", env)      # env.task == "stock_trading": picks the preset and says so
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import podracer
from podracer.tournament import register_factory, register_fitness

PRESETS_FILE = Path(__file__).with_name("presets.yaml")


def stock_trading_env(num_envs: int = 1, device: Any = "cpu", split: str = "train", **env_kwargs: Any) -> Any:
    """The stock-trading env on the bundled 20-stock sample (``finance.prepare_market()``): one-year
    episodes from random days of the training years for ``split="train"`` (the demo's training
    accounts), one deterministic account over the whole split for ``"valid"`` and ``"test"``."""
    from finance.market import prepare_market

    if split == "train":
        env_kwargs = {"random_start": True, "episode_length": 252, **env_kwargs}
    return prepare_market().env(split, num_envs, device=device, **env_kwargs)


def portfolio_env(num_envs: int = 1, device: Any = "cpu", split: str = "train", **env_kwargs: Any) -> Any:
    """The portfolio-allocation env (``finance.PortfolioVecEnv``: target weights over the 20 stocks and cash)
    on the bundled sample's closes: one-year episodes from random days of the training years for
    ``split="train"``, one deterministic account over the whole split for ``"valid"`` and ``"test"``."""
    from finance.market import prepare_market
    from finance.portfolio_env import PortfolioVecEnv

    if split == "train":
        env_kwargs = {"random_start": True, "episode_length": 252, **env_kwargs}
    return PortfolioVecEnv(prepare_market().close[split], num_envs=num_envs, device=device, **env_kwargs)


def register() -> None:
    """Register the presets, the ``stock_trading`` env and the trusted factories with podracer."""
    podracer.register_presets(PRESETS_FILE)
    podracer.register_env("stock_trading", stock_trading_env)
    podracer.register_env("portfolio", portfolio_env)
    # The tournaments' fitness on a validation split (finance/fitness.py): "windowed", and what
    # fitness="auto" means for the trading tasks; fitness="return" keeps the mean eval return.
    from finance.fitness import DEFAULT_FITNESS, WindowedFitness

    settings = {k: v for k, v in DEFAULT_FITNESS.items() if k != "name"}
    register_fitness("windowed", WindowedFitness, tasks=("stock_trading", "portfolio"), **settings)
    for factory in ("finance.env:StockTradingVecEnv", "finance.portfolio_env:PortfolioVecEnv", "finance.demo:train_env", "finance.demo:eval_env"):
        register_factory(factory)
