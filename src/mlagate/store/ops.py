"""`mlagate store`'s verbs as plain functions over an opened store, each returning a result
object (mlagate.commands.store prints them): stats, push (a folder's entries into a git
store), prune (by age or by commit, never an entry a plan would reuse), verify."""

from __future__ import annotations

import calendar
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from mlagate import documents
from mlagate.store import entries
from mlagate.store.folder import FolderStore, Published


def raw_entries(store) -> Iterator[tuple[str, str, bytes]]:
    """Every entry of a store, (key, where, bytes), unchecked."""
    if isinstance(store, FolderStore):
        for key, path in store.files():
            try:
                yield key, str(path), documents.read_bytes(path)
            except (documents.DocumentError, OSError):
                yield key, str(path), b""
    else:
        yield from store.iter_raw()


def sound_entries(store, refused: list[str]) -> Iterator[tuple[str, dict, int]]:
    """Every entry that re-derives its key and digest, (key, entry, bytes); each other one
    appended to refused as one line naming it."""
    for key, where, raw in raw_entries(store):
        entry, why = entries.check(raw, where, key)
        if why:
            refused.append(f"{where}: {why}")
        else:
            yield key, entry, len(raw)


@dataclass
class Stats:
    store: str
    entries: int = 0
    bytes: int = 0
    by_suite: Counter = field(default_factory=Counter)
    by_class: Counter = field(default_factory=Counter)
    refused: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"{self.store}: {self.entries} entries, {self.bytes} bytes"]
        out += [f"  suite {s}: {n}" for s, n in sorted(self.by_suite.items())]
        out += [f"  machine class {c}: {n}" for c, n in sorted(self.by_class.items())]
        return out + [f"  refused: {line}" for line in self.refused]


def stats(store) -> Stats:
    st = Stats(store.label)
    for _, entry, size in sound_entries(store, st.refused):
        st.entries += 1
        st.bytes += size
        st.by_suite[entry["result"].get("suite", "unknown")] += 1
        st.by_class[entries.machine_class_of(entry)] += 1
    return st


@dataclass
class Verified:
    store: str
    sound: int
    refused: list[str]

    def lines(self) -> list[str]:
        head = f"{self.store}: {self.sound} entries re-derive their key and digest"
        return [head + (f", {len(self.refused)} do not:" if self.refused else "")] + self.refused


def verify(store) -> Verified:
    refused: list[str] = []
    sound = sum(1 for _ in sound_entries(store, refused))
    return Verified(store.label, sound, refused)


@dataclass
class Pushed:
    source: str
    sent: int
    refused: list[str]
    published: Published

    def lines(self) -> list[str]:
        return [
            f"{self.source}: {self.sent} sound entries sent", *self.refused,
            self.published.line(),
        ]  # fmt: skip


def push(sources: list[FolderStore], target) -> Pushed:
    """Folder stores' sound entries into a git store, in one commit (those already there stay
    as they are)."""
    refused: list[str] = []
    sent = 0
    for source in sources:
        for key, entry, _ in sound_entries(source, refused):
            target.put_raw(key, entries.encode(entry))
            sent += 1
    return Pushed(", ".join(s.label for s in sources), sent, refused, target.publish())


@dataclass
class Pruned:
    store: str
    kept: int
    dropped: list[str]
    protected: int  # kept only because the plan would reuse them
    published: Published | None = None

    def lines(self) -> list[str]:
        out = [
            f"{self.store}: dropped {len(self.dropped)} entries, kept {self.kept} "
            f"({self.protected} of them only because the plan would reuse them)"
        ]
        return out + ([self.published.line()] if self.published else [])


def _stored_at(entry: dict) -> float:
    try:
        return calendar.timegm(time.strptime(entry["from"]["stored"], "%Y-%m-%dT%H:%M:%SZ"))
    except (KeyError, TypeError, ValueError):
        return 0.0


def prune(
    store, keep_days: float | None, keep_commits: int | None, protect: set[str], now=None
) -> Pruned:
    """Drop entries stored more than keep_days ago, or from none of the keep_commits newest
    commits (by when their entries were stored); never one whose key is in protect."""
    now = time.time() if now is None else now
    sound = [(k, e) for k, e, _ in sound_entries(store, [])]
    newest: dict = {}
    for _, e in sound:
        c = e["from"].get("commit")
        newest[c] = max(newest.get(c, 0.0), _stored_at(e))
    recent = (
        set(sorted(newest, key=newest.get, reverse=True)[:keep_commits]) if keep_commits else None
    )
    dropped, protected = [], 0
    for key, e in sound:
        old = keep_days is not None and now - _stored_at(e) > keep_days * 86400
        stale = recent is not None and e["from"].get("commit") not in recent
        if old or stale:
            if key in protect:
                protected += 1
            else:
                dropped.append(key)
    published = store.remove(dropped) if dropped else None
    return Pruned(store.label, len(sound) - len(dropped), dropped, protected, published)
