"""Env steps per second: StockTradingVecEnv vs FinRL's StockTradingEnv, on the bundled sample.

    .venv/bin/python benchmarks/stock_env.py [--threads 1 2] [--years 10] [--window 0.3] [--repeats 7]

Same data for both: the 20-stock sample (``finance.data.load_prices(source="sample")``), the last
``--years`` years, FinRL's 8 default indicators (``finance.features.add_features``); hmax 100,
cost 0.1%, initial cash 1e6, no turbulence switch (FinRL's training setting); random actions.

FinRL: ``import finrl`` is tried first. FinRL is not a Podracer dependency; if the import fails
(it pulls alpaca, elegantrl, ... through its package ``__init__``) the benchmark says so and, if
a copy of FinRL's ``env_stocktrading.py`` is on disk (``FINRL_ENV_FILE``, or a throwaway venv at
/tmp/finrlenv made with ``pip install --no-deps finrl``), loads that one file by path (it needs
only gymnasium, numpy, pandas, matplotlib and stable-baselines3, which we have). It always also
times ``FinRLStyleEnv`` below, a faithful single-env numpy/pandas re-implementation of FinRL's
per-step logic, and checks that it gives FinRL's account values when FinRL loads.

The bound: the bare tensor arithmetic of one step for 4096 accounts x 20 stocks (sells,
cash-limited buys, cash/holdings update, account value, building the observation), without
validation, info, episode bookkeeping or autoreset; the env's distance from it is its overhead.

Timing: for each torch thread count in ``--threads``, every entry gets ``--repeats`` windows of
``--window`` seconds, taken round-robin so that load from other processes hits all entries alike;
we print the best window (the machine's capability when nobody else runs) and the median. On
shared CPUs torch's multi-threaded kernels suffer most (a thread descheduled mid-op stalls the
others), hence the 1-thread rows; ``OMP_WAIT_POLICY=PASSIVE`` in the environment (set before
Python starts) makes the multi-thread rows sane there too. The load average is printed with the
results.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from finance.data import load_prices  # noqa: E402
from finance.env import StockTradingVecEnv  # noqa: E402
from finance.features import add_features  # noqa: E402

HMAX, COST, CASH = 100, 1e-3, 1e6


# ---------------------------------------------------------------------------- FinRL, re-implemented
class FinRLStyleEnv:
    """FinRL's ``StockTradingEnv`` step, reset and state updates (finrl 0.3.7,
    ``finrl/meta/env_stock_trading/env_stocktrading.py``) without plotting, printing and
    memory dumps. Same data layout: a long frame indexed by day number, one row per (day, tic);
    each step reads the day's rows with ``df.loc[day, :]`` and trades stock by stock in Python,
    sells first (most negative action first), then buys (largest first), each buy limited by the
    cash left. Per-step work kept because it is FinRL's cost: ``len(df.index.unique())`` and
    ``len(df.tic.unique())`` over the whole frame, the state rebuilt as a Python list, the
    asset/date/reward/action/state memories; and the first indicator slot doubling as a
    "cannot trade" flag."""

    def __init__(self, df: pd.DataFrame, stock_dim: int, hmax: int, initial_amount: float, buy_cost_pct: list[float],
                 sell_cost_pct: list[float], reward_scaling: float, tech_indicator_list: list[str],
                 turbulence_threshold: float | None = None, risk_indicator_col: str = "turbulence"):
        self.df, self.stock_dim, self.hmax, self.initial_amount = df, stock_dim, hmax, initial_amount
        self.buy_cost_pct, self.sell_cost_pct, self.reward_scaling = buy_cost_pct, sell_cost_pct, reward_scaling
        self.tech_indicator_list = tech_indicator_list
        self.turbulence_threshold, self.risk_indicator_col = turbulence_threshold, risk_indicator_col
        self.reset()

    def reset(self, seed: int | None = None) -> tuple[list[float], dict]:
        self.day = 0
        self.data = self.df.loc[self.day, :]
        self.state = ([self.initial_amount] + self.data.close.values.tolist() + [0] * self.stock_dim
                      + sum((self.data[tech].values.tolist() for tech in self.tech_indicator_list), []))
        self.asset_memory = [self.initial_amount]
        self.rewards_memory, self.actions_memory, self.state_memory = [], [], []
        self.date_memory = [self._get_date()]
        self.turbulence, self.cost, self.trades, self.terminal, self.reward = 0, 0, 0, False, 0.0
        return self.state, {}

    def _sell_stock(self, index: int, action: int) -> int:
        s, n = self.state, self.stock_dim
        if self.turbulence_threshold is not None and self.turbulence >= self.turbulence_threshold:
            if s[index + 1] > 0 and s[index + n + 1] > 0:  # clear out the position
                sell_num_shares = s[index + n + 1]
                s[0] += s[index + 1] * sell_num_shares * (1 - self.sell_cost_pct[index])
                s[index + n + 1] = 0
                self.cost += s[index + 1] * sell_num_shares * self.sell_cost_pct[index]
                self.trades += 1
                return sell_num_shares
            return 0
        if s[index + 2 * n + 1] != True:  # noqa: E712  (FinRL: first indicator slot as a flag)
            if s[index + n + 1] > 0:
                sell_num_shares = min(abs(action), s[index + n + 1])
                s[0] += s[index + 1] * sell_num_shares * (1 - self.sell_cost_pct[index])
                s[index + n + 1] -= sell_num_shares
                self.cost += s[index + 1] * sell_num_shares * self.sell_cost_pct[index]
                self.trades += 1
                return sell_num_shares
        return 0

    def _buy_stock(self, index: int, action: int) -> int:
        s, n = self.state, self.stock_dim
        if self.turbulence_threshold is not None and self.turbulence >= self.turbulence_threshold:
            return 0
        if s[index + 2 * n + 1] != True:  # noqa: E712
            available_amount = s[0] // (s[index + 1] * (1 + self.buy_cost_pct[index]))
            buy_num_shares = min(available_amount, action)
            s[0] -= s[index + 1] * buy_num_shares * (1 + self.buy_cost_pct[index])
            s[index + n + 1] += buy_num_shares
            self.cost += s[index + 1] * buy_num_shares * self.buy_cost_pct[index]
            self.trades += 1
            return buy_num_shares
        return 0

    def step(self, actions: np.ndarray):
        n = self.stock_dim
        self.terminal = self.day >= len(self.df.index.unique()) - 1
        if self.terminal:
            return self.state, self.reward, self.terminal, False, {}
        actions = (actions * self.hmax).astype(int)
        if self.turbulence_threshold is not None and self.turbulence >= self.turbulence_threshold:
            actions = np.array([-self.hmax] * n)
        begin_total_asset = self.state[0] + sum(np.array(self.state[1:n + 1]) * np.array(self.state[n + 1:2 * n + 1]))
        argsort_actions = np.argsort(actions)
        sell_index = argsort_actions[: np.where(actions < 0)[0].shape[0]]
        buy_index = argsort_actions[::-1][: np.where(actions > 0)[0].shape[0]]
        for index in sell_index:
            actions[index] = self._sell_stock(index, actions[index]) * (-1)
        for index in buy_index:
            actions[index] = self._buy_stock(index, actions[index])
        self.actions_memory.append(actions)
        self.day += 1
        self.data = self.df.loc[self.day, :]
        if self.turbulence_threshold is not None:
            if len(self.df.tic.unique()) == 1:
                self.turbulence = self.data[self.risk_indicator_col]
            elif len(self.df.tic.unique()) > 1:
                self.turbulence = self.data[self.risk_indicator_col].values[0]
        self.state = self._update_state()
        end_total_asset = self.state[0] + sum(np.array(self.state[1:n + 1]) * np.array(self.state[n + 1:2 * n + 1]))
        self.asset_memory.append(end_total_asset)
        self.date_memory.append(self._get_date())
        self.reward = end_total_asset - begin_total_asset
        self.rewards_memory.append(self.reward)
        self.reward = self.reward * self.reward_scaling
        self.state_memory.append(self.state)
        return self.state, self.reward, self.terminal, False, {}

    def _update_state(self) -> list[float]:
        n = self.stock_dim
        if len(self.df.tic.unique()) > 1:  # FinRL asks this every step, over the whole frame
            return ([self.state[0]] + self.data.close.values.tolist() + list(self.state[n + 1:2 * n + 1])
                    + sum((self.data[tech].values.tolist() for tech in self.tech_indicator_list), []))
        return ([self.state[0]] + [self.data.close] + list(self.state[n + 1:2 * n + 1])
                + sum(([self.data[tech]] for tech in self.tech_indicator_list), []))

    def _get_date(self) -> Any:
        return self.data.date.unique()[0] if len(self.df.tic.unique()) > 1 else self.data.date


def load_finrl_env() -> tuple[type | None, list[str]]:
    """FinRL's StockTradingEnv class (or None) and lines saying how it was (not) obtained."""
    notes = []
    try:
        from finrl.meta.env_stock_trading.env_stocktrading import StockTradingEnv
        return StockTradingEnv, ["import finrl: OK"]
    except Exception as e:  # noqa: BLE001 (any import failure means: not usable here)
        notes.append(f"import finrl: FAILED ({type(e).__name__}: {e})")
    candidates = [os.environ.get("FINRL_ENV_FILE", "")] + sorted(glob.glob(
        "/tmp/finrlenv/lib/python*/site-packages/finrl/meta/env_stock_trading/env_stocktrading.py"))
    path = next((p for p in candidates if p and Path(p).is_file()), None)
    if path is None:
        notes.append("no FinRL env_stocktrading.py on disk (set FINRL_ENV_FILE); comparing with the "
                     "re-implementation only")
        return None, notes
    try:
        spec = importlib.util.spec_from_file_location("finrl_env_stocktrading", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        notes.append(f"loaded FinRL's env module by path, bypassing finrl/__init__: {path}")
        return module.StockTradingEnv, notes
    except Exception as e:  # noqa: BLE001
        notes.append(f"loading {path} FAILED ({type(e).__name__}: {e}); comparing with the re-implementation only")
        return None, notes


def finrl_frame(close: pd.DataFrame, features: pd.DataFrame, turbulence: pd.Series) -> pd.DataFrame:
    """FinRL's long layout: columns date, tic, close, indicators..., turbulence; sorted by (date,
    tic); index = day number (as FinRL's ``data_split`` leaves it)."""
    long = features.stack(level="ticker", future_stack=True).reset_index().rename(columns={"ticker": "tic"})
    long.insert(2, "close", close.stack(future_stack=True).to_numpy())
    long["turbulence"] = np.repeat(turbulence.to_numpy(), close.shape[1])
    long = long.sort_values(["date", "tic"], ignore_index=True)
    long.index = long["date"].factorize()[0]
    return long


# ---------------------------------------------------------------------------- the bound
def make_bare_step(close: torch.Tensor, obs_table: torch.Tensor, n: int) -> Callable[[torch.Tensor], None]:
    """One step of the bare arithmetic for ``n`` accounts, state kept in a closure."""
    S, dtype = close.shape[1], close.dtype
    state = {"day": torch.zeros(n, dtype=torch.long), "cash": torch.full((n,), CASH, dtype=dtype),
             "holdings": torch.zeros(n, S, dtype=dtype)}
    last = close.shape[0] - 1

    def step(actions: torch.Tensor) -> None:
        day, cash, holdings = state["day"], state["cash"], state["holdings"]
        price = close.index_select(0, day)
        wanted = actions.clamp(-1, 1).mul_(HMAX).round_().to(dtype)
        sell = torch.minimum(wanted.neg(), holdings).clamp_(min=0)
        buy = wanted.clamp_(min=0)
        cash = cash + torch.linalg.vecdot(sell, price) * (1 - COST)
        cost = torch.linalg.vecdot(buy, price) * (1 + COST)
        fill = (cash / cost).clamp_(max=1.0).nan_to_num_(1.0)
        buy = buy.mul_(fill[:, None]).floor_()
        cash = cash - torch.linalg.vecdot(buy, price) * (1 + COST)
        holdings = holdings + buy.sub_(sell)
        day = (day + 1).remainder_(last)
        position_value = holdings * close.index_select(0, day)
        value = cash + position_value.sum(1)  # noqa: F841 (the reward's input)
        obs = obs_table.index_select(0, day)
        obs[:, 0] = cash / CASH
        obs[:, 1:1 + S] = position_value / CASH
        state.update(day=day, cash=cash, holdings=holdings)

    return step


# ---------------------------------------------------------------------------- timing
def measure(steps: dict[str, Callable[[int], Any]], window: float, repeats: int) -> dict[str, tuple[float, float]]:
    """{name: (best, median) calls per second}: ``repeats`` rounds, each giving every entry one
    ``window``-second window in turn, so that a burst of load from other processes hits all
    entries alike rather than whichever was being timed."""
    for step in steps.values():
        for i in range(3):
            step(i)
    rates: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            k, t0 = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - t0) < window:
                step(k)
                k += 1
            rates[name].append(k / elapsed)
    return {name: (max(r), statistics.median(r)) for name, r in rates.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch CPU thread counts to time")
    ap.add_argument("--years", type=int, default=10)
    ap.add_argument("--window", type=float, default=0.3, help="seconds per timing window")
    ap.add_argument("--repeats", type=int, default=7, help="timing windows per measurement")
    ap.add_argument("--num-envs", type=int, nargs="+", default=[1, 64, 1024, 4096])
    args = ap.parse_args()
    rng = np.random.default_rng(0)

    end = pd.Timestamp("2022-12-28")
    start = end - pd.DateOffset(years=args.years)
    prices = load_prices(None, start, end, source="sample")
    close, features = prices["close"], add_features(prices)
    turbulence = pd.Series(0.0, index=close.index, name="turbulence")  # switch off, as in FinRL training
    T, S = close.shape
    indicators = list(dict.fromkeys(features.columns.get_level_values(0)))
    print(f"StockTradingVecEnv benchmark: torch {torch.__version__}, cpu, {os.cpu_count()} cores, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}; load average before {os.getloadavg()[0]:.1f}")
    print(f"data: {S} stocks x {T} days ({close.index[0].date()} .. {close.index[-1].date()}), {len(indicators)} "
          f"indicators; hmax {HMAX}, cost {COST:.1%}, cash {CASH:,.0f}, random actions; "
          f"{args.repeats} windows of {args.window} s each")

    # -- FinRL
    df = finrl_frame(close, features, turbulence)
    kw = dict(stock_dim=S, hmax=HMAX, initial_amount=CASH, buy_cost_pct=[COST] * S, sell_cost_pct=[COST] * S,
              reward_scaling=1e-4, tech_indicator_list=indicators)
    FinRLEnv, notes = load_finrl_env()
    for line in notes:
        print("FinRL:", line)
    finrl_actions = [rng.uniform(-1, 1, S).astype(np.float32) for _ in range(64)]
    ours_like = FinRLStyleEnv(df, **kw)
    finrl = None
    if FinRLEnv is not None:
        finrl = FinRLEnv(df=df, num_stock_shares=[0] * S, state_space=1 + 2 * S + len(indicators) * S, action_space=S,
                         print_verbosity=10**9, **kw)
        finrl.reset()
        ours_like.reset()
        for i in range(600):  # fidelity of the re-implementation: same actions, same account
            finrl.step(finrl_actions[i % 64])
            ours_like.step(finrl_actions[i % 64])
        same = np.allclose(finrl.asset_memory, ours_like.asset_memory, rtol=1e-12)
        print(f"FinRL: re-implementation gives FinRL's account values over 600 random steps: {'yes' if same else 'NO'}")

    def finrl_step(env: Any) -> Callable[[int], None]:
        def step(i: int) -> None:
            if env.day >= T - 1:
                env.reset()
            env.step(finrl_actions[i % 64])
        return step

    def torch_step(step_fn: Callable[[torch.Tensor], Any], n: int) -> Callable[[int], None]:
        pool = [torch.rand(n, S, generator=torch.Generator().manual_seed(i)) * 2 - 1 for i in range(16)]
        return lambda i: step_fn(pool[i % 16])

    # name -> (step function, env-steps per call)
    steps: dict[str, tuple[Callable[[int], Any], int]] = {}
    if finrl is not None:
        steps["FinRL StockTradingEnv"] = (finrl_step(finrl), 1)
    steps["FinRL re-implementation (FinRLStyleEnv)"] = (finrl_step(ours_like), 1)
    reference = next(iter(steps))
    for n in args.num_envs:
        env = StockTradingVecEnv(close, features, num_envs=n, initial_cash=CASH, max_trade_shares=HMAX, cost_pct=COST)
        steps[f"StockTradingVecEnv num_envs={n}"] = (torch_step(env.step, n), n)
    n_big = max(args.num_envs)
    env32 = StockTradingVecEnv(close, features, num_envs=n_big, initial_cash=CASH, max_trade_shares=HMAX,
                               cost_pct=COST, dtype=torch.float32)
    steps[f"StockTradingVecEnv num_envs={n_big} float32"] = (torch_step(env32.step, n_big), n_big)
    for dtype in (torch.float64, torch.float32):  # the bound, for each accounting dtype
        tables = StockTradingVecEnv(close, features, num_envs=1, dtype=dtype)
        bare = make_bare_step(tables.close_prices, tables.obs_table, n_big)
        steps[f"bound: bare step {n_big}x{S} {str(dtype).split('.')[-1]}"] = (torch_step(bare, n_big), n_big)

    for threads in args.threads:
        torch.set_num_threads(threads)
        results = measure({name: fn for name, (fn, _) in steps.items()}, args.window, args.repeats)
        rows = {name: (b * steps[name][1], m * steps[name][1]) for name, (b, m) in results.items()}
        ref = rows[reference][0]
        print(f"\n{threads} torch thread(s)                          {'env-steps/s best':>17s} {'median':>12s} "
              f"{'best vs FinRL':>14s}")
        for name, (b, m) in rows.items():
            print(f"{name:44s} {b:17,.0f} {m:12,.0f} {b / ref:13,.1f}x")
        ours, ours32 = rows[f"StockTradingVecEnv num_envs={n_big}"], rows[f"StockTradingVecEnv num_envs={n_big} float32"]
        bound, bound32 = rows[f"bound: bare step {n_big}x{S} float64"], rows[f"bound: bare step {n_big}x{S} float32"]
        print(f"at num_envs={n_big}: the env runs at {ours[0] / bound[0]:.0%} of the bare-arithmetic bound "
              f"(float64; float32: {ours32[0] / bound32[0]:.0%}); {ours[0] / ref:,.0f}x FinRL "
              f"(float32: {ours32[0] / ref:,.0f}x; aim >= 4000x)")
    print(f"\nload average after: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (above the thread count: "
          "other processes share the CPUs, and the medians are noisy)")


if __name__ == "__main__":
    main()
