"""The stored calibration of this machine's class, applied before anything is keyed or run: each
bound of `mlagate calibrate --store` (mlagate.store.calibrations) fills its gate where the
matrix says `uncalibrated` for this backend; a number in the matrix wins. A class with no
stored calibration keeps its `uncalibrated` values (its cases stay invalid, naming the
command); one that fails its schema, is another class's or another backend's is ignored with
one line. Every suite with a calibrated gate records where its bounds came from
(`tolerance_from`: `matrix` or `calibration mc-…`)."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from mlagate.contract import gates as gatespec
from mlagate.contract import suites as contracts
from mlagate.matrix import Matrix
from mlagate.matrix.jsonform import freeze, thaw
from mlagate.store import Store, StoreError
from mlagate.store.entries import calibration_path
from mlagate.yamlread import Node

MATRIX = "matrix"


@dataclass(frozen=True)
class Calibrated:
    matrix: Matrix
    tolerance_from: dict[str, str]  # suite: MATRIX or "calibration mc-…"


def _calibratable(spec: Any) -> bool:
    """Whether a gate declaration holds a number a runner calibrates."""
    if isinstance(spec, gatespec.Number):
        return spec.calibrated
    if isinstance(spec, gatespec.Keyed):
        return _calibratable(spec.of)
    if isinstance(spec, gatespec.Record):
        return any(map(_calibratable, spec.fields.values()))
    return False


def _leaf(spec: Any, path: list[str]) -> Any:
    for key in path[1:]:
        spec = spec.of if isinstance(spec, gatespec.Keyed) else (spec.fields or {}).get(key)
        if spec is None:
            return None
    return spec


def _fail(node, key: str, message: str) -> Exception:
    return StoreError(f"{key}: {message}")


def _fill(gates: dict, bounds: list[dict], declared, ctx) -> bool:
    """Put each bound where its gate is uncalibrated, checked against the suite's declaration
    (StoreError naming the gate when one does not fit it); whether any was put."""
    used = False
    for b in bounds:
        *above, last = b["path"]
        node = gates
        for key in above:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict) or node.get(last) != gatespec.UNCALIBRATED:
            continue  # the matrix's number wins, or the matrix has no such gate
        spec = _leaf(declared.get(b["path"][0]), b["path"])
        key = f"suites.{b['suite']}.gates.{'.'.join(b['path'])}"
        if not isinstance(spec, gatespec.Number) or not spec.calibrated:
            raise StoreError(f"{key}: not a calibrated gate")
        node[last] = spec.read(Node(b["value"], 0), key, ctx)
        used = True
    return used


def _stored(store: Store | None, machine_class: str | None, backend: str) -> dict | None:
    if store is None or not machine_class:
        return None
    try:
        doc = store.get_calibration(machine_class)
    except StoreError as exc:
        print(f"mlagate: reuse: {exc}: ignored", file=sys.stderr)
        return None
    if doc is not None and doc["backend"] != backend:
        print(
            f"mlagate: reuse: the calibration of {machine_class} in {store.label} is of backend "
            f"{doc['backend']}, this run's is {backend}: ignored",
            file=sys.stderr,
        )
        return None
    return doc


def overlay(
    matrix: Matrix, backend: str, store: Store | None, machine_class: str | None
) -> Calibrated:
    """The matrix with this class's stored bounds in its uncalibrated gates, and where each
    calibrated suite's bounds come from."""
    doc = _stored(store, machine_class, backend)
    ctx = gatespec.Check(_fail, tuple(matrix.profiles), (backend,), ())
    suites, sources = dict(matrix.suites), {}
    for sid, suite in matrix.suites.items():
        declared = contracts.load(suite.file).gates
        if not any(map(_calibratable, declared.values())):
            continue
        bounds = [b for b in (doc or {}).get("bounds", ()) if b["suite"] == sid]
        gates = thaw(suite.gates)
        try:
            used = bool(bounds) and _fill(gates, bounds, declared, ctx)
        except StoreError as exc:  # one bad bound: the whole calibration is ignored
            where = f"{store.label}/{calibration_path(machine_class)}"
            print(f"mlagate: reuse: {where}: {exc}: ignored", file=sys.stderr)
            return overlay(matrix, backend, None, None)
        suites[sid] = dataclasses.replace(suite, gates=freeze(gates)) if used else suite
        sources[sid] = f"calibration {machine_class}" if used else MATRIX
    if doc and any(v != MATRIX for v in sources.values()):
        print(
            f"mlagate: reuse: bounds from the calibration {machine_class} (runner "
            f"{doc['runner']}, stored {doc['stored']})",
            file=sys.stderr,
        )
    return Calibrated(dataclasses.replace(matrix, suites=MappingProxyType(suites)), sources)
