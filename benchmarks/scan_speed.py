"""How long `mlagate scan` takes over a whole runtime on one core.

    python benchmarks/scan_speed.py [--arm mlx-vlm-0.7.10] [--repeat 5]

Materialises the arm, then times scanner.scan over its package in a child pinned to CPU 0
(Linux), `repeat` times; prints the median and the spread as JSON.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from mlagate import arms, matrix

CHILD = """
import sys, time
from mlagate import matrix
from mlagate.scan import guards as scanner
m = matrix.load(sys.argv[2])
t = time.perf_counter()
report = scanner.scan([sys.argv[1]], m.allowlist)
print(time.perf_counter() - t, report.files)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arm", default="mlx-vlm-0.7.10")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    m = matrix.load(matrix.default_path())
    arm = m.arms[args.arm]
    inst = arms.materialise(arm, m.runtimes[arm.runtime])
    target = str(inst.site / inst.runtime.package)
    pin = ["taskset", "-c", "0"] if sys.platform == "linux" else []
    times, files = [], 0
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
        _ = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "arm": args.arm,
                "files": files,
                "cores": 1 if pin else os.cpu_count(),
                "median_s": round(statistics.median(times), 3),
                "min_s": round(min(times), 3),
                "max_s": round(max(times), 3),
                "runs": args.repeat,
            }
        )
    )


if __name__ == "__main__":
    main()
