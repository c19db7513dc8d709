"""Single-file agents and the registry that names them.

``registry.py`` is the top of this package: it imports each algorithm file (``ppo.py``,
``sac.py``, ``td3.py``, ``ddpg.py``, ``dqn.py``) and owns presets, ``make_agent`` and
``load_agent``. The algorithm files import only ``common.py`` (building blocks, the base class
and the name -> class table every agent class enters when defined), ``offpolicy.py`` and
``replay.py``; none imports the registry.
"""

from podracer.agents.common import AgentBase, RunningMeanStd, mlp, mutable_bounds, soft_update
from podracer.agents.registry import (AGENTS, Preset, agent_name, find_preset, get_agent_class, get_preset,
                                      load_agent, make_agent, presets, register_agent, register_preset,
                                      register_presets, registered_agents, resolve_agent)

__all__ = ["AGENTS", "AgentBase", "Preset", "RunningMeanStd", "agent_name", "find_preset", "get_agent_class",
           "get_preset", "load_agent", "make_agent", "mlp", "mutable_bounds", "presets", "register_agent",
           "register_preset", "register_presets", "registered_agents", "resolve_agent", "soft_update"]
