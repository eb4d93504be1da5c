"""`mlagate plan` on the shipped matrix: this tree against another checkout of mlagate (the
baseline, e.g. `git worktree add /tmp/base 8dd4a35`), interleaved in one run so both see the
same machine load. Prints the median wall time of each and their ratio.

    python benchmarks/plan_speed.py /tmp/base [--runs 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def once(tree: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "mlagate", "plan"],
        cwd=tree,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("baseline", type=Path)
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    once(HERE), once(args.baseline)  # warm the file cache and the arm scan cache
    base, this = [], []
    for _ in range(args.runs):
        base.append(once(args.baseline))
        this.append(once(HERE))
    b, t = statistics.median(base), statistics.median(this)
    print(f"baseline {b:.2f} s (min {min(base):.2f}), this tree {t:.2f} s (min {min(this):.2f})")
    print(f"{b / t:.1f}x faster (medians of {args.runs} interleaved runs)")


if __name__ == "__main__":
    main()
