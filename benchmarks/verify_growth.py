"""The separation of the speculative suite's verify-growth gate: per geometry and arm, the verify
step (num_draft + 1 tokens) and the decode step (1 token) at the shortest and the longest
context, the verify growth in decode steps with its interval, and how far the stock arms'
intervals lie from the fixed arms' (the margin the bound sits in).

    python benchmarks/verify_growth.py OUT/results [OUT2/results ...] [--level 0.99]
        [--h200 DIR ...]

Reads the timed steps of every `speculative` result under the folders (each context's
observation: the seconds of every verify and decode step) and computes the gate's statistic
(mlagate.harness.timing.step_growth_ci) at --level. Arms whose name ends in `-patched` or that
are mlx-vlm 0.7 count as fixed, the rest as stock. --h200 reads a GPU run made before the decode
step was timed: for `speculative` results the decode step is stood in for by plain decoding's
time per token (which, on the stock arm, slowed with context: the growth it gives is lower than
the decode step's would be), for `marginal_cost` results (one attention layer, L = 4 and L = 1
interleaved per cache length) the growth is (t4 at 16K - t4 at 1K) / t1 at 16K.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mlagate import results, stats
from mlagate.harness.timing import step_growth_ci


def fixed(arm: str) -> bool:
    return arm.endswith("-patched") or arm.startswith("mlx-vlm-0.7")


def _steps(r: dict) -> dict[int, dict]:
    timed = {o["context"]: o["timed"] for o in r.get("counters", []) if "timed" in o}
    return {
        p: {k: t[k]["seconds"] for k in ("verify", "decode")}
        for p, t in timed.items()
        if "decode" in t
    }


def speculative(rows: list[dict], level: float) -> str:
    out = [
        "| geometry | arm | fixed | verify ms, P lo -> hi | decode ms at hi | growth "
        f"({level:.0%} interval) | rounds at hi |",
        "|---|---|---|---|---|---|---|",
    ]
    spans: dict[str, dict[str, list]] = {}
    for r in sorted(rows, key=lambda r: (results.geometry_label(r), r["arm"])):
        steps = _steps(r) if r["suite"] == "speculative" else {}
        if len(steps) < 2:
            continue
        lo, hi = steps[min(steps)], steps[max(steps)]
        g, g_lo, g_hi = step_growth_ci(lo, hi, level)
        geo = results.geometry_label(r)
        side = spans.setdefault(geo, {"stock": [], "fixed": []})
        side["fixed" if fixed(r["arm"]) else "stock"].append((g_lo, g_hi))
        out.append(
            f"| {geo} | {r['arm']} | {'yes' if fixed(r['arm']) else 'no'} | "
            f"{1e3 * stats.median(lo['verify']):.1f} -> {1e3 * stats.median(hi['verify']):.1f} "
            f"(P={min(steps)} -> {max(steps)}) | {1e3 * stats.median(hi['decode']):.1f} | "
            f"{g:.2f} ({g_lo:.2f}-{g_hi:.2f}) | {len(hi['verify'])} |"
        )
    seps = [
        f"{geo}: stock intervals from {min(lo for lo, _ in s['stock']):.2f}, fixed up to "
        f"{max(hi for _, hi in s['fixed']):.2f}"
        for geo, s in spans.items()
        if s["stock"] and s["fixed"]
    ]
    return "\n".join(out) + "\n\nSeparation: " + "; ".join(seps) + ".\n"


def h200(rows: list[dict]) -> str:
    out = ["| suite | geometry | arm | verify (or t4) ms, lo -> hi | decode stand-in ms | growth |"]
    out.append("|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["suite"], results.geometry_label(r), r["arm"])):
        m = r["metrics"]
        if r["suite"] == "speculative" and m.get("rows"):
            own = sorted((x for x in m["rows"] if x["draft"] == "self"), key=lambda x: x["context"])
            lo, hi = own[0], own[-1]
            v_lo, v_hi, d_hi = lo["verify_ms"], hi["verify_ms"], 1e3 / hi["plain_tok_s"]
            span = f"P={lo['context']} -> {hi['context']}"
        elif r["suite"] == "marginal_cost" and "L=4" in m.get("marginal", {}):
            per_t, l1 = m["marginal"]["L=4"]["per_T"], m["l1_median_s"]
            t4 = {int(t): 1e3 * (l1[t] + per_t[t]["marginal_s"]) for t in per_t}
            v_lo, v_hi, d_hi = t4[1024], t4[16384], 1e3 * l1["16384"]
            span = "T=1024 -> 16384"
        else:
            continue
        out.append(
            f"| {r['suite']} | {results.geometry_label(r)} | {r['arm']} | {v_lo:.2f} -> "
            f"{v_hi:.2f} ({span}) | {d_hi:.2f} | {(v_hi - v_lo) / d_hi:.2f} |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path, nargs="*", help="results folders (OUT/results)")
    p.add_argument("--level", type=float, default=0.99)
    p.add_argument("--h200", type=Path, nargs="*", default=[], help="a GPU run's results folders")
    args = p.parse_args(argv)
    for folder in [*args.results, *args.h200]:
        if not folder.is_dir():
            print(f"{folder}: not a folder", file=sys.stderr)
            return 2
    if args.results:
        print(speculative([x for f in args.results for x in results.load_dir(f)], args.level))
    if args.h200:
        print(h200([x for f in args.h200 for x in results.load_dir(f)]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
