"""Wall time of the correctness suites (quick profile, default matrix) with 1 and 2 xdist workers.

    python benchmarks/correctness_scaling.py [--workers 1 2] [--suite S ...]

Runs `mlagate run` once per worker count into a fresh output folder (the arms must be
materialised already: their install is not part of the measurement) and prints JSON lines.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

SUITES = ["probes", "threshold", "dispatch", "l1_unchanged", "equivalence"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--suite", nargs="+", default=SUITES)
    args = ap.parse_args()
    subprocess.run([sys.executable, "-m", "mlagate", "arms"], check=True, capture_output=True)
    base = None
    for n in args.workers:
        out = tempfile.mkdtemp(prefix=f"mlagate-bench-{n}-")
        cmd = [sys.executable, "-m", "mlagate", "run", "-n", str(n), "--out", out]
        for s in args.suite:
            cmd += ["--suite", s]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        base = base or wall
        summary = [line for line in proc.stdout.splitlines() if "passed," in line][-1:]
        print(
            json.dumps(
                {
                    "workers": n,
                    "cores": os.cpu_count(),
                    "wall_s": round(wall, 1),
                    "speedup": round(base / wall, 2),
                    "exit": proc.returncode,
                    "summary": summary,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
