"""Separation of every performance gate: how far the fixed arms' intervals lie from the stock
(or planted) arms' on one machine, from result folders of `mlagate run`.

    python benchmarks/separation.py --machine LABEL DIR... [--json FILE] [--markdown FILE]

DIR is a run's output folder (its results/*.json) or a folder of result files. Each measured
case is read for its suite's deciding statistic and interval: marginal_cost the second query's
cost in decode steps at the longest cache (metrics.gate), crossover the absorbed path's
slowdown at the formula's width (metrics.crossover), l1_parity the L = 1 change at the cache
length whose interval reaches furthest from zero (metrics.l1), speculative the verify step's
growth in decode steps (metrics.gate). Arms are grouped by what they are: stock (the `L == 1`
releases), fixed (the patched arm, mlx-vlm 0.7.x) and planted (a slowdown planted on purpose:
benchmarks/l1_power.py's l1plant-* arms, the fake runtime's fake-slow). Per suite and group:
the cases, their verdicts, the lowest interval bottom and the highest interval top; the margin
is the gap between the fixed arms' highest top and the other groups' lowest bottom (positive:
separated; `crossover` forces the same two paths in both arms, so it separates no arm), taken
only between arms of one runtime: the fake runtime's arms (fake-*) are measured against each
other and the real runtimes' against each other, never across (a margin between a real fixed arm
and the fake runtime's plant says nothing about either); a runtime without both sides gets none.
Prints the markdown table; --json and --markdown write it too, appended as one block a machine.
"""

import argparse
import json
import math
from pathlib import Path

STOCK = ("mlx-lm-0.32.2", "mlx-lm-0.31.3", "mlx-vlm-0.6.17", "fake-stock")
FIXED = ("mlx-lm-0.32.2-patched", "mlx-vlm-0.7.10", "fake-patched")


def group(arm: str) -> str:
    if arm.startswith("l1plant-"):
        return "fixed" if arm == "l1plant-0" else "planted"
    if arm in STOCK:
        return "stock"
    if arm in FIXED:
        return "fixed"
    return "planted" if "slow" in arm or "plant" in arm else "other"


def runtime(arm: str) -> str:
    return "fake runtime" if arm.startswith("fake-") else "real runtimes"


def margins(suite: dict) -> dict:
    """Per runtime with fixed and stock or planted cases: the others' lowest bottom minus the
    fixed arms' highest top."""
    out = {}
    for rt in sorted({runtime(c["arm"]) for g in suite.values() for c in g["cases"]}):
        fixed = [c for c in suite.get("fixed", {"cases": []})["cases"] if runtime(c["arm"]) == rt]
        others = [
            c for k in ("stock", "planted") for c in suite.get(k, {"cases": []})["cases"]
            if runtime(c["arm"]) == rt
        ]  # fmt: skip
        if fixed and others:
            out[rt] = min(c["interval"][0] for c in others) - max(c["interval"][1] for c in fixed)
    return out


def statistic(r: dict):
    """(value, (low, high)) of the case's deciding interval, or None."""
    m, suite = r.get("metrics") or {}, r["suite"]
    if suite == "marginal_cost" and "gate" in m:
        return m["gate"]["relative_marginal"], tuple(m["gate"]["ci"])
    if suite == "speculative" and "gate" in m and "interval" in m["gate"]:
        return m["gate"]["verify_growth"], tuple(m["gate"]["interval"])
    if suite == "crossover" and "crossover" in m:
        c = m["crossover"]
        return c["absorbed_slowdown_at_formula"], tuple(c["ci"])
    if suite == "l1_parity" and m.get("l1"):
        rows = [t for t in m["l1"].values() if all(map(math.isfinite, t.get("ci") or ()))]
        if rows:
            worst = max(rows, key=lambda t: max(map(abs, t["ci"])))
            return worst["change"], tuple(worst["ci"])
    return None


def table(rows: list[dict]) -> dict:
    out: dict = {}
    for r in rows:
        got = statistic(r) if r.get("evidence") != "argued" and not r.get("aa") else None
        if got is None or (r.get("metrics") or {}).get("aa"):
            continue
        value, (lo, hi) = got
        g = out.setdefault(r["suite"], {}).setdefault(group(r["arm"]), {"cases": []})
        g["cases"].append(
            {"arm": r["arm"], "geometry": (r.get("geometry") or {}).get("id"),
             "verdict": r["verdict"], "value": value, "interval": [lo, hi]}
        )  # fmt: skip
    for suite in out.values():
        for g in list(suite.values()):
            g["lowest_bottom"] = min(c["interval"][0] for c in g["cases"])
            g["highest_top"] = max(c["interval"][1] for c in g["cases"])
            g["verdicts"] = {
                v: sum(c["verdict"] == v for c in g["cases"])
                for v in sorted({c["verdict"] for c in g["cases"]})
            }
    for name, suite in out.items():
        if name == "crossover":  # both arms force one path
            continue
        per_runtime = margins(suite)
        if len({runtime(c["arm"]) for g in suite.values() for c in g["cases"]}) == 1:
            suite.update(("margin", v) for v in per_runtime.values())
        elif per_runtime:
            suite["margins"] = per_runtime  # cases of several runtimes: a margin within each
    return out


def markdown(machine: str, t: dict) -> str:
    lines = [
        f"#### {machine}",
        "",
        "| suite | fixed arms: verdicts, interval range | stock arms | planted arms | margin |",
        "|---|---|---|---|---|",
    ]

    def cell(g):
        if not g:
            return "-"
        said = ", ".join(f"{n} {v}" for v, n in g["verdicts"].items())
        return f"{said}; {g['lowest_bottom']:.3g} to {g['highest_top']:.3g}"

    for suite, s in sorted(t.items()):
        margin = (
            f"{s['margin']:+.3g}"
            if "margin" in s
            else "; ".join(f"within the {rt}: {v:+.3g}" for rt, v in s.get("margins", {}).items())
            or "-"
        )
        lines.append(
            f"| {suite} | {cell(s.get('fixed'))} | {cell(s.get('stock'))} | "
            f"{cell(s.get('planted'))} | {margin} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--machine", required=True)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args()
    files = []
    for d in args.dirs:
        files += (
            [d]
            if d.is_file()
            else sorted((d / "results").glob("*.json")) or sorted(d.glob("*.json"))
        )
    rows = [json.loads(p.read_text()) for p in files]
    t = table([r for r in rows if isinstance(r, dict) and "suite" in r])
    md = markdown(args.machine, t)
    print(md)
    if args.json:
        doc = json.loads(args.json.read_text()) if args.json.exists() else {}
        doc[args.machine] = t
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    if args.markdown:
        with args.markdown.open("a") as fh:
            fh.write(md + "\n")


if __name__ == "__main__":
    main()
