"""The one file hasher: a file's sha256, read in blocks. Every content address (an arm's cache
key, its content manifest, a case's reuse key, arm.json's patch records) hashes files with it."""

from __future__ import annotations

import hashlib
from pathlib import Path

BLOCK = 1 << 20


def file_sha(path: Path | str) -> str:
    """sha256 (hex) of the file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(BLOCK), b""):
            h.update(block)
    return h.hexdigest()


def tree_digest(root: Path) -> str:
    """sha256 of a source tree's Python files: each one's path under root, then its bytes, in
    path order (where the tree lies does not count)."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()
