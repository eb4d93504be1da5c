"""False-alarm rate of the L = 1 parity gate: N A/A runs of one arm against itself.

    python benchmarks/aa_false_alarms.py [--runs 10] [--module mlx-lm/deepseek_v3] [--arm mlx-lm-0.32.2-patched] [--cpu auto] [-- RUN_ARGS...]

RUN_ARGS go to every `mlagate run` (e.g. `-- --backend gpu --profile full` on a GPU machine).

Each run is `mlagate run --aa --suite l1_parity` into a fresh folder. A run whose gate did not
hold (its case is invalid) is a false alarm: an arm against itself differs only by noise.
Prints one JSON line a run and a summary line with the rate and the largest change seen.
"""

import argparse
import glob
import json
import subprocess
import sys
import tempfile


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--module", default="mlx-lm/deepseek_v3")
    ap.add_argument("--arm", default="mlx-lm-0.32.2-patched")
    ap.add_argument("--cpu", default="auto", help="passed to mlagate run --cpu (none: workers float between CPUs)")
    ap.add_argument("run_args", nargs="*", help="more arguments for mlagate run, after --")
    args = ap.parse_args()
    alarms, cases, changes = 0, 0, []
    for i in range(args.runs):
        out = tempfile.mkdtemp(prefix=f"mlagate-aa-{i}-")
        subprocess.run([sys.executable, "-m", "mlagate", "run", "--aa", "--suite", "l1_parity", "--module", args.module, "--arm", args.arm, "--cpu", args.cpu, "--out", out, *args.run_args], capture_output=True)
        for path in glob.glob(f"{out}/results/*.json"):
            r = json.loads(open(path).read())
            if r["evidence"] != "synthetic":
                continue
            cases += 1
            alarms += r["verdict"] != "pass"
            first = [a["change"] for a in r["metrics"].get("attempts", []) if a["attempt"] == 0]
            changes += first
            print(json.dumps({"run": i, "geometry": r["geometry"]["id"], "verdict": r["verdict"], "cpus": r["fingerprint"].get("cpus"),
                              "first_try_changes": [round(c, 4) for c in first]}), flush=True)
    print(json.dumps({"runs": args.runs, "cases": cases, "false_alarms": alarms, "rate": round(alarms / max(cases, 1), 3),
                      "largest_first_try_change": round(max(map(abs, changes)), 4) if changes else None}))


if __name__ == "__main__":
    main()
