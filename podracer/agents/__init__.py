"""Single-file agents and the registry that names them."""

from podracer.agents.common import AgentBase, RunningMeanStd, mlp, mutable_bounds, soft_update
from podracer.agents.registry import AGENTS, get_agent_class, make_agent

__all__ = ["AGENTS", "AgentBase", "RunningMeanStd", "get_agent_class", "make_agent", "mlp", "mutable_bounds",
           "soft_update"]
