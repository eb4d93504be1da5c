"""How long `mlagate scan` takes over a whole runtime on one core.

    python benchmarks/scan_speed.py [--arm mlx-vlm-0.7.10 | --path DIR] [--cores 1] [--repeat 5]

Materialises the arm (or takes DIR, a Rust tree for instance), then times scanner.scan over it
in a child pinned to the first `cores` CPUs (Linux; the scan uses as many worker processes),
`repeat` times; prints the median and the spread of the wall time, and the median CPU time of
the child and its workers, as JSON.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from mlagate import matrix, paths
from mlagate.arm import arms

CHILD = """
import resource, sys, time
from mlagate import matrix
from mlagate.scan import guards as scanner
m = matrix.load(sys.argv[2])
def cpu():
    me, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
t, c = time.perf_counter(), cpu()
report = scanner.scan([sys.argv[1]], m.allowlist)
print(time.perf_counter() - t, report.files, cpu() - c)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arm", default="mlx-vlm-0.7.10")
    ap.add_argument("--path", default=None, help="time this folder instead of an arm")
    ap.add_argument("--cores", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    m = matrix.load(paths.default_path())
    if args.path:
        target = args.path
    else:
        arm = m.arms[args.arm]
        inst = arms.materialise(arm, m.runtimes[arm.runtime])
        target = str(inst.site / inst.runtime.package)
    cores = f"0-{args.cores - 1}" if args.cores > 1 else "0"
    pin = ["taskset", "-c", cores] if sys.platform == "linux" else []
    times, files, cpus = [], 0, []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        out = subprocess.run(
            [*pin, sys.executable, "-c", CHILD, target, str(m.path)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        times.append(float(out[0]))
        files = int(out[1])
        cpus.append(float(out[2]))
        _ = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "arm": args.path or args.arm,
                "files": files,
                "cores": args.cores if pin else os.cpu_count(),
                "cpu_median_s": round(statistics.median(cpus), 3),
                "median_s": round(statistics.median(times), 3),
                "min_s": round(min(times), 3),
                "max_s": round(max(times), 3),
                "runs": args.repeat,
            }
        )
    )


if __name__ == "__main__":
    main()
