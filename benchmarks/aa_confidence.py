"""Re-judge recorded A/A l1_parity results at other interval confidences (no new timing).

    python benchmarks/aa_confidence.py RESULTS_DIR... [--tolerance 0.02] [--retries 2]

Each RESULTS_DIR is an `mlagate run --aa --suite l1_parity` output folder (one A/A gate run,
as benchmarks/aa_false_alarms.py leaves them). For every timed try the result records the
paired samples of the arm and its second worker; the tries are judged again, per cache length
and with the suite's retry rule, at each confidence: the share of red gate runs (any case not
a pass) and of false fails, per confidence. Prints one JSON line per confidence.
"""

import argparse
import glob
import json

from mlagate import stats


def judge(
    tries: list[tuple[list[float], list[float]]], confidence: float, tol: float, retries: int
) -> str:
    for arm, base in tries[: retries + 1]:
        _, lo, hi = stats.paired_change(arm, base, confidence)
        if -tol <= lo and hi <= tol:
            return "pass"
        if lo > tol or hi < -tol:
            return "fail"
    return "invalid"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--tolerance", type=float, default=0.02)
    ap.add_argument("--retries", type=int, default=2)
    args = ap.parse_args()
    runs = []
    for d in args.dirs:
        cases = []
        for path in glob.glob(f"{d}/results/*.json"):
            r = json.loads(open(path).read())
            if r["evidence"] == "argued" or r["suite"] != "l1_parity":
                continue
            by_t: dict[int, list] = {}
            attempts = r["metrics"].get("attempts", [])
            timed = [o["timed"] for o in r["counters"] if "timed" in o]
            for a, t in zip(attempts, timed, strict=False):
                by_t.setdefault(a["T"], []).append((t["arm"]["seconds"], t["baseline"]["seconds"]))
            cases.append(by_t)
        runs.append(cases)
    for confidence in (0.8, 0.9, 0.95, 0.99):
        verdicts = [
            [
                min(
                    (judge(v, confidence, args.tolerance, args.retries) for v in case.values()),
                    key=("fail", "invalid", "pass").index,
                )
                for case in run
            ]
            for run in runs
        ]
        flat = [v for run in verdicts for v in run]
        print(
            json.dumps(
                {
                    "confidence": confidence,
                    "runs": len(runs),
                    "red_gate_runs": sum(any(v != "pass" for v in run) for run in verdicts),
                    "cases": len(flat),
                    "fail": flat.count("fail"),
                    "invalid": flat.count("invalid"),
                }
            )
        )


if __name__ == "__main__":
    main()
