"""Start-up: ``import podracer`` against ``import torch``, each in a fresh interpreter.

    .venv/bin/python benchmarks/import_time.py [--repeats 7] [--modules torch podracer finance]

Each module is imported ``--repeats`` times, each time in a new ``python -c`` process (the OS
file cache is warm after the first, so the best run is the start-up a user sees the second time);
the import alone is timed inside the process (``time.perf_counter`` around the import statement),
so the interpreter's own start is not counted. Runs are taken round-robin, so that load from
other processes hits every module alike. Also listed: which heavy modules each import brought in
(a training process should see torch, numpy and gymnasium, not pandas or matplotlib).
``python -X importtime -c "import podracer"`` shows where the rest goes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "numpy", "gymnasium", "pandas", "matplotlib", "scipy", "pyarrow", "yaml", "tqdm.auto", "ray")
CHILD = """import json, sys, time
t = time.perf_counter()
import {module}
elapsed = time.perf_counter() - t
print(json.dumps({{"s": elapsed, "heavy": [m for m in {heavy!r} if m in sys.modules]}}))
"""


def time_import(module: str) -> dict:
    """Seconds to import ``module`` in a fresh interpreter, and the heavy modules it loaded."""
    out = subprocess.run([sys.executable, "-c", CHILD.format(module=module, heavy=HEAVY)], cwd=ROOT, check=True,
                         capture_output=True, text=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--modules", nargs="+", default=["torch", "podracer", "finance"])
    args = ap.parse_args(argv)
    print(f"import time, best and median of {args.repeats} fresh interpreters; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    runs: dict[str, list[dict]] = {m: [] for m in args.modules}
    for _ in range(args.repeats):
        for m in args.modules:
            runs[m].append(time_import(m))
    best = {m: min(r["s"] for r in rs) for m, rs in runs.items()}
    base = best.get("torch")
    print(f"{'module':12s} {'best s':>8s} {'median s':>9s} {'over torch':>11s}  heavy modules loaded")
    for m, rs in runs.items():
        extra = f"{best[m] - base:+10.2f}s" if base is not None else ""
        print(f"{m:12s} {best[m]:8.2f} {statistics.median(r['s'] for r in rs):9.2f} {extra:>11s}  "
              f"{', '.join(rs[-1]['heavy'])}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return best


if __name__ == "__main__":
    main()
