"""Backtests per second: N fixed-weight strategies as N accounts of one StockTradingVecEnv, against vectorbt.

    .venv/bin/python benchmarks/backtest_throughput.py [--sizes 1 64 4096] [--repeats 3] [--device cpu]

The task: N buy-and-hold strategies over the bundled 20 stocks' test years (``finance.prepare_market``:
2019-2022, 1,006 closes): strategy 0 equal weight, strategy 1 the long-only minimum-variance
weights fitted on the training years (``finance.min_variance_weights``), the rest random weights
(Dirichlet(1), seeded). Each spends ``w[s] * cash`` on stock s at the first close and holds to
the last; initial cash 1e6, cost 0.1% of traded value, whole shares.

Ours: one ``finance.StockTradingVecEnv(close, num_envs=N)`` (closes only, no features: a backtest
needs none), each account trading its own weights through ``FixedWeights`` below, stepped to the
last day; the final values are ``info["account_value"]`` of the last step.
vectorbt: ``vbt.Portfolio.from_orders`` on the closes tiled N times, one group of 20 columns per
strategy sharing its cash, one order per column on the first row.

Both compute the same thing, and the script asserts it (final values equal to 1e-6 of the
initial cash, share counts identical):

- fill at the close of the first row (``execution="close"``, the env's default up to 1.1.0; vectorbt's
  default price is the close);
- cost: 0.1% of the traded value, paid on top of it (``cost_pct=1e-3``; ``fees=1e-3``);
- whole shares ``floor(w * cash / (1 + cost) / price)``: vectorbt gets ``size_type="value"``
  with ``size = w * cash / (1 + cost)`` and ``size_granularity=1`` (it divides by the price and
  floors); ``FixedWeights`` computes the same expression in the same order, so float rounding
  cannot put a share on different sides of a whole number (``finance.buy_and_hold`` computes
  ``w * cash / (price * (1 + cost))``, equal but for that rounding, and is checked too);
- every buy is affordable (the floored values sum to at most the cash), so neither scales any.

Timing: each side from the same closes in memory to the N final values: ours builds the env and
steps it (on ``--device``; ``torch.cuda.synchronize`` before the clock stops), vectorbt runs
``from_orders`` and ``final_value()``. Best of ``--repeats`` after an untimed warm-up run (which
also takes vectorbt's numba compilation, printed apart). The load average is printed.

vectorbt is an optional peer (it pulls numba, llvmlite, scikit-learn, plotly; the ``bench`` extra):
install with ``.venv/bin/python -m pip install -c constraints.txt "vectorbt==1.2.0"``; without it
the script times our side alone and says so.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from finance.backtest import buy_and_hold, min_variance_weights  # noqa: E402
from finance.env import StockTradingVecEnv  # noqa: E402
from finance.market import prepare_market  # noqa: E402
from podracer.cli import device_arg  # noqa: E402

CASH, COST = 1e6, 1e-3
MAX_SHARES = 10**6  # one step buys any position (the env's rounding is exact to well under a share up to here)
VECTORBT_INSTALL = '.venv/bin/python -m pip install -c constraints.txt "vectorbt==1.2.0"'


def strategy_weights(n: int, train_close: pd.DataFrame, seed: int = 0) -> np.ndarray:
    """(n, S): equal weight, minimum variance on the training years, then Dirichlet(1) draws."""
    S = train_close.shape[1]
    fixed = [np.full(S, 1.0 / S), min_variance_weights(train_close)]
    rng = np.random.default_rng(seed)
    return np.vstack(fixed + list(rng.dirichlet(np.ones(S), size=max(n - 2, 0))))[:n]


class FixedWeights:
    """Each account buys its own weights' whole shares at its first bar and then holds:
    ``floor(w * cash / (1 + cost) / price)``, in that order (vectorbt's: module doc)."""

    def __init__(self, weights: np.ndarray, env: StockTradingVecEnv):
        self.weights = torch.as_tensor(weights, dtype=env.dtype, device=env.device)  # (N, S)
        self.scale = 1.0 + env.cost_pct

    def __call__(self, info: dict) -> torch.Tensor:
        account = info["account"]
        target = torch.floor(self.weights * account["cash"][:, None] / self.scale / account["prices"])
        return ((target - account["holdings"]) / MAX_SHARES).clamp(0.0, 1.0).float()


def ours(close: pd.DataFrame, weights: np.ndarray, device: torch.device) -> tuple[np.ndarray, np.ndarray]:
    """(final values (N,), shares held (N, S)) from one batched env."""
    env = StockTradingVecEnv(close, num_envs=len(weights), device=device, initial_cash=CASH,
                             max_trade_shares=MAX_SHARES, cost_pct=COST, execution="close")  # vectorbt's fill
    _, info = env.reset()
    policy = FixedWeights(weights, env)
    buy = policy(info)
    hold = torch.zeros_like(buy)
    for t in range(env.num_days - 1):
        _, _, _, _, info = env.step(buy if t == 0 else hold)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return info["account_value"].cpu().numpy(), info["holdings"].cpu().numpy()


def with_vectorbt(vbt, close: pd.DataFrame, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same strategies through ``vbt.Portfolio.from_orders``: (final values, shares)."""
    n, S = weights.shape
    tiled = pd.DataFrame(np.tile(close.to_numpy(), n), index=close.index)
    size = np.full(tiled.shape, np.nan)
    size[0] = (weights * CASH / (1.0 + COST)).ravel()  # values to spend; vectorbt divides by the price
    pf = vbt.Portfolio.from_orders(tiled, size=size, size_type="value", size_granularity=1.0, fees=COST,
                                   init_cash=CASH, cash_sharing=True, group_by=np.repeat(np.arange(n), S),
                                   freq="1D")
    return np.atleast_1d(np.asarray(pf.final_value())), np.asarray(pf.assets())[-1].reshape(n, S)  # (a scalar for n=1)


def best_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv: list[str] | None = None) -> dict[int, dict[str, float]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 64, 4096], help="strategies per backtest (N)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu", type=device_arg, help="our env's device (cpu or cuda)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (numba runs single-threaded here)")
    ap.add_argument("--skip-vectorbt", action="store_true", help="ours alone (vectorbt's first numba compile takes "
                                                                   "a minute; the test skips it)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    market = prepare_market()
    close = market.close["test"]
    vbt = None
    if not args.skip_vectorbt:
        try:
            import vectorbt as vbt  # (its import alone takes seconds: numba)
        except ImportError:
            pass
    print(f"backtest throughput: {close.shape[1]} stocks x {len(close)} closes ({close.index[0].date()} .. "
          f"{close.index[-1].date()}), buy-and-hold at fixed weights, cost {COST:.1%}, whole shares; ours on "
          f"{device} ({args.threads} torch thread(s)); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    if args.skip_vectorbt:
        print("vectorbt: skipped (--skip-vectorbt)")
    elif vbt is None:
        print(f"vectorbt: not installed, timing ours alone; install with: {VECTORBT_INSTALL}")
    else:
        t0 = time.perf_counter()
        with_vectorbt(vbt, close, strategy_weights(2, market.close["train"]))  # numba compiles here
        print(f"vectorbt {vbt.__version__}: first call (numba compilation) {time.perf_counter() - t0:.1f} s, untimed")

    # finance.buy_and_hold, the library's own baseline, agrees with the env's equal-weight account.
    library = buy_and_hold(close, np.full(close.shape[1], 1.0 / close.shape[1]), CASH, COST).account_value.iloc[-1]
    results: dict[int, dict[str, float]] = {}
    print(f"\n| N strategies | ours s/backtest | vectorbt s/backtest | speed-up | strategies/s ours | "
          f"max abs diff of final values |")
    print("|---|---|---|---|---|---|")
    for n in args.sizes:
        weights = strategy_weights(n, market.close["train"])
        values, shares = ours(close, weights, device)
        assert abs(values[0] - library) <= 1e-6 * CASH, (values[0], library)
        t_ours = best_time(lambda: ours(close, weights, device), args.repeats)
        row = {"ours_s": t_ours}
        if vbt is not None:
            v_values, v_shares = with_vectorbt(vbt, close, weights)
            diff = float(np.abs(values - v_values).max())
            assert np.array_equal(shares, v_shares), "ours and vectorbt hold different share counts"
            assert diff <= 1e-6 * CASH, f"final values differ by {diff} (> 1e-6 of the cash)"
            row.update(vectorbt_s=best_time(lambda: with_vectorbt(vbt, close, weights), args.repeats), diff=diff)
            print(f"| {n:,} | {t_ours:.4f} | {row['vectorbt_s']:.4f} | {row['vectorbt_s'] / t_ours:.1f}x | "
                  f"{n / t_ours:,.0f} | {diff:.2e} |")
        else:
            print(f"| {n:,} | {t_ours:.4f} | (not installed) | | {n / t_ours:,.0f} | |")
        results[n] = row
    same = "the same share counts and final values in both (asserted); " if vbt is not None else ""
    print(f"\nevery N: {same}equal weight ends at {values[0]:,.2f}, as finance.buy_and_hold ({library:,.2f}). "
          f"load average after: {os.getloadavg()[0]:.1f}")
    return results


if __name__ == "__main__":
    main()
