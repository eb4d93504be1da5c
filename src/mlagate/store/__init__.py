"""The result store: decisive results by content key, and calibrations by machine class,
shared by every run that names it (`--reuse STORE`). A folder (mlagate.store.folder) or a git
remote, `git+URL[#BRANCH]` (mlagate.store.gitstore: file://, https://, ssh; default branch
`mlagate-results`). What an entry is: mlagate.store.entries; the verbs of `mlagate store`:
mlagate.store.ops."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from mlagate.store.entries import StoreError
from mlagate.store.folder import FolderStore, Published

GIT_PREFIX = "git+"
DEFAULT_BRANCH = "mlagate-results"

__all__ = ["DEFAULT_BRANCH", "Published", "Store", "StoreError", "is_git", "open_store"]


class Store(Protocol):
    label: str
    ignored: list[str]

    def get(self, key) -> dict | None: ...
    def put(self, key, doc: dict, commit: str | None): ...
    def get_calibration(self, machine_class: str) -> dict | None: ...
    def put_calibration(self, machine_class: str, doc: dict) -> None: ...
    def prefetch(self, keys) -> None: ...
    def publish(self) -> Published: ...


def is_git(spec) -> bool:
    return isinstance(spec, str) and spec.startswith(GIT_PREFIX)


def open_store(spec, *, write: bool) -> Store:
    """The store a spec names: a folder path, or git+URL[#BRANCH]. write False: a reader that
    never writes (a pull request's run); StoreError (one line) when it cannot be opened."""
    if is_git(spec):
        from mlagate.store import gitstore

        return gitstore.GitStore.open(spec, write=write)
    root = Path(spec)
    if root.exists() and not root.is_dir():
        raise StoreError(f"{spec}: exists and is not a folder")
    return FolderStore(root, write=write)
