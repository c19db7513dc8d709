"""Agent presets for the stock-trading env, registered with podracer when ``finance`` is imported.

Podracer keeps its own presets next to each agent (``podracer.presets()`` lists them); a package
that brings a task brings its presets and registers them. After ``import finance``::

    podracer.get_preset("ppo", "stock_trading")  # Preset(num_envs=64, total_steps=393216, config={...})
    agent = podracer.make_agent("ppo", env)      # env.task == "stock_trading": picks it and says so

They are the settings ``finance.demo`` trains with, for its training env:
``market.env("train", num_envs, random_start=True, episode_length=252, dtype=torch.float32)``
on the bundled 20-stock sample (one-year episodes from random days of 2005-2016, scaled
features, 0.1% costs).
"""

from __future__ import annotations

import podracer

# PPO for daily trading: short rollouts (32 days) over many accounts, and a cautious initial
# policy (log σ = -0.5: the first, random trades are smaller). total_steps: the demo's full-size
# single-pod budget (6 x 65,536 env steps).
STOCK_TRADING_PPO = podracer.Preset(
    num_envs=64, total_steps=393_216,
    config=dict(num_steps=32, num_minibatches=4, update_epochs=5, learning_rate=3e-4, gamma=0.99,
                log_std_init=-0.5, hidden_sizes=(64, 64)),
)

# (agent, task) -> preset; StockTradingVecEnv.task is "stock_trading".
PRESETS: dict[tuple[str, str], podracer.Preset] = {("ppo", "stock_trading"): STOCK_TRADING_PPO}


def register_presets() -> None:
    """Register ``PRESETS`` with podracer (``finance/__init__.py`` calls this on import)."""
    for (agent, task), preset in PRESETS.items():
        podracer.register_preset(agent, task, preset)
