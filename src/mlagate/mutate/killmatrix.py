"""The kill matrix: a versioned JSON document (one loader), a terminal table and an HTML section.

Statuses, one per mutant:
- killed: a suite whose case passes on the unmutated arm fails on the mutant (killed_by
  names the suites, the first is the cheapest that killed it);
- survived: every such case still passes;
- only invalid: no such case failed, some were invalid (the harness could not measure);
- no control: no case of any suite run passes on the unmutated arm, so nothing can kill it;
- equivalent: argued equivalent in matrix.yaml (`mutants: equivalent:`), not run.
"""

from __future__ import annotations

import json
import shlex
import time
from collections import Counter
from pathlib import Path

from mlagate.report.mutation import (
    FILE,
    SCHEMA,
    STATUSES,
    KillMatrix,
    KillMatrixError,  # noqa: F401 (the document and its rendering)
    grid,
    load,  # noqa: F401
    page,
    section,  # noqa: F401
)


def _status(entry) -> str:
    if entry.killed_by:
        return "killed"
    if entry.invalid_in:
        return "only invalid"
    return "survived" if entry.controls else "no control"


def replay(matrix_path: Path, arm: str, module: str, mutant_id: str) -> str:
    return shlex.join(
        [
            "mlagate",
            "mutate",
            "--matrix",
            str(matrix_path),
            "--arm",
            arm,
            "--module",
            module,
            "--mutant",
            mutant_id,
            "--all",
        ]
    )


def build(
    matrix,
    opts,
    mutants,
    argued: dict,
    entries: dict,
    order: list[str],
    rounds: list[dict],
    seconds: float,
) -> KillMatrix:
    rows = []
    for m in mutants:
        row = {
            **m.to_json(),
            "status": "equivalent",
            "killed_by": [],
            "invalid_in": [],
            "controls": 0,
            "seconds": 0.0,
            "reason": argued.get((m.arm, m.id), ""),
            "replay": replay(matrix.path, m.arm, m.module, m.id),
        }
        e = entries.get((m.arm, m.id))
        if e is not None:
            row.update(
                status=_status(e),
                killed_by=e.killed_by,
                invalid_in=e.invalid_in,
                controls=e.controls,
                seconds=round(e.seconds, 2),
                mutant_arm=e.arm_id,
            )
        rows.append(row)
    ran = [r for r in rows if r["status"] != "equivalent"]
    return {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "matrix": str(matrix.path),
        "profile": opts.profile,
        "backend": opts.backend,
        "runner": opts.runner,
        "all": opts.all,
        "workers": opts.workers,
        "suites": order,
        "rounds": rounds,
        "seconds": round(seconds, 1),
        "seconds_per_mutant": round(seconds / len(ran), 1) if ran else 0.0,
        "counts": {s: sum(r["status"] == s for r in rows) for s in STATUSES} | {"total": len(rows)},
        "by_operator": {
            op: dict(Counter(r["status"] for r in rows if r["operator"] == op))
            for op in sorted({r["operator"] for r in rows})
        },
        "first_kills": dict(Counter(r["killed_by"][0] for r in rows if r["killed_by"])),
        "mutants": rows,
    }


def write(doc: KillMatrix, out: Path, partial: bool = False) -> Path:
    """OUT/kill-matrix.json and its page; partial: written after a round, more rounds to come."""
    doc["complete"] = not partial
    out.mkdir(parents=True, exist_ok=True)
    path = out / FILE
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    (out / "kill-matrix.html").write_text(page(doc), encoding="utf-8")
    return path


def set_aside(out: Path) -> Path | None:
    """Move an earlier run's kill matrix to OUT/previous/<time>/ (a replay into the same OUT
    must not overwrite the whole matrix); nothing is deleted."""
    if not (out / FILE).is_file():
        return None
    target = out / "previous" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target.mkdir(parents=True, exist_ok=True)
    for name in (FILE, "kill-matrix.html"):
        if (out / name).is_file():
            (out / name).rename(target / name)
    return target


def text(doc: KillMatrix) -> str:
    ops, body = grid(doc)
    width = max([len(k) for k, _ in body] + [10])
    lines = [f"{'arm module':{width}}  " + "  ".join(ops)]
    for key, cells in body:
        lines.append(f"{key:{width}}  " + "  ".join(c or "-" for c in cells))
    c = doc["counts"]
    if not doc.get("complete", True):
        lines.append(
            f"PARTIAL: rounds run so far: {', '.join(r['suite'] for r in doc['rounds'])}; not "
            "killed yet is not survived"
        )
    lines.append(
        f"{c['total']} mutants: {c['killed']} killed, {c['survived']} survived, "
        f"{c['only invalid']} only invalid, "
        f"{c['no control']} without a control, {c['equivalent']} argued equivalent; "
        f"{doc['seconds']} s"
    )
    for m in doc["mutants"]:
        if m["status"] in ("survived", "only invalid", "no control"):
            lines.append(f"{m['status'].upper()}: {m['id']}\n  replay: {m['replay']}")
    return "\n".join(lines)


def markdown(doc: KillMatrix) -> str:
    """The kill matrix and its counts as Markdown tables (docs/mutation.md is made from it)."""
    ops, body = grid(doc)
    esc = lambda t: t.replace("|", "\\|")  # noqa: E731
    lines = ["| arm, module | " + " | ".join(ops) + " |", "|---" * (len(ops) + 1) + "|"]
    lines += [
        "| " + esc(key) + " | " + " | ".join(esc(c) or "-" for c in cells) + " |"
        for key, cells in body
    ]
    lines += ["", "| operator | " + " | ".join(STATUSES) + " |", "|---" * (len(STATUSES) + 1) + "|"]
    lines += [
        f"| {op} | " + " | ".join(str(n.get(s, 0)) for s in STATUSES) + " |"
        for op, n in doc["by_operator"].items()
    ]
    lines += [
        "",
        "| suite | first kills | round: mutants | cases | seconds |",
        "|---|---|---|---|---|",
    ]
    first = doc["first_kills"]
    lines += [
        f"| {r['suite']} | {first.get(r['suite'], 0)} | {r['mutants']} | {r['cases']} | "
        f"{r['seconds']} |"
        for r in doc["rounds"]
    ]
    return "\n".join(lines) + "\n"
