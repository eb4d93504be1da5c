"""What a store holds, whatever its backend: one versioned document per key
(`mlagate.stored-result/1`, schemas/stored-result.json) at results/<2 hex>/<key>.json (the
folder store reads the older flat results/<key>.json too), and one calibration document per
machine class at calibrations/<class>.json (`mlagate.class-calibration/1`,
mlagate.store.calibrations).

An entry keeps the key's parts (so the key re-derives), where the result came from (run,
commit, date) and the result itself with its sha256. An entry that fails its schema, whose key
does not re-derive, whose result was altered or is not decisive is refused with one line."""

from __future__ import annotations

import hashlib
import json
import re
import time

from mlagate import documents, results
from mlagate.errors import UsageError

SCHEMA = "mlagate.stored-result/1"
DECISIVE = ("pass", "fail")
KEY_VERSION = 1  # of what a key holds (mlagate.gate.reuse.keys): a change re-runs everything
MARKER = "mlagate-store.json"  # at the root of a git store's branch: what makes it a store
MARKER_DOC = {"schema": "mlagate.store/1", "layout": "results/<2 hex>/<key>.json"}
CLASS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,119}")
KEY_NAME = re.compile(r"[0-9a-f]{64}")


class StoreError(UsageError):
    """A store that cannot be opened, read or written: one line, exit status 2."""


def digest(data) -> str:
    """sha256 of data as canonical JSON."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def combine(parts: dict) -> str:
    """A key from its parts (each a digest, by name)."""
    return digest({"version": KEY_VERSION, **parts})


def entry_path(key: str) -> str:
    """Where an entry lies inside a store (fanned out by the key's first two hex digits)."""
    return f"results/{key[:2]}/{key}.json"


def calibration_path(machine_class: str) -> str:
    if not isinstance(machine_class, str) or not CLASS_NAME.fullmatch(machine_class):
        raise StoreError(f"machine class {machine_class!r}: not a name (letters, digits, ._+-)")
    return f"calibrations/{machine_class}.json"


def flaky(doc: dict) -> bool:
    """Whether a result's attempts measured both pass and fail."""
    seen = {a["verdict"] for a in results.history(doc)}
    return {"pass", "fail"} <= seen


def decisive(doc: dict) -> str | None:
    """Why a result cannot stand for a later case (None: it can): only a pass or a fail, never
    an invalid or argued one, never a flaky case, never a timing from an unfit machine."""
    if doc["verdict"] not in DECISIVE:
        return f"its verdict is {doc['verdict']}"
    if flaky(doc):
        return "its case was flaky"
    if (doc.get("health") or {}).get("fit") is False:
        return "it was timed on a machine unfit for timings"
    if doc.get("reused"):
        return "it was itself reused"
    return None


def make(key, doc: dict, commit: str | None) -> dict | None:
    """The entry storing a decisive result under key (a `Key`: digest and parts); None when
    the result is not decisive."""
    if decisive(doc) is not None:
        return None
    return {
        "schema": SCHEMA,
        "key": key.digest,
        "parts": key.parts,
        "case_id": doc["case_id"],
        "from": {
            "run_id": doc.get("run_id"),
            "commit": commit,
            "started": doc.get("started"),
            "stored": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        "result": doc,
        "result_sha256": digest(doc),
    }


def encode(entry: dict) -> bytes:
    return json.dumps(entry, sort_keys=True, separators=(",", ":")).encode("utf-8")


def check(raw: bytes, where: str, key: str | None) -> tuple[dict | None, str | None]:
    """(entry, None) when raw is a sound entry of key (any key when None); (None, why) else."""
    try:
        entry = documents.validate(documents.parse(raw, where), "stored-result", where)
    except documents.DocumentError as exc:
        return None, str(exc).removeprefix(f"{where}: ")
    if combine(entry["parts"]) != entry["key"] or key not in (None, entry["key"]):
        return None, "its key does not re-derive from its parts"
    if digest(entry["result"]) != entry["result_sha256"]:
        return None, "its result does not match its sha256 (altered)"
    try:
        documents.validate(entry["result"], "result", f"{where}: result")
    except documents.DocumentError as exc:
        return None, str(exc).removeprefix(f"{where}: ")
    why = decisive(entry["result"])
    return (None, f"not decisive: {why}") if why else (entry, None)


def check_calibration(raw: bytes, where: str, machine_class: str | None = None) -> dict:
    """A class's calibration document, checked (StoreError, one line, when it fails its schema
    or is another class's)."""
    try:
        doc = documents.validate(documents.parse(raw, where), "class-calibration", where)
    except documents.DocumentError as exc:
        raise StoreError(str(exc)) from None
    if machine_class is not None and doc["machine_class"]["id"] != machine_class:
        raise StoreError(f"{where}: a calibration of {doc['machine_class']['id']}, not of "
                         f"{machine_class}")  # fmt: skip
    return doc


def machine_class_of(entry: dict) -> str:
    """The machine class the entry's result was measured on, "unknown" when it says none."""
    found = (entry.get("result") or {}).get("machine_class")
    if isinstance(found, dict):
        found = found.get("name") or found.get("id")
    return found if isinstance(found, str) and found else "unknown"
