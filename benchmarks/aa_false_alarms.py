"""False-alarm rate of the L = 1 parity gate: N A/A gate runs of one arm against itself.

    python benchmarks/aa_false_alarms.py [--runs 20] [--first 0] [--until SECONDS] [--module M]...
    [--arm mlx-lm-0.32.2-patched] [--cpu auto] [--out FILE.jsonl] [-- RUN_ARGS...]

RUN_ARGS go to every `mlagate run` (e.g. `-- --runner linux-cuda-h200 --profile full` on a GPU
machine). Modules default to mlx-lm/deepseek_v3 and mlx-lm/glm4_moe_lite (three geometries:
DeepSeek-V3, Moonlight, GLM-4.7-Flash).

Each run is `mlagate run --aa --suite l1_parity` into a fresh folder: one A/A gate run (l1_parity
is the one performance suite that compares two workers). An arm against itself differs only by
noise, so any case that is not a pass (fail: the interval over process pairs lay above the
tolerance; invalid: it still straddled it when the budget ran out) is a false alarm, and a run
with any such case is a red gate run. Prints one JSON line a case (appended to --out too) and a
summary line: red gate runs, false fails, the median interval width, the spread between
process pairs, and the detectable difference across cases (mlagate.stats.detectable_difference
over every A/A case's change: a real change smaller than it is indistinguishable from this
runner's noise), with the smallest tolerance each gate run would have passed at.
"""

import argparse
import glob
import json
import statistics
import subprocess
import sys
import tempfile
import time

from mlagate import stats


def main() -> None:
    args = _arguments()
    modules = args.module or ["mlx-lm/deepseek_v3", "mlx-lm/glm4_moe_lite"]
    lines, runs = [], []
    begun = time.monotonic()
    for i in range(args.first, args.first + args.runs):
        if args.until and runs:
            longest = max(r["seconds"] for r in runs)
            if time.monotonic() - begun + longest > args.until:
                break  # the next run would not end in time: stop whole, never cut a run
        started = time.monotonic()
        out = _gate_run(i, args, modules)
        seconds = time.monotonic() - started
        mine = []
        for path in sorted(glob.glob(f"{out}/results/*.json")):
            r = json.loads(open(path).read())
            if r["evidence"] == "argued":
                continue
            mine.append({**_case_line(i, r), "gate_run_s": round(seconds, 1)})
        for line in mine:
            print(json.dumps(line), flush=True)
            if args.out:
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(line) + "\n")
        lines += mine
        runs.append({"run": i, "seconds": seconds, "cases": mine})
    print(json.dumps(summary(runs)))


def summary(runs: list[dict]) -> dict:
    """The summary of A/A gate runs (each {"run", "seconds", "cases": [case lines]})."""
    cases = [c for r in runs for c in r["cases"]]
    rows = [t for c in cases for t in c["l1"]]
    widths = [t["ci"][1] - t["ci"][0] for t in rows if all(map(_finite, t["ci"]))]
    sds = [t["between_pairs_sd"] for t in rows if t.get("between_pairs_sd") is not None]
    red = [r for r in runs if any(c["verdict"] != "pass" for c in r["cases"]) or not r["cases"]]
    return {
        "runs": len(runs),
        "red_gate_runs": len(red),
        "gate_rate": round(len(red) / max(len(runs), 1), 3),
        "cases": len(cases),
        "false_alarms": sum(c["verdict"] != "pass" for c in cases),
        "false_fails": sum(c["verdict"] == "fail" for c in cases),
        "median_interval_width": _round(statistics.median(widths)) if widths else None,
        "median_between_pairs_sd": _round(statistics.median(sds)) if sds else None,
        "median_process_pairs": statistics.median(c["pairs"] for c in cases) if cases else None,
        "detectable_difference": _round(stats.detectable_difference([t["change"] for t in rows]))
        if rows
        else None,
        "smallest_green_tolerance": sorted(
            _round(max(max(abs(x) for x in t["ci"]) for c in r["cases"] for t in c["l1"]))
            for r in runs
            if r["cases"]
        ),
        "median_gate_run_s": round(statistics.median(r["seconds"] for r in runs), 1)
        if runs
        else None,
    }


def _finite(x: float) -> bool:
    return x not in (float("inf"), float("-inf"))


def _round(x: float) -> float:
    return round(x, 4)


def _arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument(
        "--first", type=int, default=0, help="the first run's number (to continue a file)"
    )
    ap.add_argument(
        "--until",
        type=float,
        default=None,
        help="seconds: start no run that would end after this, judged by the longest run so far",
    )
    ap.add_argument("--module", action="append", default=[])
    ap.add_argument("--arm", default="mlx-lm-0.32.2-patched")
    ap.add_argument(
        "--cpu",
        default="auto",
        help="passed to mlagate run --cpu (none: workers float between CPUs)",
    )
    ap.add_argument("--out", default=None, help="append each case's JSON line to this file")
    ap.add_argument("run_args", nargs="*", help="more arguments for mlagate run, after --")
    return ap.parse_args()


def _gate_run(i: int, args: argparse.Namespace, modules: list[str]) -> str:
    """A/A gate run i: `mlagate run --aa --suite l1_parity` into a fresh folder (returned)."""
    out = tempfile.mkdtemp(prefix=f"mlagate-aa-{i}-")
    cmd = [
        sys.executable,
        "-m",
        "mlagate",
        "run",
        "--aa",
        "--suite",
        "l1_parity",
        "--arm",
        args.arm,
        "--cpu",
        args.cpu,
        "--out",
        out,
    ]
    for m in modules:
        cmd += ["--module", m]
    done = subprocess.run([*cmd, *args.run_args], capture_output=True, text=True)
    with open(f"{out}/mlagate-run.log", "w") as fh:
        fh.write(done.stdout + done.stderr)
    if not glob.glob(f"{out}/results/*.json"):
        print(f"run {i}: mlagate exited {done.returncode} with no results: {done.stderr[-400:]}")
    return out


def _case_line(i: int, r: dict) -> dict:
    """The JSON line of one case: its geometry, verdict, CPUs, budget and samples used, each
    cache length's interval over process pairs and every pair's change."""
    m = r["metrics"]
    return {
        "run": i,
        "geometry": r["geometry"]["id"],
        "verdict": r["verdict"],
        "reason": r["reason"][:300],
        "cpus": r["fingerprint"].get("cpus"),
        "blas": r["fingerprint"].get("blas"),
        "duration_s": round(r["duration_s"], 1),
        "sequential": m.get("sequential"),
        "pairs": (m.get("sequential") or {}).get("process_pairs", 0),
        "primed_once": m.get("primed_once"),
        "l1": [
            {
                "T": int(T),
                "change": _round(t["change"]),
                "ci": [_round(x) if _finite(x) else x for x in t["ci"]],
                "pairs": t["pairs"],
                "between_pairs_sd": t.get("between_pairs_sd"),
                "estimator": t.get("estimator", "mean"),
                "decided": t["decided"],
            }
            for T, t in (m.get("l1") or {}).items()
        ],
        "pair_changes": [
            {
                "pair": p["pair"],
                "T": p["T"],
                "first": p["first"],
                "change": _round(p["change"]),
                **({"seconds": p["seconds"]} if "seconds" in p else {}),
            }
            for p in m.get("pairs", [])
        ],
    }


if __name__ == "__main__":
    main()
