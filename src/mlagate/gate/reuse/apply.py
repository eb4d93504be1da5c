"""Reuse inside one `mlagate run --reuse STORE`: before pytest starts, each case whose key has
a decisive stored result is written to OUT/results/ as *reused* (its verdict, failure, metrics
and fingerprint as measured; its expectation, arm and run id this run's); only the rest are
measured. After the run, this run's own decisive results go into the store."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mlagate import documents, headrun, results
from mlagate.arm.arms import ArmInstall
from mlagate.gate.reuse.calibrated import Calibrated, overlay
from mlagate.gate.reuse.keys import Deriver, Key
from mlagate.matrix import Matrix
from mlagate.paths import default_path
from mlagate.plan import Case
from mlagate.store import Store, StoreError, open_store

COMMIT_ENV = "MLAGATE_COMMIT"  # the commit a run's results are stored as coming from


@dataclass
class Reuse:
    store: Store
    keys: dict[str, Key] = field(default_factory=dict)  # case id: key
    reused: list[str] = field(default_factory=list)  # case ids taken from the store
    commit_of: Callable[[Case], str | None] = lambda case: None
    write: bool = True  # store this run's decisive results
    sink: Store | None = None  # where they go when not into `store` (--reuse-into)
    calibrated: Calibrated | None = None  # the matrix with this class's stored calibration

    def line(self, total: int) -> str:
        measured = total - len(self.reused)
        return (
            f"reuse: {len(self.reused)} of {total} cases taken from {self.store.label} "
            f"(same key, decisive verdict); {measured} to measure"
            + (f"; {len(self.store.ignored)} store entries ignored" if self.store.ignored else "")
        )


def _git_commit(where: Path) -> str | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def commits(out: Path, matrix: Matrix) -> Callable[[Case], str | None]:
    """The commit a case's result comes from: in a head run, head's or base's; else
    $MLAGATE_COMMIT, $GITHUB_SHA, or the commit of the matrix's checkout."""
    record = headrun.read_record(out)
    if record is not None:
        sides = {headrun.HEAD: record["head"]["commit"], headrun.BASE: record["base"]["commit"]}
        return lambda case: sides.get(case.arm)
    own = os.environ.get(COMMIT_ENV) or os.environ.get("GITHUB_SHA")
    own = own or _git_commit(Path(matrix.path or default_path()).resolve().parent)
    return lambda case: own


def reused_document(entry: dict, case: Case, run_id: str | None, store: str, replay: str):
    """A stored result as this run's result of case: what was measured kept, what this run
    decides (expectation, arm, ids) its own, and where it came from."""
    doc = documents.validate(dict(entry["result"]), "result", "a stored result")  # upgraded
    c = case.to_json()
    doc |= {
        "case_id": case.id,
        "suite": case.suite,
        "module": case.module,
        "arm": case.arm,
        "runner": case.runner,
        # a geometry or checkpoint under another name has the same key: this case's names
        "geometry": {**(doc.get("geometry") or {}), "id": case.geometry},
        "checkpoint": case.checkpoint,
        "expected": c["expected"] or "pass",
        "expectation": c["expectation"],
        "control": bool(c["control"]),
        "expected_kinds": list(c["expected_kinds"]),
        "baseline": c["baseline"],
        "retry": bool(c["retry"]),
        "attempts": [],
        "replay": replay,
        "run_id": run_id,
        "reused": {
            "run_id": entry["from"]["run_id"],
            "commit": entry["from"]["commit"],
            "started": entry["from"]["started"],
            "key": entry["key"],
            "store": str(store),
        },
    }
    return doc


def split(
    matrix: Matrix,
    installs: dict[str, ArmInstall],
    backend: str,
    cases: list[Case],
    spec,
    out: Path,
    run_id: str | None,
    read: bool = True,
    write: bool = True,
    into: Path | None = None,
    machine_class: str | None = None,
) -> tuple[list[Case], Reuse]:
    """The cases to measure, and the reuse record; the reused cases' results are written.
    read False (--no-reuse): every case is measured, its key kept to store its result; write
    False (--reuse-read-only): nothing will be stored; into: the folder store written instead.
    machine_class: this machine's (else found here), which performance keys hold and whose
    stored calibration fills the matrix's uncalibrated gates (reuse.calibrated)."""
    source = open_store(spec, write=write and into is None)
    reuse = Reuse(source, commit_of=commits(out, matrix), write=write)
    if into is not None:
        reuse.sink = open_store(into, write=True)
    deriver = Deriver(matrix, installs, backend, machine_class)
    reuse.calibrated = overlay(matrix, backend, source, deriver.machine_class)
    matrix = deriver.matrix = reuse.calibrated.matrix
    measured = []
    default = Path(default_path()).resolve()
    for case in cases:
        if case.evidence != "argued":  # nothing is measured: there is nothing to reuse
            reuse.keys[case.id] = deriver.key(case)
    if read:
        reuse.store.prefetch(list(reuse.keys.values()))
    for case in cases:
        key = reuse.keys.get(case.id)
        entry = reuse.store.get(key) if read and key is not None else None
        if entry is None:
            measured.append(case)
            continue
        replay = case.replay()
        if Path(matrix.path).resolve() != default:
            replay += f" --matrix {matrix.path}"
        doc = reused_document(entry, case, run_id, reuse.store.label, replay)
        results.write_document(doc, out / "results", case.file_stem)
        reuse.reused.append(case.id)
    print(reuse.line(len(cases)), file=sys.stderr)
    return measured, reuse


def keep(reuse: Reuse, rows: list[dict], cases: list[Case]) -> int:
    """Store this run's own decisive results, then publish them (a git store: one commit);
    how many were stored."""
    if not reuse.write:
        return 0
    sink = reuse.sink or reuse.store
    stored = _put_all(reuse, sink, rows, cases)
    try:
        print(sink.publish().line(), file=sys.stderr)
    except StoreError as exc:  # the verdicts stand, in OUT/results; only the store is short
        print(f"mlagate: warning: {exc}; this run's results were not stored", file=sys.stderr)
    return stored


def _put_all(reuse: Reuse, sink: Store, rows: list[dict], cases: list[Case]) -> int:
    by_id = {c.id: c for c in cases}
    stored = 0
    for row in rows:
        key = reuse.keys.get(row["case_id"])
        if key is None or row.get("reused") or row["case_id"] not in by_id:
            continue
        try:
            stored += sink.put(key, row, reuse.commit_of(by_id[row["case_id"]])) is not None
        except OSError as exc:  # the verdicts stand; only the store is short of them
            print(
                f"mlagate: warning: reuse: cannot write to {sink.label}: "
                f"{exc.strerror or exc}; this run's results were not stored",
                file=sys.stderr,
            )
            return stored
    return stored


def would_reuse(
    matrix: Matrix, installs: dict[str, ArmInstall], backend: str, cases: list[Case], spec
) -> int:
    """How many of cases a run with --reuse STORE would take from the store (for mlagate plan:
    files hashed, entries read, nothing run)."""
    st, deriver = open_store(spec, write=False), Deriver(matrix, installs, backend)
    wanted = [deriver.key(c) for c in cases if c.evidence != "argued"]
    st.prefetch(wanted)
    return sum(st.get(k) is not None for k in wanted)


def plan_line(matrix: Matrix, outcome, backend: str, store: Path) -> str:
    """mlagate plan --reuse STORE: how many of the planned cases a run would take from it."""
    n = would_reuse(matrix, outcome.installs, backend, outcome.cases, store)
    return (
        f"reuse: a run with --reuse {store} would take {n} of {len(outcome.cases)} cases from "
        f"the store and measure {len(outcome.cases) - n}"
    )
