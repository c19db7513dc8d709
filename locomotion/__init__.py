"""Podracer locomotion: MuJoCo tasks in the batched-tensor protocol (planned).

Not built yet. The plan (see the README's architecture section): ``locomotion.make_env("Ant",
num_envs, backend="envpool" | "gymnasium" | "warp" | "isaacgym")`` returning the same protocol
as ``podracer.envs``, so agents, ``podracer.train`` and the tournament work unchanged. Until then
any gymnasium MuJoCo task runs through the adapter:
``podracer.make_gym_env("Ant-v5", num_envs=8)`` (needs ``pip install "podracer-rl[locomotion]"``).
"""

__all__: list[str] = []
