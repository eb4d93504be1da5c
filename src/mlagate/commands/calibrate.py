"""`mlagate calibrate`: budgets proposed from a runner's own measurements, with the evidence.

From result folders of `mlagate run` made on one runner: the performance gates' separation
(the shipped arms: stock controls and fixed arms): for each gate that judges an interval
against a bound (SEPARATION), the fixed arms' highest interval top and the stock arms' lowest
interval bottom. Where the first lies below the second, the proposed bound is their geometric
mean; where it does not, the measurements cannot support any bound and the gate is refused
(named, with both ends). And the A/A floor of l1_parity (`mlagate run --aa` results): the
widest end of any A/A case's interval at its last look (run with the tolerance uncalibrated,
or not decided before the last look: an earlier stop fitted the tolerance it ran with; a cache
length the budget stopped earlier is projected to the last look from its pairs' spread,
stats.last_look_floor, the rule an undecided l1_parity case names), rounded up to a whole
percent (stats.needed_tolerance), is the proposed tolerance; refused when no A/A case measured
to its last look, or when it is wider than MAX_L1_TOLERANCE (a floor that wide hides
regressions users feel).
And the equivalence budgets per dtype (`mlagate run --suite equivalence` results): with the
matrix's factors, twice the least floor_ulps every measured dtype/quant table would pass at
(rounded up to a power of two, at least MIN_FLOOR_ULPS), refused when that floor reaches the
materialised path's own p99 error in half the tables (the floor, not the factor, would then
decide: the runner's rounding cannot tell the paths apart); max_ulps twice the worst error
seen, rounded up likewise.

Writes OUT/calibration.json (mlagate.calibration/1: every case's interval, per gate) and
OUT/budgets.yaml (a matrix snippet of the proposals); with --store STORE, an accepted
calibration also goes into the store for the machine class its results were measured on
(mlagate.store.calibrations). Exit 0 when every gate found got a proposal, 1 when one was
refused (nothing stored), 2 on bad input.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mlagate import results, safefiles, stats
from mlagate.commands import args as cargs
from mlagate.errors import UsageError
from mlagate.gate import merge
from mlagate.store import calibrations

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


MAX_L1_TOLERANCE = 0.10  # a chosen ceiling (wider hides regressions users feel), not measured
MIN_FLOOR_ULPS = 4  # chosen: correct paths differ by an ULP or two of the output's rounding


def _last_look(seq: dict) -> int | None:
    """The pair count of an l1_parity case's last look, from its sequential record (older
    records lack max_pairs: one that stopped at the pair limit ran every look)."""
    if "max_pairs" in seq:
        return seq["max_pairs"]
    return seq.get("process_pairs") if seq.get("stopped") == "max_pairs" else None


def _aa_case(r: dict) -> dict | None:
    """One A/A case's widest interval end over the cache lengths that count: all of them when it
    ran with the tolerance uncalibrated (none can be decided), else those measured to the last
    look (one decided earlier stopped because it fitted the tolerance it ran with, so its
    interval is bounded by that tolerance). Falls back to every row, marked not counted."""
    m = r.get("metrics") or {}
    seq = m.get("sequential") or {}
    finite = [t for t in (m.get("l1") or {}).values() if all(map(math.isfinite, t.get("ci") or ()))]
    if r["suite"] != "l1_parity" or not m.get("aa") or not finite:
        return None
    uncalibrated = "tolerance" in seq and seq["tolerance"] is None
    last = _last_look(seq)
    counted = _at_last_look(
        [t for t in finite if uncalibrated or (last and t.get("pairs") == last)], m, last
    )
    worst = max(counted or finite, key=lambda t: max(map(abs, t["ci"])))
    return {
        **_named(r),
        "control": False,  # an A/A case is the arm against itself
        "value": worst["change"],
        "interval": [float(worst["ci"][0]), float(worst["ci"][1])],
        "counted": bool(counted),
        "cache_lengths": sorted(t["T"] for t in counted if "T" in t),
        "stopped": seq.get("stopped"),
        "process_pairs": seq.get("process_pairs"),
        **({"tolerance": seq["tolerance"]} if "tolerance" in seq else {}),  # older: unrecorded
    }


def _at_last_look(rows: list[dict], metrics: dict, last: int | None) -> list[dict]:
    """The cache lengths' intervals at the last look from their process pairs' spread
    (stats.last_look_floor, as an undecided l1_parity case names its floor): the measured one
    for a cache length that reached it, narrower for one stopped earlier by the budget. Results
    without their pairs (older ones) keep the recorded interval."""
    figures: dict[int, list[float]] = {}
    for p in metrics.get("pairs") or []:
        figures.setdefault(p["T"], []).append(math.log1p(p["change"]))
    level = (metrics.get("sequential") or {}).get("look_confidence")
    if not last or not level or any(len(figures.get(t.get("T"), ())) < 2 for t in rows):
        return rows
    floor = stats.last_look_floor({t["T"]: figures[t["T"]] for t in rows}, last, level)
    return [{**t, "ci": floor["intervals"][str(t["T"])]} for t in rows]


def aa_floor(rows: list[dict]) -> dict | None:
    """The l1_parity tolerance from the runner's A/A cases (metrics.aa): each case's cache
    length with the widest interval end among those measured to the last look (_aa_case), the
    floor over all of them, and the proposal or why none; None without A/A cases."""
    cases = [c for c in map(_aa_case, rows) if c]
    if not cases:
        return None
    gate = {"suite": "l1_parity", "gate": "tolerance", "per_backend": True, "cases": cases}
    counted = [c for c in cases if c["counted"]]
    if not counted:
        ran = sorted({f"{c['tolerance']:.0%}" for c in cases if c.get("tolerance") is not None})
        return {
            **gate,
            "bound": None,
            "refused": "A/A runs stopped when they fitted the tolerance they ran with"
            f"{' (' + ', '.join(ran) + ')' if ran else ''}: run them uncalibrated "
            "(the runner's suites.l1_parity.gates.tolerance: uncalibrated, in a copy of the "
            "matrix given with --matrix)",
        }
    floor = max(max(map(abs, c["interval"])) for c in counted)
    bound = stats.needed_tolerance([c["interval"] for c in counted])
    refused = (
        f"A/A intervals reach {floor:.1%}, wider than the widest tolerance proposed "
        f"({MAX_L1_TOLERANCE:.0%}): this runner's floor hides regressions users feel"
        if bound > MAX_L1_TOLERANCE
        else None
    )
    return {**gate, "bound": None if refused else bound, "aa_floor": floor, "refused": refused}


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
            {**_named(r), "value": value, "interval": [float(interval[0]), float(interval[1])]}
        )
    return out


def _named(r: dict) -> dict:
    """What names a case in calibration.json: its id, arm, module, geometry, control or fixed."""
    return {
        "case": r["case_id"],
        "arm": r["arm"],
        "module": r["module"],
        "geometry": results.geometry_label(r),
        "control": bool(r.get("control")),
    }


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


def _pow2(x: float) -> int:
    return 1 << max(0, math.ceil(math.log2(x))) if x > 1 else 1


def _ulp_tables(rows: list[dict], dtype: str, factors: dict) -> list[dict]:
    """Each measured equivalence table of one dtype (a case's dtype/quant): the floor it needs
    under the factors (test_equivalence.budget_problems' rules solved for floor_ulps), its
    materialised p99 error at the narrowest width and its worst error."""
    out = []
    for r in rows:
        tables = _dig(r.get("metrics") or {}, ("errors_ulps",)) or {}
        grouped: dict[str, dict[int, dict]] = {}
        for key, st in tables.items():
            d, quant, width = key.split("/")
            if d == dtype:
                grouped.setdefault(quant, {})[int(width.removeprefix("L="))] = st
        for quant, by_l in sorted(grouped.items()):
            lo, hi = min(by_l), max(by_l)
            need = max(
                0.0,
                by_l[hi]["delta"]["p99"] - factors["growth_factor"] * by_l[lo]["delta"]["p99"],
                *(
                    st["absorbed"]["p99"] - factors["absorbed_factor"] * st["materialised"]["p99"]
                    for st in by_l.values()
                ),
            )
            worst = max(
                max(st["absorbed"]["max"], st["materialised"]["max"]) for st in by_l.values()
            )
            out.append(
                {
                    **_named(r),
                    "quant": quant,
                    "value": round(need, 3),
                    "interval": [round(by_l[lo]["materialised"]["p99"], 3), round(worst, 3)],
                }
            )
    return out


def ulp_budgets(rows: list[dict], budgets: dict, backend: str) -> list[dict]:
    """equivalence's floor_ulps and max_ulps per dtype measured on the runner (each case:
    value = the floor it needs, interval = [materialised p99 at the narrowest width, worst
    error]); the factors are the matrix's, not calibrated."""
    gates = []
    for dtype, per_backend in budgets.items():
        factors = per_backend.get(backend)
        if not isinstance(factors, Mapping):
            continue
        cases = _ulp_tables([r for r in rows if r["suite"] == "equivalence"], dtype, factors)
        if not cases:
            continue
        floor = max(_pow2(2 * max(c["value"] for c in cases)), MIN_FLOOR_ULPS)
        own = sorted(c["interval"][0] for c in cases)
        median_own = own[len(own) // 2]
        refused = (
            f"the floor {dtype} needs here ({floor} ULP) reaches the materialised path's own "
            f"p99 error (median {median_own:.3g} ULP over {len(cases)} tables): the floor, not "
            f"the factor {factors['absorbed_factor']}, would decide"
            if floor >= median_own
            else None
        )
        worst = _pow2(2 * max(c["interval"][1] for c in cases))
        for gate, bound in (("floor_ulps", floor), ("max_ulps", worst)):
            gates.append(
                {
                    "suite": "equivalence",
                    "gate": f"budgets.{dtype}.{gate}",
                    "per_backend": True,
                    "bound": None if refused else bound,
                    "refused": refused,
                    "factors": {k: factors[k] for k in ("absorbed_factor", "growth_factor")},
                    "cases": cases,
                }
            )
    return gates


def calibrate(
    rows: list[dict], runner: str, budgets: dict | None = None, backend: str | None = None
) -> dict:
    """The calibration document of one runner from its results; `budgets`: the matrix's
    equivalence budgets, read for their factors on the runner's `backend`."""
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
    gates += ulp_budgets(mine, budgets or {}, backend or backends[0])
    if not gates:
        names = ", ".join(
            sorted({s.suite for s in SEPARATION} | {"l1_parity (--aa)", "equivalence"})
        )
        raise UsageError(f"calibrate: runner {runner} has no measured case of {names}")
    return {"schema": SCHEMA, "runner": runner, "backend": backend or backends[0], "gates": gates}


def snippet(doc: dict) -> str:
    """The matrix snippet of the proposals (refused gates as comments)."""
    lines = [f"# mlagate calibrate --runner {doc['runner']}: proposals from calibration.json"]
    lines.append("suites:")
    ulps = [g for g in doc["gates"] if g["suite"] == "equivalence"]
    if ulps:
        lines += ["  equivalence:", "    gates:", "      budgets:"]
    for dtype in dict.fromkeys(g["gate"].split(".")[1] for g in ulps):
        mine = {g["gate"].split(".")[2]: g for g in ulps if g["gate"].split(".")[1] == dtype}
        first = next(iter(mine.values()))
        lines.append(f"        {dtype}:")
        if first["bound"] is None:
            lines.append(f"          # {doc['backend']}: refused: {first['refused']}")
            continue
        values = ", ".join(
            [f"{k}: {v}" for k, v in first["factors"].items()]
            + [f"{k}: {g['bound']}" for k, g in mine.items()]
        )
        lines.append(
            f"          {doc['backend']}: {{{values}}}  # {len(first['cases'])} tables: floors "
            f"needed up to {max(c['value'] for c in first['cases']):.3g}, worst error "
            f"{max(c['interval'][1] for c in first['cases']):.3g}"
        )
    for g in doc["gates"]:
        if g["suite"] == "equivalence":
            continue
        lines += [f"  {g['suite']}:", "    gates:"]
        if g["bound"] is None:
            lines.append(f"      # {g['gate']}: refused: {g['refused']}")
        else:
            value = f"{{{doc['backend']}: {g['bound']}}}" if g["per_backend"] else g["bound"]
            why = (
                f"A/A intervals reach {g['aa_floor']:.3g} over "
                f"{sum(c['counted'] for c in g['cases'])} cases measured to their last look"
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
    p.add_argument(
        "--matrix", type=Path, default=None,
        help="matrix whose runner and equivalence factors count (default: ./matrix.yaml, else "
        "the bundled one)",
    )  # fmt: skip
    p.add_argument("--store", metavar="STORE", help="also store an accepted calibration for "
                   "its machine class (folder or git+URL[#BRANCH]) for --reuse STORE")  # fmt: skip


def main(args) -> int:
    from mlagate import documents

    for d in args.dirs:
        if not d.is_dir():
            raise UsageError(f"calibrate: {d}: not a folder")
    m, backend, _, _ = cargs.context(args)  # an unknown --runner is refused there
    budgets = m.suites["equivalence"].gates["budgets"] if "equivalence" in m.suites else {}
    rows = [results.read(p) for d in args.dirs for p in sorted(merge.results_dir(d).glob("*.json"))]
    doc = documents.validate(
        calibrate(rows, args.runner, budgets, backend), "calibration", "calibration"
    )
    mc = calibrations.class_of(rows, args.runner) if args.store is not None else None
    args.out.mkdir(parents=True, exist_ok=True)
    safefiles.write_text(args.out / "calibration.json", json.dumps(doc, indent=1) + "\n")
    safefiles.write_text(args.out / "budgets.yaml", snippet(doc))
    for g in doc["gates"]:
        said = f"proposed {g['bound']}" if g["bound"] is not None else f"refused: {g['refused']}"
        print(f"{g['suite']}.{g['gate']} ({doc['backend']}): {said}")
    print(f"wrote {args.out / 'budgets.yaml'} and {args.out / 'calibration.json'}")
    refused = any(g["bound"] is None for g in doc["gates"])
    if mc is not None:
        said = f"a gate was refused: nothing stored in {args.store}" if refused else None
        print(said or calibrations.store(args.store, doc, rows, mc))
    return 1 if refused else 0
