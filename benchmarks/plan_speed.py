"""`mlagate plan` on the shipped matrix: this tree against another checkout of mlagate (the
baseline, e.g. `git worktree add /tmp/base 8dd4a35`), alternating in one run so both see the
same machine load. Prints the median wall time and the median CPU time (user + system, of the
process: what the load of other work does not inflate much) of each, their ratios and the load
average.

    python benchmarks/plan_speed.py /tmp/base [--runs 9]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def once(tree: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one `mlagate plan` in tree, with tree's own code and matrix."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "mlagate", "plan"],
        cwd=tree,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("baseline", type=Path)
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    load = os.getloadavg()[0]
    once(HERE), once(args.baseline)  # warm the file cache and the arm caches (scans, checks)
    base, this = [], []
    for _ in range(args.runs):
        base.append(once(args.baseline))
        this.append(once(HERE))
    load = f"{load:.1f} to {os.getloadavg()[0]:.1f}"
    for name, runs in (("baseline", base), ("this tree", this)):
        wall, cpu = [r[0] for r in runs], [r[1] for r in runs]
        print(
            f"{name:9}: wall {statistics.median(wall):.2f} s (min {min(wall):.2f}), "
            f"CPU {statistics.median(cpu):.2f} s (min {min(cpu):.2f})"
        )
    ratio = [statistics.median(r[i] for r in base) / statistics.median(r[i] for r in this)
             for i in (0, 1)]  # fmt: skip
    print(
        f"{ratio[0]:.1f}x faster by wall time, {ratio[1]:.1f}x by CPU time (medians of "
        f"{args.runs} alternating runs; load average {load}, {os.cpu_count()} CPUs)"
    )


if __name__ == "__main__":
    main()
