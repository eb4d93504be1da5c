"""Markdown tables of the speculative suite's results: plain vs speculative throughput over
prompt lengths, per case (module, geometry, arm), from the JSON on disk.

    python benchmarks/speculative_table.py OUT/results [--draft self|perturbed|all]

Reads every `speculative` result under the folder (metrics["rows"], docs/speculative.md)
and prints one table per geometry, arms side by side row by row.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mlagate import results


def tables(rows: list[dict], draft: str = "all") -> str:
    cases = [r for r in rows if r["suite"] == "speculative" and r["metrics"].get("rows")]
    out = []
    for geo in sorted({(r["module"], results.geometry_label(r)) for r in cases}):
        mine = sorted(
            (r for r in cases if (r["module"], results.geometry_label(r)) == geo),
            key=lambda r: r["arm"],
        )
        first = mine[0]
        made = first["metrics"].get("checkpoints", {})
        weights = f"{made.get('dtype', first['dtype'])} weights" + (
            f", {made['quant']['bits']}-bit groups of {made['quant']['group_size']}"
            if made.get("quant")
            else ""
        )
        out.append(
            f"### {geo[0]}, {geo[1]} ({first['shapes'].get('heads')} heads, {weights}, "
            f"{first['backend']}, {first['fingerprint'].get('device', '?')})\n"
        )
        out.append(
            "| arm | P | draft | plain tok/s | spec tok/s | ratio | verify ms (path) | decode ms "
            "| acceptance | verdict |"
        )
        out.append("|---|---|---|---|---|---|---|---|---|---|")
        for r in mine:
            for row in r["metrics"]["rows"]:
                if draft != "all" and row["draft"] != draft:
                    continue
                acc = (
                    "-"
                    if row["acceptance"] is None
                    else f"{row['acceptance']:.0%} ({row['accepted']}/{row['drafted']})"
                )
                out.append(
                    f"| {r['arm']} | {row['context']} | {row['draft']} | {row['plain_tok_s']:.1f} "
                    f"| {row['spec_tok_s']:.1f} | {row['ratio']:.2f} | "
                    f"{row['verify_ms']:.2f} ({row['verify_path']}) | "
                    f"{row.get('decode_ms', float('nan')):.2f} | {acc} | {row['verdict']} |"
                )
        gates = "; ".join(
            f"{r['arm']}: {r['verdict']}"
            + (
                f" (verify growth {g['verify_growth']:.2f}, interval {g['interval'][0]:.2f}-"
                f"{g['interval'][1]:.2f}; ratio retained {g['ratio_retained']:.2f})"
                if (g := r["metrics"].get("gate")) and "verify_growth" in g
                else ""
            )
            for r in mine
        )
        out.append(f"\nCase verdicts: {gates}.\n")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path, help="a results folder (OUT/results)")
    p.add_argument("--draft", choices=("self", "perturbed", "all"), default="all")
    args = p.parse_args(argv)
    if not args.results.is_dir():
        print(f"{args.results}: not a folder", file=sys.stderr)
        return 2
    print(tables(results.load_dir(args.results), args.draft))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
