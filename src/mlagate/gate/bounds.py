"""Checks of command-line values made before anything runs: output paths that can be written,
shard counts bounded by the case count, and a GPU that exists when --backend gpu asks for one.
Each failure is an execute.UsageError (one line, exit 2)."""

from __future__ import annotations

import os
from pathlib import Path

MAX_SHARDS = 1000


def _usage(message: str) -> Exception:
    from mlagate.errors import UsageError

    return UsageError(message)


def _first_existing(path: Path) -> Path:
    p = path.absolute()
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    return p


def out_dir(path: Path, flag: str = "--out") -> Path:
    """A folder that exists and can be written, or that can be made in a writable parent."""
    if os.path.lexists(path) and not path.is_dir():
        raise _usage(f"{flag}: {path} exists and is not a folder")
    base = _first_existing(path)
    if not base.is_dir():
        raise _usage(f"{flag}: {path}: {base} is not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise _usage(f"{flag}: {path}: {base} is not writable")
    return path


def out_file(path: Path, flag: str) -> Path:
    """A file that can be written (created or replaced)."""
    if path.is_dir():
        raise _usage(f"{flag}: {path} is a folder, not a file")
    if os.path.lexists(path) and not path.is_file():
        raise _usage(f"{flag}: {path} exists and is not a regular file")
    out_dir(path.parent if str(path.parent) else Path("."), flag)
    return path


def shards(n: int, cases: int, flag: str) -> None:
    """At most one shard per case (and at most MAX_SHARDS)."""
    if n < 1:
        raise _usage(f"{flag}: expected at least 1 shard, got {n}")
    if n > max(1, min(cases, MAX_SHARDS)):
        raise _usage(
            f"{flag}: {n} shards for {cases} cases"
            f" (at most one shard per case, and at most {MAX_SHARDS})"
        )
