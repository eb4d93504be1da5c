"""One bisection as asked: built once by the bisect verb from its flags, handed whole to
mlagate.bisect.run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlagate.gate.request import ReuseStore
from mlagate.matrix import Matrix


@dataclass(frozen=True)
class BisectRequest:
    """tree: the runtime checkout; good, bad: the ends (full commits); suites, modules: the
    selection, cases: its case ids (arm `head`), or () for every case of the selection; reuse:
    the result store every measurement goes through; command: the command line, for the
    document and its replay."""

    tree: Path
    good: str
    bad: str
    matrix: Matrix
    suites: tuple[str, ...]
    modules: tuple[str, ...]
    cases: tuple[str, ...]
    profile: str
    backend: str
    runner: str
    out: Path
    reuse: ReuseStore
    workers: int = 1
    cache: Path | None = None
    cpu: str = "auto"
    max_commits: int | None = None
    budget_s: float | None = None
    command: str = ""
