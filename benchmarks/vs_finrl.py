"""Podracer vs FinRL's own stack (its StockTradingEnv + Stable-Baselines3 PPO): time and env steps to the same target.

    FINRL_ENV_FILE=.venv/finrl-src/finrl/meta/env_stock_trading/env_stocktrading.py \\
        .venv/bin/python benchmarks/vs_finrl.py [--quick] [--finrl-cap 600] [--seeds 0 1 2]

(``make .venv/finrl-src`` installs FinRL 0.3.7's files without their dependencies; the env file is
found there by default.)

The task: the bundled 20-stock sample as ``finance.prepare_market()`` splits it (train 2005-2016,
validation 2017-2018, test 2019-2022; indicators scaled on train), hmax 100 shares, cost 0.1%,
cash 1e6, no turbulence switch. Both sides train on the training years only, one after the other
in this process, on one torch thread. Podracer trains once per seed of ``--seeds`` (default 0, 1,
2: seconds each; its env steps to the target vary several-fold from seed to seed, and seed 0 is
its luckiest), FinRL once, from the first seed (minutes).

- **FinRL**: FinRL 0.3.7's ``StockTradingEnv`` (its file, loaded by path as in
  ``benchmarks/stock_env.py``) on the training years in FinRL's long layout, with the same scaled
  indicators as ours as its ``tech_indicator_list`` (FinRL's tutorial feeds raw ones; these help
  it); one env, one episode = the whole training period, as in FinRL's tutorial (``get_sb_env``:
  a ``DummyVecEnv`` of one). Agent: SB3 ``PPO("MlpPolicy")`` with the tutorial's ``PPO_PARAMS``
  (FinRL's ``examples/Stock_NeurIPS2018_2_Train.ipynb``: ``n_steps=2048, ent_coef=0.01,
  learning_rate=0.00025, batch_size=128``; FinRL 0.3.7's own ``config.py`` has ``batch_size=64``),
  SB3's defaults otherwise, ``reward_scaling=1e-4`` as the tutorial. The tutorial trains 200,000
  steps; here it trains until the target, its step budget or ``--finrl-cap`` seconds.
- **Podracer**: ``finance.demo.train_env`` (128 accounts, one-year episodes from random days,
  float32) and ``make_agent("ppo", env)``, which picks the ``stock_trading`` preset; up to the
  preset's 393,216 steps or ``--cap`` seconds.

Evaluation, one function for both (``evaluate_policy``): the deterministic policy trades one
account through a whole split in our env (``finance.demo.eval_env``: the tournament's score), and
return and Sharpe come from its daily account values. FinRL's agent sees exactly the state its
own env gives (cash, closes, holdings, indicators, in FinRL's order), built from the account; its
actions are filled by our env's rule (round to the nearest share, a cash shortfall scales all buys;
FinRL truncates and buys largest first), the same rule the target and our agent are scored by.
Every ``--eval-every`` env steps (each side at its first chance after it: FinRL between rollouts),
the validation score. Two times per side (``podracer.holding``): to the first score at or above
the target, and to a target that holds (the first score at the target after which the next
``--hold-evals`` (5) scores all stay within ``--margin`` (2 %-points) of it); each side trains
until its target has held that long. Evaluation time is not charged to either side.

Target: equal-weight buy-and-hold's return over the validation years with the same costs
(``finance.buy_and_hold``: +20.3%). If FinRL never reaches it, the script also compares at the
best score FinRL did reach ("equal quality": the first time each side scored at least that), so
the ratio is measured at a level both reach. Test Sharpe: each side's best-validated policy on the
test years, through the same function. Printed: a row per run (per seed for Podracer) with wall
time (training only) and env steps to the target, steps per second, best validation score, test
return and Sharpe; then the speed-up, FinRL's time over each Podracer seed's, as the median over
the seeds with its range (the smallest is the worst seed's), and the load average. A side that
did not reach the target shows ``>`` its training time: the speed-up against it is a lower bound
(FinRL) or an upper bound (Podracer).

``--quick``: caps of 60 s (ours) and 120 s (FinRL), about 4 minutes in all. ``--tiny``: seconds,
for the test that keeps this script working.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

import podracer  # noqa: E402
from podracer.holding import EvalLog  # noqa: E402
from benchmarks.stock_env import finrl_frame, load_finrl_env  # noqa: E402
from finance.backtest import buy_and_hold  # noqa: E402
from finance.demo import eval_env, train_env  # noqa: E402
from finance.market import MarketData, prepare_market  # noqa: E402
from finance.overfitting import sharpe_ratio  # noqa: E402

HMAX, COST, CASH = 100, 1e-3, 1e6
# FinRL's tutorial (examples/Stock_NeurIPS2018_2_Train.ipynb), as passed to DRLAgent.get_model("ppo", ...).
FINRL_PPO_PARAMS = {"n_steps": 2048, "ent_coef": 0.01, "learning_rate": 0.00025, "batch_size": 128}
FINRL_DEFAULT_FILE = ROOT / ".venv/finrl-src/finrl/meta/env_stock_trading/env_stocktrading.py"

Policy = Callable[[torch.Tensor, dict], torch.Tensor]  # (obs, info) -> actions, as finance's policies


# ---------------------------------------------------------------------------- one evaluation for both
def evaluate_policy(policy: Policy, market: MarketData, split: str) -> dict[str, float]:
    """% return and annualised Sharpe of one deterministic account over ``split``, from its daily values."""
    env = eval_env(market, split)
    obs, info = env.reset()
    values = [float(env.value[0])]
    while True:
        obs, _, terminated, truncated, info = env.step(policy(obs, info))
        values.append(float(info["account_value"][0]))
        if bool(terminated[0] or truncated[0]):
            break
    v = np.asarray(values)
    return {"return_pct": 100.0 * (v[-1] / v[0] - 1.0), "sharpe": float(sharpe_ratio(v[1:] / v[:-1] - 1.0, 252))}


def podracer_policy(agent: Any) -> Policy:
    return lambda obs, info: agent.act(obs, deterministic=True)


def finrl_state(obs: torch.Tensor, info: dict, num_stocks: int) -> np.ndarray:
    """The state FinRL's env would show for this account: [cash, closes (S), holdings (S),
    indicators feature by feature (F x S)]. The indicators are the tail of our observation, in
    FinRL's order (``StockTradingVecEnv.obs_names``); the rest is the exact account
    (``info["account"]``). ``check_finrl_state`` compares it with FinRL's own."""
    a = info["account"]
    indicators = obs[:, 1 + 2 * num_stocks:].to(a["cash"].dtype)  # (1, F*S)
    return torch.cat([a["cash"][:, None], a["prices"], a["holdings"], indicators], 1).double().numpy()


def finrl_policy(model: Any, num_stocks: int) -> Policy:
    """SB3's deterministic action on FinRL's state of the account."""
    def act(obs: torch.Tensor, info: dict) -> torch.Tensor:
        action, _ = model.predict(finrl_state(obs, info, num_stocks), deterministic=True)
        return torch.as_tensor(action, dtype=torch.float32).reshape(1, -1)
    return act


def make_finrl_env(env_cls: type, market: MarketData, split: str) -> Any:
    """FinRL's StockTradingEnv on ``split`` in its long layout, with our scaled indicators."""
    close, features = market.close[split], market.features[split]
    df = finrl_frame(close, features, pd.Series(0.0, index=close.index))  # no turbulence switch, as FinRL trains
    S, indicators = close.shape[1], list(dict.fromkeys(features.columns.get_level_values(0)))
    return env_cls(df=df, stock_dim=S, hmax=HMAX, initial_amount=CASH, num_stock_shares=[0] * S,
                   buy_cost_pct=[COST] * S, sell_cost_pct=[COST] * S, reward_scaling=1e-4,
                   state_space=1 + 2 * S + len(indicators) * S, action_space=S, tech_indicator_list=indicators,
                   print_verbosity=10**9)


def check_finrl_state(env_cls: type, market: MarketData, days: int = 20) -> None:
    """``finrl_state`` is FinRL's own state, day by day over the validation years' first ``days``
    (no trades: zero actions; the indicators are float32 in our env, hence the tolerance)."""
    theirs, ours = make_finrl_env(env_cls, market, "valid"), eval_env(market, "valid")
    theirs.reset()
    obs, info = ours.reset()
    S = ours.num_stocks
    for _ in range(days):
        np.testing.assert_allclose(finrl_state(obs, info, S)[0], np.asarray(theirs.state, dtype=np.float64),
                                   rtol=1e-6, atol=1e-6)
        theirs.step(np.zeros(S, np.float32))
        obs, _, _, _, info = ours.step(torch.zeros(1, S))


# ---------------------------------------------------------------------------- a training run's record
@dataclass
class Run:
    name: str
    seed: int = 0
    setup_s: float = 0.0
    train_s: float = 0.0  # training seconds, evaluations excluded
    steps: int = 0
    evals: list[tuple[float, int, float]] = field(default_factory=list)  # (train_s, steps, valid return %)
    best: float = -math.inf
    best_policy: Any = None  # a frozen copy, evaluated on the test years at the end
    test: dict[str, float] = field(default_factory=dict)
    log: EvalLog | None = None  # the same scores, for the time to a target that holds

    def record(self, score: float, snapshot: Callable[[], Any]) -> None:
        self.evals.append((self.train_s, self.steps, score))
        if self.log is not None:
            self.log.add(self.steps, self.train_s, score)
        if score > self.best:
            self.best, self.best_policy = score, snapshot()

    def first_at(self, level: float) -> tuple[float, int] | None:
        """(train seconds, env steps) of the first evaluation scoring at least ``level``."""
        return next(((s, n) for s, n, score in self.evals if score >= level), None)

    def held(self) -> tuple[float, int] | None:
        """(train seconds, env steps) of the holding target (see ``podracer.holding``), or None."""
        if self.log is None or not self.log.done():
            return None
        r = self.log.result()
        return r.hold_seconds, r.hold_steps

    def stop(self) -> bool:
        """The target has held (``log.done()``): training can stop."""
        return self.log is not None and self.log.done()


def train_podracer(market: MarketData, log: EvalLog, seed: int, cap_s: float, eval_every: int,
                   budget: int | None) -> Run:
    t0 = time.perf_counter()
    env = train_env(market)
    run = Run(f"Podracer PPO (stock_trading preset, {env.num_envs} accounts), seed {seed}", seed, log=log)
    agent = podracer.make_agent("ppo", env, seed=seed, verbose=False)
    run.setup_s = time.perf_counter() - t0
    budget = budget or agent.preset.total_steps
    next_eval, clock = eval_every, time.perf_counter()
    for row in podracer.iterate_training(agent, env, budget, seed=seed):
        run.steps = int(row["global_step"])
        if run.steps >= next_eval or run.steps >= budget:
            run.train_s += time.perf_counter() - clock
            score = evaluate_policy(podracer_policy(agent), market, "valid")["return_pct"]
            run.record(score, lambda: type(agent).from_checkpoint(agent.checkpoint()))
            next_eval = (run.steps // eval_every + 1) * eval_every
            if run.stop() or run.train_s >= cap_s:
                break
            clock = time.perf_counter()
    run.test = evaluate_policy(podracer_policy(run.best_policy), market, "test")
    return run


def train_finrl(env_cls: type, market: MarketData, log: EvalLog, seed: int, cap_s: float, eval_every: int,
                budget: int, ppo_params: dict[str, Any]) -> Run:
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    class Deadline(BaseCallback):
        """Stops learn() once the training clock passes the cap (checked every env step)."""

        def __init__(self, deadline: float):
            super().__init__()
            self.deadline = deadline

        def _on_step(self) -> bool:
            return time.perf_counter() < self.deadline

    run = Run(f"FinRL StockTradingEnv + SB3 PPO {ppo_params}, seed {seed}", seed, log=log)
    t0 = time.perf_counter()
    env = make_finrl_env(env_cls, market, "train")
    S = env.stock_dim
    env_train, _ = env.get_sb_env()  # FinRL's own wrapping: a DummyVecEnv of one
    model = PPO("MlpPolicy", env_train, seed=seed, verbose=0, device="cpu", **ppo_params)
    run.setup_s = time.perf_counter() - t0
    while run.steps < budget and run.train_s < cap_s:
        clock = time.perf_counter()
        model.learn(eval_every, reset_num_timesteps=False, progress_bar=False,
                    callback=Deadline(clock + cap_s - run.train_s))
        run.train_s += time.perf_counter() - clock
        run.steps = int(model.num_timesteps)
        score = evaluate_policy(finrl_policy(model, S), market, "valid")["return_pct"]
        run.record(score, lambda: copy.deepcopy(model.policy.state_dict()))
        if run.stop():
            break
    model.policy.load_state_dict(run.best_policy)
    run.test = evaluate_policy(finrl_policy(model, S), market, "test")
    return run


# ---------------------------------------------------------------------------- report
def report(ours: list[Run], finrl: Run | None, target: float, cap: dict[str, float]) -> None:
    print(f"\n| side | setup s | train s to target | env steps to target | train s to a holding target | "
          f"env steps/s | best valid % | test return % | test Sharpe |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key, r in [("podracer", run) for run in ours] + ([("finrl", finrl)] if finrl else []):
        hit, held = r.first_at(target), r.held()
        when = f"{hit[0]:.1f}" if hit else f"> {r.train_s:.0f} (not reached; cap {cap[key]:.0f} s)"
        steps = f"{hit[1]:,}" if hit else f"> {r.steps:,}"
        hold = f"{held[0]:.1f} ({held[1]:,} steps)" if held else f"> {r.train_s:.0f} (not held)"
        print(f"| {r.name} | {r.setup_s:.1f} | {when} | {steps} | {hold} | {r.steps / max(r.train_s, 1e-9):,.0f} | "
              f"{r.best:+.1f} | {r.test['return_pct']:+.1f} | {r.test['sharpe']:.2f} |")
    if finrl is None:
        return
    theirs = finrl.held()
    mine = [(r.seed, r.held()) for r in ours]
    if any(h for _, h in mine):
        t_finrl = theirs[0] if theirs else finrl.train_s
        ratios = [t_finrl / max(h[0], 1e-9) for _, h in mine if h]
        missed = [str(seed) for seed, h in mine if not h]
        print(f"to a target that holds: median {np.median(ratios):,.0f}x sooner than FinRL"
              + ("" if theirs else " (FinRL's target never held: lower bounds)")
              + (f"; Podracer's did not hold on seed(s) {', '.join(missed)}" if missed else ""))
    else:
        print("to a target that holds: Podracer's target held on no seed")
    levels = [("target", target)] + ([("equal quality: FinRL's best", finrl.best)] if finrl.best < target else [])
    for label, level in levels:
        b = finrl.first_at(level)
        t_finrl, n_finrl = (b[0], f"{b[1]:,}") if b else (finrl.train_s, f"> {finrl.steps:,}")
        bound = "" if b else " (FinRL never reached it: lower bounds)"
        hits = {r.seed: r.first_at(level) for r in ours}
        missed = [seed for seed, a in hits.items() if a is None]
        reached = {seed: a for seed, a in hits.items() if a is not None}
        if not reached:
            print(f"at {label} ({level:+.1f}%): Podracer did not reach it on any seed")
            continue
        ours_s = ", ".join(f"seed {seed} {a[0]:.1f} s / {a[1]:,} steps" for seed, a in reached.items())
        ratios = [t_finrl / max(a[0], 1e-9) for a in reached.values()]
        spread = f"median {np.median(ratios):,.0f}x" + (
            f" (range {min(ratios):,.0f}-{max(ratios):,.0f}x over {len(ratios)} seeds)" if len(ratios) > 1 else "")
        miss = f"; Podracer seed(s) {', '.join(map(str, missed))} did not reach it" if missed else ""
        print(f"at {label} ({level:+.1f}%): Podracer {ours_s}; FinRL {t_finrl:.1f} s / {n_finrl} steps: "
              f"{spread} sooner{bound}{miss} (aim: 100x)")


def main(argv: list[str] | None = None) -> dict[str, Run]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0, help="FinRL's seed, and Podracer's first")
    ap.add_argument("--seeds", type=int, nargs="+", default=None,
                    help="Podracer's seeds (default: --seed and the two after it)")
    ap.add_argument("--cap", type=float, default=300.0, help="Podracer's training seconds at most")
    ap.add_argument("--finrl-cap", type=float, default=600.0, help="FinRL's training seconds at most")
    ap.add_argument("--finrl-steps", type=int, default=200_000, help="FinRL's step budget (the tutorial's)")
    ap.add_argument("--eval-every", type=int, default=2048,
                    help="env steps between validation scores (default: after every update of either side)")
    ap.add_argument("--target", type=float, default=None, help="validation %% return (default: buy-and-hold's)")
    ap.add_argument("--margin", type=float, default=2.0, help="%%-points below the target a held target may fall")
    ap.add_argument("--hold-evals", type=int, default=5,
                    help="scores after the holding one that must stay within --margin; each side trains on until then")
    ap.add_argument("--skip-finrl", action="store_true")
    ap.add_argument("--quick", action="store_true", help="caps of 60 s (ours) and 120 s (FinRL)")
    ap.add_argument("--tiny", action="store_true", help="seconds, for the test: tiny budgets and rollouts")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    ppo_params, our_budget = dict(FINRL_PPO_PARAMS), None
    if args.quick:
        args.cap, args.finrl_cap = 60.0, 120.0
    if args.tiny:  # every code path once: a few rollouts each
        args.cap, args.finrl_cap, args.eval_every, args.finrl_steps, our_budget = 30.0, 30.0, 2048, 64, 2048
        ppo_params.update(n_steps=64, batch_size=64, n_epochs=1)
    if not os.environ.get("FINRL_ENV_FILE") and FINRL_DEFAULT_FILE.is_file():
        os.environ["FINRL_ENV_FILE"] = str(FINRL_DEFAULT_FILE)

    market = prepare_market()
    close = market.close["valid"]
    equity = buy_and_hold(close, np.full(close.shape[1], 1.0 / close.shape[1]), CASH, COST).account_value
    bh = 100.0 * float(equity.iloc[-1] / equity.iloc[0] - 1.0)
    target = bh if args.target is None else args.target
    seeds = args.seeds or [args.seed, args.seed + 1, args.seed + 2]
    print(f"Podracer vs FinRL + SB3 PPO: 20 stocks, train 2005-2016, validation 2017-2018, test 2019-2022; target "
          f"{target:+.1f}% on the validation years (equal-weight buy-and-hold {bh:+.1f}%); Podracer seeds "
          f"{', '.join(map(str, seeds))}, FinRL seed {args.seed}; 1 torch thread; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    ours = [train_podracer(market, EvalLog(target, args.margin, args.hold_evals), seed, args.cap, args.eval_every,
                           our_budget) for seed in seeds]
    runs = {"podracer": ours[0], **{f"podracer seed {r.seed}": r for r in ours[1:]}}
    caps = {"podracer": args.cap, "finrl": args.finrl_cap}
    if args.skip_finrl:
        print("FinRL: skipped (--skip-finrl)")
    else:
        env_cls, notes = load_finrl_env()
        if env_cls is None:
            print("FinRL: not found, ours alone (" + "; ".join(notes) + "); run `make .venv/finrl-src`")
        else:
            # FinRL evaluates (and SB3 trains) between rollouts: the cadence rounds up to whole rollouts.
            check_finrl_state(env_cls, market)
            print("FinRL: the state its agent is evaluated on is its env's own (checked over 20 days)")
            every = math.ceil(args.eval_every / ppo_params["n_steps"]) * ppo_params["n_steps"]
            if args.tiny:
                every = ppo_params["n_steps"]
            runs["finrl"] = train_finrl(env_cls, market, EvalLog(target, args.margin, args.hold_evals), args.seed,
                                        args.finrl_cap, every,
                                        args.finrl_steps, ppo_params)
    report(ours, runs.get("finrl"), target, caps)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return runs


if __name__ == "__main__":
    main()
