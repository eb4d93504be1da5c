"""`mlagate calibrate`: budgets proposed from a runner's own measurements, with the evidence.

From result folders of `mlagate run` made on one runner: the performance gates' separation
(the shipped arms: stock controls and fixed arms): for each gate that judges an interval
against a bound (SEPARATION), the fixed arms' highest interval top and the stock arms' lowest
interval bottom. Where the first lies below the second, the proposed bound is their geometric
mean; where it does not, the measurements cannot support any bound and the gate is refused
(named, with both ends). And the A/A floor of l1_parity (`mlagate run --aa` results): the
widest end of any A/A case's interval, the smallest tolerance every A/A case would have passed
at, rounded up to a whole percent, is the proposed tolerance; refused when it is wider than
MAX_L1_TOLERANCE (a floor that wide hides regressions users feel). Writes OUT/calibration.json
(mlagate.calibration/1: every case's interval, per gate) and OUT/budgets.yaml (a matrix snippet
of the proposals).
Exit 0 when every gate found got a proposal, 1 when one was refused, 2 on bad input.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from mlagate import results, safefiles
from mlagate.errors import UsageError
from mlagate.gate import merge

SCHEMA = "mlagate.calibration/1"


@dataclass(frozen=True)
class Separation:
    """A gate judged by an interval whose values above the bound fail: where its statistic and
    interval lie in a result's metrics, its matrix key, and whether that is keyed by backend."""

    suite: str
    gate: str
    value: tuple[str, ...]
    interval: tuple[str, ...]
    per_backend: bool = True


SEPARATION = (
    Separation("speculative", "max_verify_growth", ("gate", "verify_growth"), ("gate", "interval")),
    Separation(
        "marginal_cost", "max_relative", ("gate", "relative_marginal"), ("gate", "ci"), False
    ),
)


MAX_L1_TOLERANCE = 0.10  # the widest L = 1 tolerance proposed: the 2-core CPU runner's today


def aa_floor(rows: list[dict]) -> dict | None:
    """The l1_parity tolerance from the runner's A/A cases (metrics.aa): each case's cache
    length with the widest interval end, the floor over all of them, and the proposal or why
    none; None without A/A cases."""
    cases = []
    for r in rows:
        m = r.get("metrics") or {}
        finite = [
            t for t in (m.get("l1") or {}).values() if all(map(math.isfinite, t.get("ci") or ()))
        ]
        if r["suite"] != "l1_parity" or not m.get("aa") or not finite:
            continue
        worst = max(finite, key=lambda t: max(map(abs, t["ci"])))
        cases.append(
            {
                "case": r["case_id"],
                "arm": r["arm"],
                "module": r["module"],
                "geometry": results.geometry_label(r),
                "control": False,
                "value": worst["change"],
                "interval": [float(worst["ci"][0]), float(worst["ci"][1])],
            }
        )
    if not cases:
        return None
    floor = max(max(map(abs, c["interval"])) for c in cases)
    bound = math.ceil(round(floor * 100, 6)) / 100
    refused = (
        f"A/A intervals reach {floor:.1%}, wider than the widest tolerance proposed "
        f"({MAX_L1_TOLERANCE:.0%}): this runner's floor hides regressions users feel"
        if bound > MAX_L1_TOLERANCE
        else None
    )
    return {
        "suite": "l1_parity",
        "gate": "tolerance",
        "per_backend": True,
        "bound": None if refused else bound,
        "aa_floor": floor,
        "refused": refused,
        "cases": cases,
    }


def _dig(metrics: dict, path: tuple[str, ...]):
    for key in path:
        metrics = metrics.get(key) if isinstance(metrics, dict) else None
    return metrics


def observed(rows: list[dict], sep: Separation) -> list[dict]:
    """Each measured case of the gate's suite: arm, module, geometry, control or fixed, the
    statistic and its interval (cases without them, argued or invalid ones, are left out)."""
    out = []
    for r in rows:
        value = _dig(r.get("metrics") or {}, sep.value)
        interval = _dig(r.get("metrics") or {}, sep.interval)
        if r["suite"] != sep.suite or value is None or not interval:
            continue
        out.append(
            {
                "case": r["case_id"],
                "arm": r["arm"],
                "module": r["module"],
                "geometry": results.geometry_label(r),
                "control": bool(r.get("control")),
                "value": value,
                "interval": [float(interval[0]), float(interval[1])],
            }
        )
    return out


def propose(cases: list[dict]) -> dict:
    """The proposal for one gate from its cases: the bound, or why none can be supported."""
    stock = [c["interval"][0] for c in cases if c["control"]]
    fixed = [c["interval"][1] for c in cases if not c["control"]]
    if not stock or not fixed:
        which = "stock (control)" if not stock else "fixed"
        return {"bound": None, "refused": f"no {which} arm measured"}
    floor, ceiling = max(fixed), min(stock)
    ends = {"fixed_top": floor, "stock_bottom": ceiling}
    if floor <= 0 or floor >= ceiling:
        return {
            "bound": None,
            **ends,
            "refused": f"fixed arms' intervals reach {floor:.3g}, stock arms' start at "
            f"{ceiling:.3g}: no bound separates them",
        }
    return {"bound": round(math.sqrt(floor * ceiling), 3), **ends, "refused": None}


def calibrate(rows: list[dict], runner: str) -> dict:
    """The calibration document of one runner from its results."""
    mine = [r for r in rows if r.get("runner") == runner]
    if not mine:
        raise UsageError(f"calibrate: no results of runner {runner}")
    backends = sorted({r["backend"] for r in mine})
    if len(backends) != 1:
        raise UsageError(f"calibrate: runner {runner}'s results span backends {backends}")
    gates = []
    for sep in SEPARATION:
        cases = observed(mine, sep)
        if cases:
            gates.append(
                {
                    "suite": sep.suite,
                    "gate": sep.gate,
                    "per_backend": sep.per_backend,
                    **propose(cases),
                    "cases": cases,
                }
            )
    floor = aa_floor(mine)
    if floor:
        gates.append(floor)
    if not gates:
        names = ", ".join(sorted({s.suite for s in SEPARATION} | {"l1_parity (--aa)"}))
        raise UsageError(f"calibrate: runner {runner} has no measured case of {names}")
    return {"schema": SCHEMA, "runner": runner, "backend": backends[0], "gates": gates}


def snippet(doc: dict) -> str:
    """The matrix snippet of the proposals (refused gates as comments)."""
    lines = [f"# mlagate calibrate --runner {doc['runner']}: proposals from calibration.json"]
    lines.append("suites:")
    for g in doc["gates"]:
        lines += [f"  {g['suite']}:", "    gates:"]
        if g["bound"] is None:
            lines.append(f"      # {g['gate']}: refused: {g['refused']}")
        else:
            value = f"{{{doc['backend']}: {g['bound']}}}" if g["per_backend"] else g["bound"]
            why = (
                f"A/A intervals reach {g['aa_floor']:.3g} over {len(g['cases'])} cases"
                if "aa_floor" in g
                else f"fixed arms up to {g['fixed_top']:.3g}, stock arms from "
                f"{g['stock_bottom']:.3g}"
            )
            lines.append(f"      {g['gate']}: {value}  # {why}")
    return "\n".join(lines) + "\n"


def add_parser(sub) -> None:
    p = sub.add_parser("calibrate", help="propose a runner's budgets from its own measurements")
    p.add_argument("dirs", nargs="+", type=Path, help="output folders of mlagate run on it")
    p.add_argument("--runner", required=True, help="the runner label whose results count")
    p.add_argument("--out", type=Path, default=Path("reports/calibrate"), help="output folder")


def main(args) -> int:
    from mlagate import documents

    for d in args.dirs:
        if not d.is_dir():
            raise UsageError(f"calibrate: {d}: not a folder")
    rows = [results.read(p) for d in args.dirs for p in sorted(merge.results_dir(d).glob("*.json"))]
    doc = documents.validate(calibrate(rows, args.runner), "calibration", "calibration")
    args.out.mkdir(parents=True, exist_ok=True)
    safefiles.write_text(args.out / "calibration.json", json.dumps(doc, indent=1) + "\n")
    safefiles.write_text(args.out / "budgets.yaml", snippet(doc))
    for g in doc["gates"]:
        said = f"proposed {g['bound']}" if g["bound"] is not None else f"refused: {g['refused']}"
        print(f"{g['suite']}.{g['gate']} ({doc['backend']}): {said}")
    print(f"wrote {args.out / 'budgets.yaml'} and {args.out / 'calibration.json'}")
    return 1 if any(g["bound"] is None for g in doc["gates"]) else 0
