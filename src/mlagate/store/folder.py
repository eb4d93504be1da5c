"""The folder store: STORE/results/<2 hex>/<key>.json (and the older flat results/<key>.json,
read as well, so folders written before the fan-out keep working), STORE/calibrations/. In CI
the folder is the GitHub Actions cache or a runner's own disk; the git store
(mlagate.store.gitstore) keeps its fetched entries in one of these."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mlagate import documents
from mlagate.store import entries


@dataclass
class Published:
    """What publish() did: `pushed` entries in `commits` commits after `tries` pushes."""

    store: str
    pushed: int = 0
    commits: int = 0
    tries: int = 0
    ref: str | None = None  # the store's ref after the push (git)

    def line(self) -> str:
        if not self.commits:
            return f"store: {self.store}: nothing to publish"
        return (
            f"store: {self.store}: published {self.pushed} entries in one commit "
            f"({self.tries} push{'es' if self.tries > 1 else ''}, now {self.ref})"
        )


@dataclass
class FolderStore:
    root: Path
    write: bool = True
    ignored: list[str] = field(default_factory=list)  # one line per entry refused, in order
    new: list[str] = field(default_factory=list)  # keys put by this process

    @property
    def label(self) -> str:
        return str(self.root)

    def path(self, key: str) -> Path:
        return self.root / entries.entry_path(key)

    def refuse(self, where, why: str) -> None:
        line = f"mlagate: reuse: {where}: ignored: {why}"
        self.ignored.append(line)
        print(line, file=sys.stderr)

    def _found(self, key: str) -> Path | None:
        for path in (self.path(key), self.root / "results" / f"{key}.json"):
            if path.exists():
                return path
        return None

    def prefetch(self, keys) -> None:
        """Nothing to fetch: the entries are on this disk."""

    def get(self, key) -> dict | None:
        """The stored entry of this key (a `Key`), checked; None when there is none or it is
        refused (one line naming it)."""
        path = self._found(key.digest)
        if path is None:
            return None
        try:
            raw = documents.read_bytes(path)
        except (documents.DocumentError, OSError) as exc:
            self.refuse(path, str(exc).removeprefix(f"{path}: "))
            return None
        entry, why = entries.check(raw, str(path), key.digest)
        if why:
            self.refuse(path, why)
            return None
        try:
            os.utime(path)  # in use: runners/cleanup.sh prunes by age
        except OSError:
            pass  # a read-only store
        return entry

    def put(self, key, doc: dict, commit: str | None) -> Path | None:
        """Store a decisive result under its key (atomically); None when it is not decisive."""
        entry = entries.make(key, doc, commit)
        if entry is None:
            return None
        path = self.path(key.digest)
        self._write(path, entries.encode(entry))
        self.new.append(key.digest)
        return path

    def _write(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)

    def get_calibration(self, machine_class: str) -> dict | None:
        """The calibration document stored for a machine class; None when there is none."""
        path = self.root / entries.calibration_path(machine_class)
        if not path.exists():
            return None
        try:
            raw = documents.read_bytes(path)
        except documents.DocumentError as exc:
            raise entries.StoreError(str(exc)) from None
        return entries.check_calibration(raw, str(path), machine_class)

    def put_calibration(self, machine_class: str, doc: dict) -> None:
        """Store a class's calibration (mlagate.class-calibration/1), replacing any earlier."""
        path = self.root / entries.calibration_path(machine_class)
        entries.check_calibration(
            json.dumps(doc).encode(), f"calibration of {machine_class}", machine_class
        )
        self._write(path, (json.dumps(doc, indent=1) + "\n").encode("utf-8"))

    def publish(self) -> Published:
        """Nothing to do: put() wrote each entry in place."""
        return Published(self.label)

    def remove(self, keys) -> Published:
        """Delete these keys' entries (mlagate store prune)."""
        for key in keys:
            while (path := self._found(key)) is not None:
                path.unlink()
        return Published(self.label)

    def files(self) -> Iterator[tuple[str, Path]]:
        """Every entry file (key, path), both layouts, in a stable order."""
        base = self.root / "results"
        if not base.is_dir():
            return
        for path in sorted(base.glob("*.json")) + sorted(base.glob("??/*.json")):
            if entries.KEY_NAME.fullmatch(path.stem):
                yield path.stem, path
