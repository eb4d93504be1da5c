"""A float32 1024x1024x1024 matmul in MLX on the CPU, in a fresh interpreter per BLAS choice
(mlagate.worker.blas: the environment a worker gets), rounds interleaved across the choices.

    python benchmarks/blas_matmul.py [--rounds 5] [--choices reference,wheel,system]

Prints one line per choice: the library preloaded, OpenBLAS's build string, the median of each
round's median matmul time. A choice that cannot be had here is said so and skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from mlagate.worker import blas

PROBE = """
import json, time, ctypes, mlx.core as mx
a = mx.random.normal((1024, 1024)); b = mx.random.normal((1024, 1024)); mx.eval(a, b)
mx.eval(a @ b)
ts = []
for _ in range(7):
    t = time.perf_counter(); mx.eval(a @ b); ts.append(time.perf_counter() - t)
ts.sort()
from mlagate.worker.blas import build
print(json.dumps({"ms": 1e3 * ts[3], "build": build()}))
"""


def one(choice: str) -> dict:
    env = blas.worker_env({**os.environ, blas.BLAS_ENV: choice})
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout) | {"preload": env.get("LD_PRELOAD", "")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--choices", default="reference,wheel,system")
    args = ap.parse_args()
    choices = []
    for choice in args.choices.split(","):
        try:
            blas.choose({**os.environ, blas.BLAS_ENV: choice})
            choices.append(choice)
        except blas.BlasChoiceError as exc:
            print(f"{choice}: not here ({exc})")
    seen: dict[str, list[dict]] = {c: [] for c in choices}
    for r in range(args.rounds):
        for choice in choices if r % 2 == 0 else reversed(choices):
            seen[choice].append(one(choice))
    for choice, runs in seen.items():
        ms = [run["ms"] for run in runs]
        preload = runs[0]["preload"].split()
        lib = os.path.realpath(preload[0]) if preload else "-"
        print(
            f"{choice}: median {statistics.median(ms):.1f} ms "
            f"(rounds {min(ms):.1f}-{max(ms):.1f}); preload {lib}; build {runs[0]['build']}"
        )


if __name__ == "__main__":
    main()
