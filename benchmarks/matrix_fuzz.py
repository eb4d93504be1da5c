"""The full fuzz corpus of the matrix reader: seeded variants of the shipped matrix.yaml.

    python benchmarks/matrix_fuzz.py [--variants 1200] [--seed 19] [--cli 80]

Every variant goes through mlagate.matrix.load in-process (tests/matrix_fuzz.judge: a crash,
an internal repr, a message of more than one line, a hang past 20 s or a broken matrix
accepted is a problem); a sample of --cli variants and the special files (FIFO, device,
folder, symlink loop, dangling link, 50 MB) go through `mlagate plan --matrix F` with a 20 s
timeout and a 2 GiB address-space limit. Prints one JSON line per category and a summary.
"""

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mlagate import matrix  # noqa: E402
from tests import matrix_fuzz as mf  # noqa: E402


def _limit():
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _cli(path: Path, cache: Path) -> list[str]:
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "mlagate", "plan", "--matrix", str(path)],
            capture_output=True,
            text=True,
            timeout=20,
            preexec_fn=_limit,
            env={**os.environ, "MLAGATE_CACHE": str(cache)},
        )
    except subprocess.TimeoutExpired:
        return ["hang past 20 s"]
    problems = []
    if proc.returncode != 2:
        problems.append(f"exit {proc.returncode}")
    if "Traceback" in proc.stderr:
        problems.append("traceback")
    if proc.stderr.count("\n") != 1 or mf.REPR.search(proc.stderr):
        problems.append("not one clean line")
    if time.perf_counter() - t0 > 20:
        problems.append("slow")
    return problems


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", type=int, default=1200)
    ap.add_argument("--seed", type=int, default=19)
    ap.add_argument("--cli", type=int, default=80)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mlagate-fuzz-"))
    os.symlink(mf.ROOT / "patches", work / "patches")
    cats: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    problems, slowest, cli_sample = [], 0.0, []
    t0 = time.perf_counter()
    for i, v in enumerate(mf.variants(args.variants, args.seed)):
        t = time.perf_counter()
        found = mf.judge(v, matrix.load, work / "m.yaml", max_s=20)
        slowest = max(slowest, time.perf_counter() - t)
        accepted = not found and _loads(work / "m.yaml")
        cats[v.category]["accepted" if accepted else "refused"] += 1
        problems += [f"{v.category} / {v.name}: {p}" for p in found]
        if (
            v.must_refuse
            and len(cli_sample) < args.cli
            and i % max(1, args.variants // args.cli) == 0
        ):
            path = work / f"cli-{i}.yaml"
            path.write_bytes(v.data)
            cli_sample.append((f"{v.category} / {v.name}", path))
    in_process_s = time.perf_counter() - t0
    cli_sample += mf.special_files(work / "special")
    cli_problems = [f"{name}: {p}" for name, path in cli_sample for p in _cli(path, work / "cache")]
    for cat, counts in sorted(cats.items()):
        print(json.dumps({"category": cat, **counts}))
    print(
        json.dumps(
            {
                "variants": args.variants,
                "seed": args.seed,
                "in_process_s": round(in_process_s, 1),
                "slowest_variant_s": round(slowest, 3),
                "problems": problems[:20],
                "n_problems": len(problems),
                "cli_runs": len(cli_sample),
                "cli_problems": cli_problems[:20],
                "n_cli_problems": len(cli_problems),
                "children_max_rss_mb": round(
                    resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
                ),
            }
        )
    )


def _loads(path: Path) -> bool:
    try:
        matrix.load(path)
        return True
    except matrix.MatrixError:
        return False


if __name__ == "__main__":
    main()
