"""Podracer: compact RL agents on batched tensor environments, one pod or a tournament of them."""

from podracer.agents import AGENTS, AgentBase, get_agent_class, make_agent
from podracer.envs import check_env, make_env, make_gym_env
from podracer.evaluate import evaluate
from podracer.train import iterate_training, seed_everything, train
from podracer.tournament import Ensemble, Leaderboard, Tournament, TournamentConfig

__version__ = "0.1.0"

__all__ = ["AGENTS", "AgentBase", "Ensemble", "Leaderboard", "Tournament", "TournamentConfig", "check_env", "evaluate",
           "get_agent_class", "iterate_training", "make_agent", "make_env", "make_gym_env", "seed_everything", "train"]
