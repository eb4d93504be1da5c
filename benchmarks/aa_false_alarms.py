"""False-alarm rate of the L = 1 parity gate: N A/A gate runs of one arm against itself.

    python benchmarks/aa_false_alarms.py [--runs 10] [--module M]... [--arm mlx-lm-0.32.2-patched]
    [--cpu auto] [-- RUN_ARGS...]

RUN_ARGS go to every `mlagate run` (e.g. `-- --runner linux-cuda-h200` on a GPU machine).
Modules default to mlx-lm/deepseek_v3 and mlx-lm/glm4_moe_lite (three geometries: DeepSeek-V3,
Moonlight, GLM-4.7-Flash).

Each run is `mlagate run --aa --suite l1_parity` into a fresh folder: one A/A gate run. An arm
against itself differs only by noise, so any case that is not a pass (fail: the interval lay
beyond the tolerance; invalid: it straddled it after the retries) is a false alarm, and a run
with any such case is a red gate run. Prints one JSON line a case and a summary line with the
per-case and per-gate-run rates.
"""

import argparse
import glob
import json
import subprocess
import sys
import tempfile


def main() -> None:
    args = _arguments()
    modules = args.module or ["mlx-lm/deepseek_v3", "mlx-lm/glm4_moe_lite"]
    red_runs, alarms, cases, widths = 0, 0, 0, []
    for i in range(args.runs):
        out = _gate_run(i, args, modules)
        red = False
        for path in sorted(glob.glob(f"{out}/results/*.json")):
            r = json.loads(open(path).read())
            if r["evidence"] == "argued":
                continue
            cases += 1
            alarm = r["verdict"] != "pass"
            alarms += alarm
            red |= alarm
            tries = r["metrics"].get("attempts", [])
            widths += [a["ci"][1] - a["ci"][0] for a in tries if "ci" in a]
            print(json.dumps(_case_line(i, r, tries)), flush=True)
        red_runs += red
    print(
        json.dumps(
            {
                "runs": args.runs,
                "red_gate_runs": red_runs,
                "gate_rate": round(red_runs / max(args.runs, 1), 3),
                "cases": cases,
                "false_alarms": alarms,
                "case_rate": round(alarms / max(cases, 1), 3),
                "median_interval_width": round(sorted(widths)[len(widths) // 2], 4)
                if widths
                else None,
            }
        )
    )


def _arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--module", action="append", default=[])
    ap.add_argument("--arm", default="mlx-lm-0.32.2-patched")
    ap.add_argument(
        "--cpu",
        default="auto",
        help="passed to mlagate run --cpu (none: workers float between CPUs)",
    )
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
    subprocess.run([*cmd, *args.run_args], capture_output=True)
    return out


def _case_line(i: int, r: dict, tries: list[dict]) -> dict:
    """The JSON line of one case: its geometry, verdict, CPUs and each try's interval."""
    return {
        "run": i,
        "geometry": r["geometry"]["id"],
        "verdict": r["verdict"],
        "cpus": r["fingerprint"].get("cpus"),
        "tries": [
            {
                "T": a["T"],
                "change": round(a["change"], 4),
                "ci": [round(x, 4) for x in a["ci"]],
                "decided": a.get("decided"),
            }
            for a in tries
        ],
    }


if __name__ == "__main__":
    main()
