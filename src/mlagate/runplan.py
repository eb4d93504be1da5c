"""The hand-off: what one `mlagate run` decided before pytest starts, written once to
OUT/plan.json and read by the pytest process through `--mlagate-handoff`, so the matrix is read
and the cases expanded once per run.

It holds the validated matrix (mlagate.matrix.to_json), the profile, backend and runner, the
cases (with their expectations), the resolved arm installs, and where each calibrated suite's
bounds come from (mlagate.gate.reuse.calibrated).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from mlagate import documents
from mlagate import matrix as matrix_mod
from mlagate.arm.arms import ArmInstall
from mlagate.matrix import Matrix
from mlagate.plan import Case

SCHEMA = "mlagate.run-plan/1"
FILE = "plan.json"


class HandOffError(ValueError):
    """A plan file that cannot be read; one line naming it."""


@dataclass(frozen=True)
class HandOff:
    matrix: Matrix
    profile: str
    backend: str
    runner: str
    aa: bool
    cases: tuple[Case, ...]
    installs: dict[str, ArmInstall]
    tolerance_from: dict[str, str] = field(default_factory=dict)  # suite: where its bounds are from


def write(out: Path, plan: HandOff) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "schema": SCHEMA,
        "matrix": matrix_mod.to_json(plan.matrix),
        "profile": plan.profile,
        "backend": plan.backend,
        "runner": plan.runner,
        "aa": plan.aa,
        "cases": [c.to_json() for c in plan.cases],
        "installs": {
            a: {"key": i.key, "dir": str(i.dir), "version": i.version}
            for a, i in plan.installs.items()
        },
        "tolerance_from": dict(plan.tolerance_from),
    }
    fd, tmp = tempfile.mkstemp(dir=out, prefix=".plan-", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    os.replace(tmp, out / FILE)
    return out / FILE


def read(path: Path) -> HandOff:
    try:
        doc = documents.load(Path(path), "run-plan")
    except documents.DocumentError as exc:
        raise HandOffError(str(exc)) from None
    try:
        m = matrix_mod.from_json(doc["matrix"])
        cases = tuple(
            Case(
                **{k: v for k, v in c.items() if k not in ("id", "expected_kinds")},
                expected_kinds=tuple(c.get("expected_kinds", ())),
            )
            for c in doc["cases"]
        )
        installs = {
            a: ArmInstall(
                m.arms[a], m.runtimes[m.arms[a].runtime], i["key"], Path(i["dir"]), i["version"]
            )
            for a, i in doc["installs"].items()
        }
        return HandOff(
            m, doc["profile"], doc["backend"], doc["runner"], bool(doc["aa"]), cases, installs,
            dict(doc.get("tolerance_from") or {}),
        )  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise HandOffError(
            f"{path}: not a readable hand-off ({type(exc).__name__}: {exc})"
        ) from None
