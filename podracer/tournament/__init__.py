"""Many pods, one leaderboard: population based training on one machine (and later a cluster).

``Tournament`` drives pods (``Pod``) through a backend; they share a ``Leaderboard`` (SQLite +
checkpoints) from which each generation selects a parent and to which it submits its result.
``Ensemble`` combines the best entries into one policy.
"""

from podracer.checkpoints import CheckpointError, CheckpointMissingError
from podracer.tournament.config import TournamentConfig, register_factory
from podracer.tournament.ensemble import (Ensemble, action_similarity, returns_similarity, score_weights,
                                          select_diverse)
from podracer.tournament.fitness import FitnessResult, register_fitness
from podracer.tournament.leaderboard import DamagedBoardError, Entry, Leaderboard, ReadOnlyBoardError, TicketError
from podracer.tournament.pod import Pod, PodSpec
from podracer.tournament.selection import mutate, select_parent
from podracer.tournament.tournament import Tournament

__all__ = ["CheckpointError", "CheckpointMissingError", "DamagedBoardError", "Ensemble", "Entry", "FitnessResult", "Leaderboard", "Pod",
           "PodSpec", "ReadOnlyBoardError", "TicketError", "Tournament", "TournamentConfig", "action_similarity",
           "mutate", "register_factory", "register_fitness", "returns_similarity", "score_weights", "select_diverse",
           "select_parent"]
