"""Results: one versioned JSON file per case, written atomically as the case finishes."""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "mlagate.result/1"
VERDICTS = ("pass", "fail", "invalid", "argued")


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
    run_id: str | None = field(default_factory=lambda: os.environ.get("MLAGATE_RUN_ID"))  # set by mlagate run

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
            "verdict": self.verdict,
            "evidence": self.evidence,
            "reason": self.reason,
            "counters": self.observations,
            "metrics": self.metrics,
            "fingerprint": self.fingerprint,
            "replay": self.replay,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "duration_s": round(self.duration_s, 3),
            "stderr": self.stderr,
            "run_id": self.run_id,
        }


def write(result: Result, results_dir: Path, stem: str) -> Path:
    """Write atomically: a reader never sees half a file, a crash loses only the case in flight."""
    results_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=results_dir, prefix=".", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(result.to_json(), fh, indent=1, sort_keys=False)
    path = results_dir / f"{stem}.json"
    os.replace(tmp, path)
    return path


def read(path: Path) -> dict:
    """One result file, validated against schemas/result.json (mlagate.documents)."""
    from mlagate import documents

    try:
        return documents.load(path, "result")
    except documents.DocumentError as exc:
        raise ResultError(str(exc)) from None


def load_dir(results_dir: Path) -> list[dict]:
    return [read(p) for p in sorted(Path(results_dir).glob("*.json"))]


@dataclass(frozen=True)
class Summary:
    counts: dict[str, int]
    rows: list[dict]
    missing: list[str]

    @property
    def exit_code(self) -> int:
        """0 all gates pass (argued rows do not fail), 1 a gate failed, 3 only invalid cases are left."""
        if self.counts.get("fail", 0):
            return 1
        if self.counts.get("invalid", 0) or self.missing:
            return 3
        return 0


def summarise(rows: list[dict], expected_ids: list[str] | None = None) -> Summary:
    counts = {v: 0 for v in VERDICTS}
    for r in rows:
        counts[r["verdict"]] += 1
    have = {r["case_id"] for r in rows}
    missing = [i for i in (expected_ids or []) if i not in have]
    return Summary(counts, rows, missing)


def geometry_label(r: dict) -> str:
    """What a result row was measured on: its checkpoint id, else its geometry id."""
    return r.get("checkpoint") or (r.get("geometry") or {}).get("id", "")


def table(summary: Summary) -> str:
    lines = [f"{'verdict':8} {'suite':12} {'module':34} {'arm':26} {'geometry':20} reason"]
    order = {"fail": 0, "invalid": 1, "argued": 2, "pass": 3}
    for r in sorted(summary.rows, key=lambda r: (order[r["verdict"]], r["suite"], r["module"], r["arm"])):
        geo = geometry_label(r)
        lines.append(f"{r['verdict']:8} {r['suite']:12} {r['module']:34} {r['arm']:26} {geo:20} {r['reason'][:120]}")
    for cid in summary.missing:
        lines.append(f"{'missing':8} {cid} (no result was written: the case crashed before it finished)")
    c = summary.counts
    lines.append(f"{c['pass']} passed, {c['fail']} failed, {c['invalid']} invalid, {c['argued']} argued-not-measured" + (f", {len(summary.missing)} missing" if summary.missing else ""))
    return "\n".join(lines)
