"""A head run's outcomes, relative to base (`mlagate run --head`).

Every case head runs also runs on base (the same suite, module, geometry, dtype and backend on the
arm `base`); each head case is judged against its base counterpart by
mlagate.verdict.outcomes.relative. A head case whose counterpart was never planned (a module base
does not have, a suite that compares head with base itself) is a *new case*, judged by its
expectation. Base's rows are kept beside head's, each side with its commit (head-run.json).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mlagate import documents, results
from mlagate.caseid import CaseId
from mlagate.verdict import outcomes

HEAD, BASE = "head", "base"
FIXED_BY_CHANGE = outcomes.FIXED_BY_CHANGE
RECORD = "head-run.json"  # in OUT/headbase/
SCHEMA = "mlagate.head-run/1"
ORDER = (
    outcomes.FIXED_BY_CHANGE,
    "regression",
    "not fixed",
    "changed failure",
    outcomes.CHANGED_CONFIGURATION,
    "flaky",
    "lost control",
    "fixed",
    outcomes.STILL_FAILING,
    outcomes.CANNOT_IMPORT,
    outcomes.CANNOT_BUILD,
    "invalid",
    "as expected",
)


def write_record(where: Path, hb, head_path: str, ref: str, strict: bool = False) -> Path:
    """OUT/headbase/head-run.json: the two sides (each with its commit), the user's matrix and
    whether a case still failing as on base is red."""
    doc = {
        "schema": SCHEMA,
        "head": {"path": head_path, "commit": hb.head_commit},
        "base": {"ref": ref, "commit": hb.base_commit, "label": hb.base_label},
        "runtime": hb.runtime,
        "modules": list(hb.modules),
        "matrix": str(hb.user_matrix),
        "strict": strict,
    }
    path = where / RECORD
    path.write_text(json.dumps(doc, indent=1))
    return path


def retire(out: Path) -> None:
    """Rename an earlier head run's record in OUT (to head-run.json.earlier), so that a plain run
    in the same OUT is never reported as a head run."""
    path = Path(out) / "headbase" / RECORD
    if path.is_file():
        path.replace(path.with_name(RECORD + ".earlier"))


def read_record(out: Path) -> dict | None:
    """OUT's head-run record, or None when OUT is no head run."""
    path = Path(out) / "headbase" / RECORD
    return documents.load(path, "head-run") if path.is_file() else None


def counterpart(case_id: str) -> str:
    """The id of a head case's base counterpart (the same case on the arm `base`)."""
    return str(CaseId.parse(case_id).on_arm(BASE))


@dataclass(frozen=True)
class Judged:
    """Head's rows, each with its outcome relative to base, and what is missing."""

    rows: list[dict]  # head rows, each with "outcome", "base" (base's row or None), "new_case"
    base_rows: list[dict]
    missing: list[str]  # planned head cases without a result
    strict: bool
    label: str  # how base is named ("main")

    @property
    def outcomes(self) -> dict[str, int]:
        tally = {o: 0 for o in outcomes.OUTCOMES}
        for r in self.rows:
            tally[r["outcome"]] += 1
        tally["missing"] += len(self.missing)
        return tally

    @property
    def exit_code(self) -> int:
        tally = self.outcomes
        if any(n and outcomes.is_red(o, self.strict) for o, n in tally.items()):
            return outcomes.RED_EXIT
        if any(tally[o] for o in outcomes.NOT_MEASURED_OUTCOMES):
            return outcomes.NOT_MEASURED
        return outcomes.GREEN

    def line(self) -> str:
        """this change fixes 10, breaks 0, leaves 2 failing as on main"""
        o = self.outcomes
        broken = sum(n for k, n in o.items() if k in outcomes.RED)
        new = sum(r["new_case"] for r in self.rows)
        return (
            f"this change fixes {o[outcomes.FIXED_BY_CHANGE]}, breaks {broken}, leaves "
            f"{o[outcomes.STILL_FAILING]} failing as on {self.label}"
            + (f" ({new} new case{'s' * (new != 1)}, judged by expectations)" if new else "")
        )


def judge(rows: list[dict], planned: list[str], strict: bool, label: str) -> Judged:
    """Pair each head row with its base counterpart and judge it
    (mlagate.verdict.outcomes.relative)."""
    by_id = {r["case_id"]: r for r in rows}
    planned_ids = set(planned) | set(by_id)
    judged, base_rows = [], [r for r in rows if r["arm"] == BASE]
    for r in rows:
        if r["arm"] != HEAD:
            continue
        other = counterpart(r["case_id"])
        base = by_id.get(other)
        new = other not in planned_ids
        row = {**r, "outcome": outcomes.relative(r, base), "base": base, "new_case": new}
        if row["outcome"] == outcomes.CHANGED_CONFIGURATION:
            changed = outcomes.worse_configurations(r, base)
            row["reason"] = f"configurations changed from {label}: {'; '.join(changed)}"
        judged.append(row)
    missing = [c for c in planned if CaseId.parse(c).arm == HEAD and c not in by_id]
    return Judged(judged, base_rows, missing, strict, label)


def of(out: Path, rows: list[dict], planned: list[str]) -> Judged | None:
    """OUT's rows judged relative to base when OUT holds a head run, else None."""
    record = read_record(out)
    if record is None:
        return None
    return judge(rows, planned, record["strict"], record["base"]["label"])


def table(j: Judged) -> str:
    """The head run's table: fixed by this change first, then what keeps the gate red, then what
    still fails as on base; each line with head's and base's verdicts."""
    lines = [
        f"{'outcome':24} {'head':7} {'base':7} {'suite':12} {'module':30} {'geometry':16} reason"
    ]

    def key(r):
        return (ORDER.index(r["outcome"]), r["suite"], r["module"], r["case_id"])

    for r in sorted(j.rows, key=key):
        base = "new" if r["new_case"] else (r["base"] or {}).get("verdict", "missing")
        head = (
            f"{r['outcome']:24} {r['verdict']:7} {base:7} {r['suite']:12} {r['module']:30} "
            f"{results.geometry_label(r):16} "
        )
        lines += results.wrapped(head, r["reason"])
    for cid in j.missing:
        lines.append(f"{'missing':24} {cid} (no result was written)")
    lines.append(gate_line(j))
    return "\n".join(lines)


def gate_line(j: Judged) -> str:
    o = j.outcomes
    shown = ", ".join(f"{o[k]} {k}" for k in outcomes.OUTCOMES if o[k])
    colour = "green" if j.exit_code == 0 else "red"
    strict = " (--strict: still failing is red)" if j.strict and o[outcomes.STILL_FAILING] else ""
    return f"gate: {colour}: {j.line()}{strict}; {shown or 'no cases'}"


def for_report(sources: list[Path], rows: list[dict]) -> dict | None:
    """What the report adds to the merged document of one head run's folder: the record, the
    summary line, the outcome tally and each head case's outcome, base verdict and new-case
    flag (`merged["head_run"]`); None for any other sources."""
    if len(sources) != 1 or not Path(sources[0]).is_dir():
        return None
    record = read_record(Path(sources[0]))
    if record is None:
        return None
    manifest = Path(sources[0]) / "manifest.json"
    planned = documents.load(manifest, "manifest")["cases"] if manifest.is_file() else []
    j = judge(
        rows, planned or [r["case_id"] for r in rows], record["strict"], record["base"]["label"]
    )
    return {
        **record,
        "line": j.line(),
        "exit_code": j.exit_code,
        "outcomes": j.outcomes,
        "missing": j.missing,
        "cases": {
            r["case_id"]: {
                "outcome": r["outcome"],
                "base": (r["base"] or {}).get("verdict"),
                "new_case": r["new_case"],
            }
            for r in j.rows
        },
    }


def outcome_in(head_run: dict | None, row: dict) -> str:
    """A row's outcome in a report: relative to base for a head case of a head run, else its own
    (mlagate.verdict.outcomes.outcome)."""
    case = (head_run or {}).get("cases", {}).get(row["case_id"])
    return case["outcome"] if case else outcomes.outcome(row)
