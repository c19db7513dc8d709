"""Podracer: compact RL agents on batched tensor environments, one pod or a tournament of them.

The stable API (1.x; see docs/stable_api.md): everything listed in ``__all__`` below.
Renames keep the old name working, with a FutureWarning, until the removal version
``podracer.deprecation.DEPRECATIONS`` gives (docs/deprecations.md).

Start-up is ``import torch`` plus a little: the names whose modules import pandas (the target
runs, the tournament and its leaderboard) are imported on first use (``__getattr__`` below,
PEP 562), so ``from podracer import Tournament`` works as before and a training process that
never touches them never imports pandas (tests/test_import_time.py).
"""

from typing import TYPE_CHECKING

# Envs: the batched-tensor protocol, the envs we ship and the ones domains register, any gymnasium
# env through the adapter.
from podracer.envs import check_env, make_env, make_gym_env, register_env, registered_envs

# Agents: one name per algorithm, presets per task (data files), save/load.
from podracer.agents import (AGENTS, AgentBase, Preset, get_preset, load_agent, make_agent, presets, register_agent,
                             register_preset, register_presets, registered_agents, resolve_agent)

# One pod: train, evaluate, seed, steps and seconds to a target; any agent or callable obs -> actions is a policy.
from podracer.evaluate import RandomPolicy, as_policy, evaluate
from podracer.train import iterate_training, seed_everything, train
if TYPE_CHECKING:  # lazy, as the tournament below: both import pandas (see _LAZY)
    from podracer.to_target import TargetSummary, ToTarget, seeds_to_target, train_to_target

# Many pods: the tournament and its leaderboard; checkpoints that are never half-written.
from podracer.checkpoints import CheckpointError
if TYPE_CHECKING:
    from podracer.tournament import Ensemble, Leaderboard, Tournament, TournamentConfig

__version__ = "1.1.0"

__all__ = [
    "check_env", "make_env", "make_gym_env", "register_env", "registered_envs",
    "AGENTS", "AgentBase", "Preset", "get_preset", "load_agent", "make_agent", "presets", "register_agent",
    "register_preset", "register_presets", "registered_agents", "resolve_agent",
    "RandomPolicy", "as_policy", "evaluate", "iterate_training", "seed_everything", "train",
    "TargetSummary", "ToTarget", "seeds_to_target", "train_to_target",
    "CheckpointError", "Ensemble", "Leaderboard", "Tournament", "TournamentConfig",
]


# name -> the module that defines it, imported on first access (the TYPE_CHECKING imports above).
# The submodules themselves too: `podracer.tournament.register_factory` after a bare `import podracer`.
_LAZY = {**dict.fromkeys(["TargetSummary", "ToTarget", "seeds_to_target", "train_to_target", "to_target"],
                         "podracer.to_target"),
         **dict.fromkeys(["Ensemble", "Leaderboard", "Tournament", "TournamentConfig", "tournament"],
                         "podracer.tournament")}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module = importlib.import_module(_LAZY[name])
        value = module if name == module.__name__.rpartition(".")[2] else getattr(module, name)
        globals()[name] = value  # once: later lookups are plain attribute reads
        return value
    from podracer import deprecation  # a renamed name (podracer.get_agent_class), with its warning, else AttributeError

    return deprecation.module_attribute(__name__, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
