"""The separation of the speculative suite's verify-growth gate: per geometry, each arm's verify /
decode step time at the shortest and the longest context, their growth with its interval, and
how far the stock arms' intervals lie from the fixed arms' (the margin the bound sits in).

    python benchmarks/verify_growth.py OUT/results [OUT2/results ...] [--h200-marginal DIR]

Reads every `speculative` result under the folders (metrics.gate, metrics.rows). Arms whose name
ends in `-patched` or that are mlx-vlm 0.7 count as fixed, the rest as stock. With
--h200-marginal, also the `marginal_cost` results of a GPU run (one attention layer: the L = 4
and L = 1 step times per cache length, interleaved), as the same ratio: (t4 / t1 at the longest
cache) / (t4 / t1 at the shortest).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mlagate import results


def fixed(arm: str) -> bool:
    return arm.endswith("-patched") or arm.startswith("mlx-vlm-0.7")


def speculative(rows: list[dict]) -> str:
    cases = [r for r in rows if r["suite"] == "speculative" and r["metrics"].get("gate")]
    out = [
        "| geometry | arm | fixed | verify/decode at P lo / hi | growth (interval) | verdict |",
        "|---|---|---|---|---|---|",
    ]
    margins = []
    for geo in sorted({results.geometry_label(r) for r in cases}):
        mine = sorted(
            (r for r in cases if results.geometry_label(r) == geo), key=lambda r: r["arm"]
        )
        for r in mine:
            g = r["metrics"]["gate"]
            per = [v / d for v, d in zip(g["verify_ms"], g["decode_ms"], strict=True)]
            out.append(
                f"| {geo} | {r['arm']} | {'yes' if fixed(r['arm']) else 'no'} | "
                f"{per[0]:.2f} / {per[1]:.2f} (P={g['from_context']} / {g['to_context']}) | "
                f"{g['verify_growth']:.2f} ({g['interval'][0]:.2f}-{g['interval'][1]:.2f}) | "
                f"{r['verdict']} |"
            )
        stock = [r["metrics"]["gate"]["interval"][0] for r in mine if not fixed(r["arm"])]
        good = [r["metrics"]["gate"]["interval"][1] for r in mine if fixed(r["arm"])]
        if stock and good:
            margins.append(f"{geo}: stock from {min(stock):.2f}, fixed up to {max(good):.2f}")
    return "\n".join(out) + "\n\nSeparation (interval ends): " + "; ".join(margins) + ".\n"


def h200_marginal(rows: list[dict]) -> str:
    out = [
        "| geometry | arm | t4/t1 per cache length | growth, shortest to 16K | to the longest |",
        "|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (results.geometry_label(r), r["arm"])):
        m = r["metrics"]
        if r["suite"] != "marginal_cost" or "marginal" not in m or "L=4" not in m["marginal"]:
            continue
        per_t, l1 = m["marginal"]["L=4"]["per_T"], m["l1_median_s"]
        ratio = {int(t): (l1[t] + per_t[t]["marginal_s"]) / l1[t] for t in per_t}
        ts = sorted(ratio)
        mid = 16384 if 16384 in ratio else ts[-1]
        out.append(
            f"| {results.geometry_label(r)} | {r['arm']} | "
            + ", ".join(f"{t}: {ratio[t]:.2f}" for t in ts)
            + f" | {ratio[mid] / ratio[ts[0]]:.2f} | {ratio[ts[-1]] / ratio[ts[0]]:.2f} |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path, nargs="+", help="results folders (OUT/results)")
    p.add_argument("--h200-marginal", type=Path, help="a GPU run's results folder")
    args = p.parse_args(argv)
    for folder in [*args.results, *([args.h200_marginal] if args.h200_marginal else [])]:
        if not folder.is_dir():
            print(f"{folder}: not a folder", file=sys.stderr)
            return 2
    rows = [row for folder in args.results for row in results.load_dir(folder)]
    print(speculative(rows))
    if args.h200_marginal:
        print(h200_marginal(results.load_dir(args.h200_marginal)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
