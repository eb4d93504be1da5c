"""One `mlagate run` as asked: built once from the command line (its flags, --head and --resume
resolved there, mlagate.commands.run) and handed whole to mlagate.gate.run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlagate.gate import shard
from mlagate.matrix import Matrix
from mlagate.plan import Selection


@dataclass(frozen=True)
class ReuseStore:
    """The result store of a run (--reuse STORE: a folder or git+URL[#BRANCH], mlagate.store):
    read unless --no-reuse (every case measured, the results still stored), written unless
    --reuse-read-only; `into`: a folder store this run's results go to instead of STORE
    (--reuse-into: a CI job's artifact, published by a trusted job)."""

    path: Path | str
    read: bool = True
    write: bool = True
    into: Path | None = None


@dataclass(frozen=True)
class ShardSpec:
    """--shard I/N: shard `index` (from 1) of `count`."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> ShardSpec:
        return cls(*shard.parse_spec(text))


@dataclass(frozen=True)
class RunRequest:
    """What one run runs and how. `only`: a resume's case ids (earlier results of OUT stay);
    `reuse`: a result store, or None; `cases`: only these planned case ids (a bisection's)."""

    matrix: Matrix
    selection: Selection
    profile: str
    backend: str
    runner: str
    out: Path
    workers: int = 1
    cache: Path | None = None
    pytest_args: tuple[str, ...] = ()
    aa: bool = False
    shard: ShardSpec | None = None
    costs: shard.Costs | None = None
    cpu: str = "auto"
    verbose: bool = False
    only: tuple[str, ...] | None = None
    reuse: ReuseStore | None = None
    machine: dict | None = None  # the host and its class (mlagate.machine.classes.record)
    cases: tuple[str, ...] | None = None
