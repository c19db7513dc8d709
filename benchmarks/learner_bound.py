"""The learner bound: each agent's gradient updates per second against the bare arithmetic of its update.

What it measures
----------------
For each agent on the networks and minibatch of a preset (SAC, TD3, DDPG on ``pendulum``, DQN on
``cartpole``, PPO on ``pendulum`` and on ``stock_trading``), in the same run, round-robin:

- **agent**: the agent's own update, as its training loop calls it. Off-policy: one
  ``agent.update(agent.buffer.sample(batch_size))`` (replay sampling included; TD3 timed over
  whole ``policy_delay`` cycles, so its delayed actor steps count at their share). PPO: its
  ``ppo_update`` over one rollout of the preset's size, every epoch (no early stop), per minibatch
  step.
- **bare**: the bare forward + backward + optimizer arithmetic of the same networks on the same
  batch, as a plain loop of torch ops: weights as plain tensors, every network pass the update
  makes (target networks included, with or without gradients as in the update), one loss
  summing the outputs, one backward, one fused Adam step over the same parameters, and one
  ``_foreach_lerp_`` for the target networks. No sampling, no TD target, no clipping, no
  metrics. What the agent spends beyond it is its algorithm's own arithmetic and its Python.
- **matmul**: the update's matrix products alone (forward and backward, counted from the
  shapes) at the rate of one large matrix product measured in the same run: the time no eager
  loop can go below on this CPU. Its share of the agent's time says what bounds the update: a
  small share, per-op overhead (Python, dispatch, autograd); a large one, arithmetic.

Timing: every entry gets ``--repeats`` windows of ``--window`` seconds in turn (round-robin, so
load from other processes hits all alike), measured on the thread's CPU clock (``--clock cpu``,
the default: on a shared machine the wall clock also counts other processes' turns) or the wall
clock (``--clock wall``); the best window is reported, the median beside it. One torch thread
(``--threads``), as the learning benchmarks.

How to run
----------
``.venv/bin/python benchmarks/learner_bound.py`` (about a minute; ``--agents sac td3`` for some;
``--tiny`` for a smoke run).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import podracer  # noqa: E402
from podracer.agents import ppo as ppo_module  # noqa: E402

CASES = ("sac", "td3", "ddpg", "dqn", "ppo", "ppo_stock")


# ---------------------------------------------------------------------------- bare networks
Layer = tuple[torch.Tensor, torch.Tensor]  # (weight, bias): (out, in) and (out,), or (K, in, out) and (K, 1, out)


def copy_layers(module: nn.Module, grad: bool) -> list[Layer]:
    """A network's weights as plain tensors, layer by layer: copies, so the bare loop never
    touches the agent. ``nn.Linear`` layers (MLPs) or ``EnsembleLinear`` ones (critic ensembles)."""
    layers = []
    for m in module.modules():
        if isinstance(m, nn.Linear) or type(m).__name__ == "EnsembleLinear":
            layers.append((m.weight.detach().clone().requires_grad_(grad), m.bias.detach().clone().requires_grad_(grad)))
    return layers


def forward(x: torch.Tensor, layers: list[Layer], activation: Callable[[torch.Tensor], torch.Tensor] = torch.relu,
            detach: bool = False) -> torch.Tensor:
    """The MLP (or, for 3-d weights, the ensemble: ``x`` broadcast to every member) on ``x``;
    ``detach``: gradients reach the input, not the weights (an actor's loss through a critic)."""
    if layers[0][0].dim() == 3:
        x = x.expand(layers[0][0].shape[0], -1, -1)
    for i, (w, b) in enumerate(layers):
        w, b = (w.detach(), b.detach()) if detach else (w, b)
        x = torch.baddbmm(b, x, w) if w.dim() == 3 else nn.functional.linear(x, w, b)
        if i < len(layers) - 1:
            x = activation(x)
    return x


def params(*nets: list[Layer]) -> list[torch.Tensor]:
    return [t for net in nets for layer in net for t in layer]


def macs(layers: list[Layer], rows: int) -> int:
    """Multiply-adds of one forward pass of ``rows`` inputs."""
    return sum(rows * w[..., 0, :].numel() * w.shape[-2] if w.dim() == 3 else rows * w.numel() for w, _ in layers)


def pass_flops(layers: list[Layer], rows: int, grad: str) -> float:
    """FLOPs of one pass's matrix products: the forward (2 per multiply-add) and, by ``grad``,
    the backward: ``"weights"`` (weight and input gradients: twice the forward, less the first
    layer's input gradient), ``"input"`` (input gradients only), ``"none"``."""
    f = 2.0 * macs(layers, rows)
    first = 2.0 * macs(layers[:1], rows)
    return f + {"weights": 2 * f - first, "input": f, "none": 0.0}[grad]


# ---------------------------------------------------------------------------- the cases
@dataclasses.dataclass
class Case:
    name: str
    what: str  # networks and batch, in words
    agent_step: Callable[[], None]  # ``updates`` gradient updates by the agent
    bare_step: Callable[[], None]  # the same ``updates`` of bare arithmetic
    updates: int
    flops: float  # matrix-product FLOPs of one update


def offpolicy_case(name: str, task: str, tiny: bool) -> Case:
    preset = podracer.get_preset(name, task)
    env = podracer.make_env(task, preset.num_envs)
    agent = podracer.make_agent(name, env, seed=0, preset=task, verbose=False)
    obs, _ = env.reset(seed=0)
    while agent.updates == 0:  # past warm-up: the buffer holds real transitions
        obs, _ = agent.train_step(env, obs)
    cfg, m, B = agent.config, agent.model, agent.config.batch_size
    cycle = getattr(cfg, "policy_delay", 1)

    def agent_step() -> None:
        for _ in range(cycle):
            agent.updates += 1
            agent.update(agent.buffer.sample(B))

    batch = agent.buffer.sample(B)
    s, s2 = batch.obs, batch.next_obs
    flops = 0.0
    if name == "dqn":
        q, q_target = copy_layers(m.q, True), copy_layers(m.q_target, False)
        opt = torch.optim.Adam(params(q), lr=1e-3, fused=True)
        online_next = cfg.double  # Double DQN also runs the online net on s'

        def bare() -> None:
            with torch.no_grad():
                y = forward(s2, q_target).mean() + (forward(s2, q).mean() if online_next else 0.0)
            loss = (forward(s, q) - y).pow(2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            torch._foreach_lerp_(params(q_target), params(q), 1.0)

        flops = pass_flops(q_target, B, "none") * (1 + online_next) + pass_flops(q, B, "weights")
        what = f"Q {tuple(cfg.hidden_sizes)}, batch {B}"
        return Case(name, what, agent_step, bare, cycle, flops)

    a = batch.actions
    actor = copy_layers(m.actor, True)
    critic, critic_target = copy_layers(m.critic, True), copy_layers(m.critic_target, False)
    actor_target = copy_layers(m.actor_target, False) if hasattr(m, "actor_target") else None
    extra = [m.log_alpha.detach().clone().requires_grad_(True)] if name == "sac" else []
    opt = torch.optim.Adam([*params(actor, critic), *extra], lr=1e-3, fused=True)
    targets, sources = params(critic_target, *([actor_target] if actor_target else [])), params(
        critic, *([actor] if actor_target else []))
    act_dim = a.shape[-1]

    def policy(x: torch.Tensor, net: list[Layer]) -> torch.Tensor:
        return torch.tanh(forward(x, net)[..., :act_dim])

    def bare_update(with_actor: bool) -> None:
        with torch.no_grad():  # the target: the next action, then the target critic
            a2 = policy(s2, actor_target if actor_target else actor)
            y = forward(torch.cat([s2, a2], -1), critic_target).mean(0)
        loss = (forward(torch.cat([s, a], -1), critic) - y).pow(2).mean()
        if with_actor:  # the actor's loss through the critic, its weights detached
            loss = loss - forward(torch.cat([s, policy(s, actor)], -1), critic, detach=True).mean()
            loss = loss + sum(x.sum() for x in extra)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if with_actor or name == "sac":  # TD3 moves its targets with its delayed actor step
            torch._foreach_lerp_(targets, sources, cfg.tau)

    def bare() -> None:
        for i in range(cycle):
            bare_update(with_actor=i == 0)

    mu_target = actor_target if actor_target else actor
    critic_flops = pass_flops(mu_target, B, "none") + pass_flops(critic_target, B, "none") + \
        pass_flops(critic, B, "weights")
    actor_flops = pass_flops(actor, B, "weights") + pass_flops(critic, B, "input")
    flops = critic_flops + actor_flops / cycle
    ens = f"{len(critic[0][0])} critics" if critic[0][0].dim() == 3 else "1 critic"
    what = f"actor + {ens} {tuple(cfg.hidden_sizes)}, batch {B}" + (f", actor every {cycle}" if cycle > 1 else "")
    return Case(name, what, agent_step, bare, cycle, flops)


def ppo_case(name: str, tiny: bool) -> Case:
    if name == "ppo_stock":
        import finance
        from finance.demo import train_env

        preset = podracer.get_preset("ppo", "stock_trading")
        env = train_env(finance.prepare_market(), preset.num_envs)
    else:
        preset = podracer.get_preset("ppo", "pendulum")
        env = podracer.make_env("pendulum", preset.num_envs)
    agent = podracer.make_agent("ppo", env, seed=0, verbose=False)
    cfg = dataclasses.replace(agent.config, target_kl=None)  # every epoch: a fixed amount of work
    if tiny:
        cfg = dataclasses.replace(cfg, update_epochs=1)
    n = cfg.rollout_size(env.num_envs)
    B = cfg.minibatch_size(env.num_envs)
    steps = cfg.update_epochs * (n // B)
    obs_dim, act_dim = agent.obs_dim, env.single_action_space.shape[0]
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a rollout of the preset's size: standardised observations, actions near the policy
        obs = torch.randn(n, obs_dim, generator=g)
        actions = torch.randn(n, act_dim, generator=g) * 0.5
        logprobs, _ = agent.model.log_prob_entropy(obs, actions)
        values = agent.model.value(obs)
    rollout = ppo_module.Rollout(obs, actions, logprobs, values, torch.randn(n, generator=g),
                                 values + torch.randn(n, generator=g))

    def agent_step() -> None:
        ppo_module.ppo_update(agent.model, agent.optimizer, rollout, cfg, agent.generator)

    activation = {"tanh": torch.tanh, "relu": torch.relu}.get(cfg.activation, torch.tanh)
    actor, critic = copy_layers(agent.model.actor, True), copy_layers(agent.model.critic, True)
    log_std = agent.model.log_std.detach().clone().requires_grad_(True)
    opt = torch.optim.Adam([*params(actor, critic), log_std], lr=cfg.learning_rate, eps=cfg.adam_eps, fused=True)
    mb_obs = obs[:B]

    def bare() -> None:
        for _ in range(steps):
            loss = forward(mb_obs, actor, activation).mean() + log_std.sum() + forward(mb_obs, critic, activation).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    flops = pass_flops(actor, B, "weights") + pass_flops(critic, B, "weights")
    task = "stock_trading" if name == "ppo_stock" else "pendulum"
    what = (f"{task}: actor + critic {tuple(cfg.hidden_sizes)}, obs {obs_dim}, minibatch {B}, "
            f"{steps} steps a rollout")
    return Case(name, what, agent_step, bare, steps, flops)


def make_case(name: str, tiny: bool) -> Case:
    if name.startswith("ppo"):
        return ppo_case(name, tiny)
    return offpolicy_case(name, "cartpole" if name == "dqn" else "pendulum", tiny)


# ---------------------------------------------------------------------------- timing
def measure(steps: dict[str, Callable[[], None]], window: float, repeats: int,
            clock: Callable[[], float]) -> dict[str, tuple[float, float]]:
    """{name: (best, median) calls per second}: ``repeats`` rounds, each giving every entry one
    ``window``-second window in turn."""
    for step in steps.values():
        for _ in range(2):
            step()
    rates: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            k, t0 = 0, clock()
            while (elapsed := clock() - t0) < window:
                step()
                k += 1
            rates[name].append(k / elapsed)
    return {name: (max(r), statistics.median(r)) for name, r in rates.items()}


def matmul_flops_per_s(clock: Callable[[], float], window: float, repeats: int) -> float:
    """This CPU's matrix-product rate, one thread, from a 512 x 512 x 512 float32 product: best window."""
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    rate = measure({"mm": lambda: torch.mm(a, b)}, window, repeats, clock)["mm"][0]
    return rate * 2 * 512**3


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", nargs="+", choices=CASES, default=list(CASES))
    ap.add_argument("--window", type=float, default=0.3, help="seconds per timing window")
    ap.add_argument("--repeats", type=int, default=7, help="timing windows per entry")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="the thread's CPU time (default; robust to other processes) or wall-clock time")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--tiny", action="store_true", help="a smoke run: short windows, one epoch for PPO")
    args = ap.parse_args(argv)
    if args.tiny:
        args.window, args.repeats = 0.02, 1
    torch.set_num_threads(args.threads)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    print(f"learner bound: torch {torch.__version__}, {args.threads} torch thread(s), {os.cpu_count()} cores, "
          f"{args.clock} clock, best of {args.repeats} windows of {args.window} s; "
          f"load average before {os.getloadavg()[0]:.1f}", flush=True)
    cases = [make_case(name, args.tiny) for name in args.agents]
    steps = {}
    for c in cases:
        steps[f"{c.name} agent"] = c.agent_step
        steps[f"{c.name} bare"] = c.bare_step
    rates = measure(steps, args.window, args.repeats, clock)
    peak = matmul_flops_per_s(clock, args.window, args.repeats)

    print(f"\nmatrix products: {peak / 1e9:.1f} GFLOP/s (512 x 512 x 512 float32, best window)\n")
    head = (f"{'agent':10s} {'updates/s':>10s} {'median':>8s} {'bare/s':>9s} {'agent/bare':>10s} "
            f"{'matmul share':>12s}  networks and batch")
    print(head)
    results: dict[str, dict[str, float]] = {}
    for c in cases:
        agent_best, agent_med = (r * c.updates for r in rates[f"{c.name} agent"])
        bare_best = rates[f"{c.name} bare"][0] * c.updates
        matmul_s = c.flops / peak  # seconds of matrix products per update, at the large product's rate
        results[c.name] = {"agent_per_s": agent_best, "agent_median_per_s": agent_med, "bare_per_s": bare_best,
                           "agent_of_bare": agent_best / bare_best, "matmul_share": matmul_s * agent_best,
                           "matmul_per_s": 1 / matmul_s}
        r = results[c.name]
        print(f"{c.name:10s} {agent_best:10,.0f} {agent_med:8,.0f} {bare_best:9,.0f} {r['agent_of_bare']:10.0%} "
              f"{r['matmul_share']:12.0%}  {c.what}")
    print(f"\nagent/bare: the agent's updates per second as a share of the bare arithmetic's (100%: at the "
          f"bound). matmul share: the update's matrix products at {peak / 1e9:.0f} GFLOP/s as a share of the "
          f"agent's time (small: overhead-bound; large: arithmetic-bound). Load average after: "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores.")
    return results


if __name__ == "__main__":
    main()
