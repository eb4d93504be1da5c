"""Results: one versioned JSON file per case (mlagate.result/2), written atomically as the case
finishes. A case run again into the same folder (a retry, --resume, --failed) keeps the earlier
result as an attempt."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlagate.verdict import outcomes

SCHEMA = "mlagate.result/3"
VERDICTS = ("pass", "fail", "invalid", "argued")
UNCLASSIFIED = {"kind": "unclassified", "kinds": ["unclassified"], "details": {}}  # no kind given
HEALTH_ENV = "MLAGATE_HEALTH"  # mlagate run's performance health record, for the pytest process
MACHINE_ENV = "MLAGATE_MACHINE"  # mlagate run's host and machine class, for the pytest process


def recorded_machine() -> dict:
    """The host and machine class mlagate run left for this process ({} when none: pytest run
    by hand, or unreadable), as a result records them (`host`, `machine_class`)."""
    try:
        data = json.loads(os.environ.get(MACHINE_ENV) or "{}")
        return {"host": str(data["host"]), "machine_class": dict(data["machine_class"])}
    except (ValueError, KeyError, TypeError):
        return {}


def recorded_health() -> dict | None:
    """The health record mlagate run left for this process ({fit, failed, override}), or None
    (pytest run by hand: not recorded)."""
    text = os.environ.get(HEALTH_ENV)
    if not text:
        return None
    try:
        data = json.loads(text)
        return {
            "fit": bool(data["fit"]),
            "failed": [
                {"name": str(c["name"]), "detail": str(c["detail"])} for c in data["failed"]
            ],
            "override": bool(data["override"]),
        }
    except (ValueError, KeyError, TypeError):
        return {
            "fit": False,
            "failed": [{"name": HEALTH_ENV, "detail": "unreadable"}],
            "override": False,
        }


class ResultError(ValueError):
    """A result file that cannot be read; one line naming the file."""


@dataclass
class Result:
    case: dict
    verdict: str = "invalid"
    reason: str = ""
    evidence: str = "synthetic"
    observations: list[dict] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    shapes: dict[str, Any] = field(default_factory=dict)
    geometry: dict[str, Any] = field(default_factory=dict)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    replay: str = ""
    started: float = field(default_factory=time.time)
    duration_s: float = 0.0
    stderr: str = ""
    failure: dict | None = None  # a fail's kinds and details (mlagate.harness.policy)
    health: dict | None = None  # performance: the machine's health checks (mlagate.machine.health)
    attempts: list[dict] = field(default_factory=list)  # earlier attempts, oldest first
    reused: dict | None = None  # taken from the result store: where from (mlagate.gate.reuse)
    metrics_version: int | None = None  # its contract's metrics version (mlagate.contract.metrics)
    machine: dict = field(default_factory=recorded_machine)  # host and class (mlagate.machine)
    tolerance_from: str | None = None  # a calibrated suite's: matrix, or calibration mc-…
    run_id: str | None = field(
        default_factory=lambda: os.environ.get("MLAGATE_RUN_ID")
    )  # set by mlagate run

    def to_json(self) -> dict:
        c = self.case
        return {
            "schema": SCHEMA,
            "case_id": c["id"],
            "suite": c["suite"],
            "module": c["module"],
            "arm": c["arm"],
            "geometry": self.geometry or {"id": c["geometry"]},
            "checkpoint": c.get("checkpoint"),
            "aa": bool(c.get("aa")),
            "shapes": self.shapes,
            "dtype": c["dtype"],
            "backend": c["backend"],
            "profile": c["profile"],
            "runner": c["runner"],
            **self.machine,
            "verdict": self.verdict,
            "expected": c.get("expected") or ("argued" if self.verdict == "argued" else "pass"),
            "expectation": c.get("expectation", ""),
            "control": bool(c.get("control")),
            "expected_kinds": list(c.get("expected_kinds") or ()),
            "baseline": c.get("baseline"),
            "retry": bool(c.get("retry")),
            "failure": (self.failure or UNCLASSIFIED) if self.verdict == "fail" else None,
            "attempts": self.attempts,
            "health": self.health,
            "reused": self.reused,
            "evidence": self.evidence,
            "reason": self.reason,
            "counters": self.observations,
            "metrics": self.metrics,
            **({"metrics_version": self.metrics_version} if self.metrics_version else {}),
            **({"tolerance_from": self.tolerance_from} if self.tolerance_from else {}),
            "fingerprint": self.fingerprint,
            "replay": self.replay,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "duration_s": round(self.duration_s, 3),
            "stderr": self.stderr,
            "run_id": self.run_id,
        }


def attempt(row: dict) -> dict:
    """A result as one attempt of its case."""
    return {
        "run_id": row.get("run_id"),
        "verdict": row["verdict"],
        "failure": row.get("failure"),
        "reason": row.get("reason", ""),
        "started": row.get("started"),
    }


def history(row: dict) -> list[dict]:
    """Every attempt of a result's case, oldest first, the result itself last."""
    return [*row.get("attempts", []), attempt(row)]


def write(result: Result, results_dir: Path, stem: str) -> Path:
    """Write atomically: a reader never sees half a file, a crash loses only the case in flight.
    A result already there for the case (an earlier attempt) is kept in the new one's
    attempts."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{stem}.json"
    if path.is_file() and not result.attempts:
        try:
            old = read(path)
        except ResultError:
            old = None  # unreadable: it never counted, so it is no attempt
        if old is not None and old["case_id"] == result.case["id"]:
            result.attempts = history(old)
    return write_document(result.to_json(), results_dir, stem)


def write_document(doc: dict, results_dir: Path, stem: str) -> Path:
    """A result document written atomically as results_dir/stem.json."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{stem}.json"
    fd, tmp = tempfile.mkstemp(dir=results_dir, prefix=".", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, sort_keys=False)
    os.replace(tmp, path)
    return path


def read(path: Path) -> dict:
    """One result file, validated against schemas/result.json (mlagate.documents) and its
    metrics against its suite's contract (mlagate.contract.metrics)."""
    from mlagate import documents
    from mlagate.contract import metrics

    try:
        return metrics.check(documents.load(path, "result"), str(path))
    except documents.DocumentError as exc:
        raise ResultError(str(exc)) from None


def load_dir(results_dir: Path) -> list[dict]:
    return [read(p) for p in sorted(Path(results_dir).glob("*.json"))]


@dataclass(frozen=True)
class Summary:
    counts: dict[str, int]  # per verdict
    rows: list[dict]
    missing: list[str]

    @property
    def outcomes(self) -> dict[str, int]:
        return outcomes.counts(self.rows, len(self.missing))

    @property
    def exit_code(self) -> int:
        """0 every case as expected, 1 a red outcome (mlagate.verdict.outcomes.RED), 3 only invalid
        or missing cases left."""
        return outcomes.exit_code(self.outcomes)


def summarise(rows: list[dict], expected_ids: list[str] | None = None) -> Summary:
    outcomes.mark_as_baseline(rows)
    counts = {v: 0 for v in VERDICTS}
    for r in rows:
        counts[r["verdict"]] += 1
    have = {r["case_id"] for r in rows}
    missing = [i for i in (expected_ids or []) if i not in have]
    return Summary(counts, rows, missing)


def gate_line(summary: Summary) -> str:
    """The gate's one-line answer: outcome counts, then the verdicts underneath."""
    o, c = summary.outcomes, summary.counts
    shown = ", ".join(f"{o[k]} {k}" for k in outcomes.OUTCOMES if o[k] or k == "as expected")
    verdicts = (
        f"{c['pass']} passed, {c['fail']} failed, {c['invalid']} invalid, {c['argued']} "
        "argued-not-measured"
    )
    return f"gate: {'green' if summary.exit_code == 0 else 'red'}: {shown} ({verdicts})"


def geometry_label(r: dict) -> str:
    """What a result row was measured on: its checkpoint id, else its geometry id."""
    return r.get("checkpoint") or (r.get("geometry") or {}).get("id", "")


def wrapped(head: str, text: str, width: int | None = None) -> list[str]:
    """head, then text wrapped at word boundaries to the terminal's width (never cut), continued
    under its first column."""
    width = width or max(40, shutil.get_terminal_size((160, 24)).columns - len(head) - 1)
    parts = textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]
    return [head + parts[0]] + [" " * len(head) + p for p in parts[1:]]


def signature(r: dict) -> str:
    """What the reason leaves out: the failure kind, and the attempts of a flaky case."""
    failure = r.get("failure") or {}
    kind = f" [kind: {', '.join(failure['kinds'])}]" if failure.get("kinds") else ""
    if outcomes.outcome(r) == "changed failure":
        kind += f" (expected {' or '.join(r.get('expected_kinds') or ())})"
    if r.get("reused"):
        kind += f" [reused: {reused_from(r)}]"
    tries = history(r)
    if len(tries) > 1:
        kind += (
            " [attempts: "
            + ", ".join(f"{a['verdict']} ({a.get('run_id') or 'no run id'})" for a in tries)
            + "]"
        )
    return kind


def upgraded_line(rows: list[dict]) -> str | None:
    """One line on results read through an upgrade (mlagate.upgrade): how many, from what."""
    older: dict[str, int] = {}
    for r in rows:
        if r.get("upgraded_from"):
            older[r["upgraded_from"]] = older.get(r["upgraded_from"], 0) + 1
    if not older:
        return None
    unrecorded = " (their failure kinds were not recorded: any kind confirms)"
    return (
        "upgraded: "
        + ", ".join(f"{n} results written as {s}" for s, n in sorted(older.items()))
        + f", read as {SCHEMA}"
        + (unrecorded if "mlagate.result/1" in older else "")
    )


def reused_from(r: dict) -> str:
    """Where a reused result came from: its run, commit and date."""
    u = r["reused"]
    commit = f", commit {u['commit'][:12]}" if u.get("commit") else ""
    return f"run {u.get('run_id') or 'unknown'}{commit}, {u.get('started') or 'undated'}"


def measured_by(r: dict) -> str:
    """Who measured a result: its runner, host and machine class (`not recorded` where the
    result says none), where a calibrated suite's tolerance came from, and `from the store`
    when this run reused it."""
    mc = (r.get("machine_class") or {}).get("id") or "not recorded"
    said = f"runner {r.get('runner')}, host {r.get('host') or 'not recorded'}, class {mc}"
    said += f", tolerance from {r['tolerance_from']}" if r.get("tolerance_from") else ""
    return said + (", from the store" if r.get("reused") else "")


def measured_line(rows: list[dict]) -> str | None:
    """One line on the hosts and classes the results were measured on (None: one host, none of
    them reused)."""
    seen: dict[tuple, int] = {}
    for r in rows:
        mc = (r.get("machine_class") or {}).get("id") or "class not recorded"
        where = (r.get("host") or "host not recorded", mc, bool(r.get("reused")))
        seen[where] = seen.get(where, 0) + 1
    if len(seen) < 2 and not any(reused for _, _, reused in seen):
        return None
    order = sorted(seen.items(), key=lambda x: (-x[1], x[0]))
    return "measured on: " + "; ".join(
        f"{n} by {host} ({mc}){' from the store' if reused else ''}"
        for (host, mc, reused), n in order
    )


def reused_line(rows: list[dict]) -> str | None:
    """One line on results taken from the result store: how many, from which runs."""
    reused = [r for r in rows if r.get("reused")]
    if not reused:
        return None
    runs: dict[tuple, list[str]] = {}
    for r in reused:
        u = r["reused"]
        runs.setdefault((u.get("run_id") or "unknown", u.get("commit")), []).append(
            u.get("started") or ""
        )
    order = sorted(runs.items(), key=lambda x: -len(x[1]))
    shown = "; ".join(
        f"{len(d)} from run {run}" + (f" (commit {c[:12]})" if c else "") + f" of {min(d)[:10]}"
        for (run, c), d in order[:3]
    )
    more = f"; {len(order) - 3} more runs" if len(order) > 3 else ""
    return (
        f"reused: {len(reused)} of {len(rows)} results taken from the result store "
        f"{reused[0]['reused']['store']} (same key, decisive verdict), not measured: {shown}{more}"
    )


def unfit_line(rows: list[dict]) -> str | None:
    """One line on performance results timed on a machine whose health checks failed."""
    unfit = [r for r in rows if (r.get("health") or {}).get("fit") is False]
    if not unfit:
        return None
    kept = sum(bool(r["health"]["override"]) for r in unfit)
    return (
        f"machine unfit for timings: {len(unfit)} performance results, "
        f"{len(unfit) - kept} made invalid, {kept} kept by an explicit override (--allow-unfit)"
    )


def table(summary: Summary) -> str:
    lines = [
        f"{'outcome':15} {'verdict':8} {'suite':12} {'module':34} {'arm':26} {'geometry':20} reason"
    ]
    order = {o: i for i, o in enumerate(outcomes.OUTCOMES[1:] + outcomes.OUTCOMES[:1])}
    verdict_order = {"fail": 0, "invalid": 1, "argued": 2, "pass": 3}

    def key(r):
        return (
            order[outcomes.outcome(r)],
            verdict_order[r["verdict"]],
            r["suite"],
            r["module"],
            r["arm"],
        )

    for r in sorted(summary.rows, key=key):
        geo = geometry_label(r)
        head = (
            f"{outcomes.outcome(r):15} {r['verdict']:8} {r['suite']:12} {r['module']:34} "
            f"{r['arm']:26} {geo:20} "
        )
        lines += wrapped(head, r.get("reason", "") + signature(r))
    for cid in summary.missing:
        lines.append(
            f"{'missing':15} {'':8} {cid} (no result was written: the case crashed before it "
            "finished)"
        )
    for line in (
        outcomes.controls_line(summary.rows),
        upgraded_line(summary.rows),
        unfit_line(summary.rows),
        reused_line(summary.rows),
    ):
        if line:
            lines.append(line)
    lines.append(gate_line(summary))
    return "\n".join(lines)
