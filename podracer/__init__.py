"""Podracer: compact RL agents on batched tensor environments, one pod or a tournament of them.

The stable API (1.x; see the README's API section): everything listed in ``__all__`` below.
Renames keep the old name working, with a FutureWarning, for one minor version.
"""

# Envs: the batched-tensor protocol, the envs we ship and the ones domains register, any gymnasium
# env through the adapter.
from podracer.envs import check_env, make_env, make_gym_env, register_env, registered_envs

# Agents: one name per algorithm, presets per task (data files), save/load.
from podracer.agents import (AGENTS, AgentBase, Preset, get_preset, load_agent, make_agent, presets, register_preset,
                             register_presets, resolve_agent)

# One pod: train, evaluate, seed, steps and seconds to a target; any agent or callable obs -> actions is a policy.
from podracer.evaluate import RandomPolicy, as_policy, evaluate
from podracer.train import iterate_training, seed_everything, train
from podracer.to_target import TargetSummary, ToTarget, seeds_to_target, train_to_target

# Many pods: the tournament and its leaderboard; checkpoints that are never half-written.
from podracer.checkpoints import CheckpointError
from podracer.tournament import Ensemble, Leaderboard, Tournament, TournamentConfig

__version__ = "1.1.0"

__all__ = [
    "check_env", "make_env", "make_gym_env", "register_env", "registered_envs",
    "AGENTS", "AgentBase", "Preset", "get_preset", "load_agent", "make_agent", "presets", "register_preset",
    "register_presets", "resolve_agent",
    "RandomPolicy", "as_policy", "evaluate", "iterate_training", "seed_everything", "train",
    "TargetSummary", "ToTarget", "seeds_to_target", "train_to_target",
    "CheckpointError", "Ensemble", "Leaderboard", "Tournament", "TournamentConfig",
]


def __getattr__(name: str):
    if name == "get_agent_class":  # the 0.1 name of resolve_agent
        import warnings

        warnings.warn("podracer.get_agent_class is renamed podracer.resolve_agent; the old name will be removed in "
                      "podracer 1.2", FutureWarning, stacklevel=2)
        return resolve_agent
    raise AttributeError(f"module 'podracer' has no attribute {name!r}")
