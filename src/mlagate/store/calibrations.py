"""A machine class's calibration in the store (`mlagate calibrate --store STORE`): the bounds a
calibration accepted (mlagate.calibration/1, refused gates left out) for the one class its
results were measured on, where each lies in its suite's gates, and the runs they came from:
`mlagate.class-calibration/1` at calibrations/<class>.json. A run with `--reuse STORE` on that
class fills the matrix's `uncalibrated` values from it (mlagate.gate.reuse.calibrated)."""

from __future__ import annotations

import time

from mlagate import documents
from mlagate.store.entries import StoreError

SCHEMA = "mlagate.class-calibration/1"


def gate_path(gate: dict, backend: str) -> list[str]:
    """Where a calibrated gate's value lies in its suite's gates: equivalence's
    budgets.<dtype>.<key> under the backend, another per-backend gate keyed by it."""
    parts = gate["gate"].split(".")
    if parts[0] == "budgets" and len(parts) == 3:
        return [parts[0], parts[1], backend, parts[2]]
    return [gate["gate"], backend] if gate.get("per_backend", True) else [gate["gate"]]


def class_of(rows: list[dict], runner: str) -> dict:
    """The one machine class (id and parts) the runner's results were measured on; StoreError
    (one line) when they name none or more than one."""
    mine = [r for r in rows if r.get("runner") == runner]
    found = {(r.get("machine_class") or {}).get("id"): r.get("machine_class") for r in mine}
    if None in found:
        raise StoreError(
            f"calibrate: --store: {sum(not r.get('machine_class') for r in mine)} results of "
            f"runner {runner} name no machine class (measured before classes were recorded)"
        )
    if len(found) != 1:
        raise StoreError(
            f"calibrate: --store: runner {runner}'s results come from {len(found)} machine "
            f"classes ({', '.join(sorted(found))}): calibrate each class from its own results"
        )
    return next(iter(found.values()))


def make(doc: dict, rows: list[dict], machine_class: dict) -> dict:
    """The class's calibration from an accepted calibration document and its results."""
    bounds = [
        {
            "suite": g["suite"],
            "gate": g["gate"],
            "path": gate_path(g, doc["backend"]),
            "value": g["bound"],
        }
        for g in doc["gates"]
        if g["bound"] is not None
    ]
    runs = sorted({r.get("run_id") for r in rows if r.get("runner") == doc["runner"]}, key=str)
    stored = {
        "schema": SCHEMA,
        "machine_class": {"id": machine_class["id"], "parts": dict(machine_class["parts"])},
        "runner": doc["runner"],
        "backend": doc["backend"],
        "bounds": bounds,
        "runs": runs,
        "stored": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return documents.validate(stored, "class-calibration", "the class's calibration")


def store(spec, doc: dict, rows: list[dict], machine_class: dict) -> str:
    """Put the class's calibration in the store spec names (a git store: one commit, now);
    the line to say."""
    from mlagate.store import open_store

    stored = make(doc, rows, machine_class)
    st = open_store(spec, write=True)
    st.put_calibration(machine_class["id"], stored)
    return (
        f"stored the calibration of {machine_class['id']} ({len(stored['bounds'])} bounds) in "
        f"{st.label}: runs with --reuse {spec} on that class use it"
    )
