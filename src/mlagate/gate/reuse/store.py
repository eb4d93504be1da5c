"""The result store: a folder of decisive results by key (mlagate.gate.reuse.keys), one
versioned document per key (`mlagate.stored-result/1`, schemas/stored-result.json, read through
mlagate.documents): STORE/results/<key>.json.

An entry keeps the key's parts (so the key re-derives), where the result came from (run,
commit, date) and the result document itself with its sha256. An entry that fails its schema,
whose key does not re-derive, whose result was altered or is not decisive is ignored with one
line saying so. In CI the folder is the GitHub Actions cache (or the published history).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from mlagate import documents, results
from mlagate.gate.reuse.keys import Key, combine, digest

SCHEMA = "mlagate.stored-result/1"
DECISIVE = ("pass", "fail")


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


@dataclass
class Store:
    root: Path
    ignored: list[str]  # one line per entry ignored, in the order met

    @classmethod
    def at(cls, root: Path) -> Store:
        return cls(Path(root), [])

    def path(self, key: str) -> Path:
        return self.root / "results" / f"{key}.json"

    def _ignore(self, path: Path, why: str) -> None:
        line = f"mlagate: reuse: {path}: ignored: {why}"
        self.ignored.append(line)
        print(line, file=sys.stderr)

    def get(self, key: Key) -> dict | None:
        """The stored entry of this key, checked; None when there is none or it is ignored."""
        path = self.path(key.digest)
        if not path.exists():
            return None
        try:
            entry = documents.load(path, "stored-result")
        except documents.DocumentError as exc:
            self._ignore(path, str(exc).removeprefix(f"{path}: "))
            return None
        if combine(entry["parts"]) != entry["key"] or entry["key"] != key.digest:
            self._ignore(path, "its key does not re-derive from its parts")
            return None
        if digest(entry["result"]) != entry["result_sha256"]:
            self._ignore(path, "its result does not match its sha256 (altered)")
            return None
        try:
            documents.validate(entry["result"], "result", f"{path}: result")
        except documents.DocumentError as exc:
            self._ignore(path, str(exc).removeprefix(f"{path}: "))
            return None
        why = decisive(entry["result"])
        if why:
            self._ignore(path, f"not decisive: {why}")
            return None
        try:
            os.utime(path)  # in use: runners/cleanup.sh prunes by age
        except OSError:
            pass  # a read-only store
        return entry

    def put(self, key: Key, doc: dict, commit: str | None) -> Path | None:
        """Store a decisive result under its key (atomically); None when it is not decisive."""
        if decisive(doc) is not None:
            return None
        entry = {
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
        path = self.path(key.digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(entry, fh)
        os.replace(tmp, path)
        return path
