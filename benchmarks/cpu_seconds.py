"""What a command costs in CPU seconds, and where the arms' workers spend theirs.

    python benchmarks/cpu_seconds.py [--op-log DIR] -- mlagate run --suite S ... -n 2

Runs the command and prints its wall time and the CPU seconds (user + system) of every process
it started and waited for: the CLI, pytest and its xdist processes, the arms' workers. On a
machine shared with other work the wall time stretches with the load and CPU seconds far less,
so they are what a cost is measured in there; on two quiet cores a `-n 2` run takes about half
its CPU seconds of wall (docs/correctness.md, Serving configurations, Cost).

With --op-log, every worker appends each op's wall and CPU seconds to DIR (mlagate.worker.server,
MLAGATE_OP_LOG), and the summary adds them per op (build, serve, reuse, release, ...). DIR must
be new or empty. Exit status: the command's (2 for bad arguments).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path


def per_op(folder: Path) -> dict[str, list[float]]:
    """op -> [count, CPU seconds, wall seconds], over every worker's log in folder."""
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for path in sorted(folder.glob("ops-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            entry = out[row["op"]]
            entry[0] += 1
            entry[1] += row["cpu_s"]
            entry[2] += row["wall_s"]
    return dict(out)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op-log", type=Path, default=None, help="folder for the workers' op logs")
    p.add_argument("command", nargs="+", help="the command, after --")
    args = p.parse_args(argv)
    env = dict(os.environ)
    if args.op_log:
        if args.op_log.exists() and any(args.op_log.iterdir()):
            p.error(f"--op-log {args.op_log}: not empty")
        args.op_log.mkdir(parents=True, exist_ok=True)
        env["MLAGATE_OP_LOG"] = str(args.op_log.resolve())
    t0 = time.perf_counter()
    try:
        rc = subprocess.run(args.command, env=env).returncode
    except OSError as exc:
        p.error(f"{args.command[0]}: {exc}")
    wall = time.perf_counter() - t0
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        f"wall {wall:.1f} s; CPU {use.ru_utime + use.ru_stime:.1f} s "
        f"(user {use.ru_utime:.1f}, system {use.ru_stime:.1f}); exit {rc}"
    )
    if args.op_log:
        ops = per_op(args.op_log)
        for op, (n, cpu, w) in sorted(ops.items(), key=lambda kv: -kv[1][1]):
            print(f"  {op:<10} {int(n):>6} ops  CPU {cpu:8.1f} s  wall {w:8.1f} s")
        print(f"  worker ops: CPU {sum(v[1] for v in ops.values()):.1f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
