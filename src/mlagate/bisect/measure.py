"""One commit's cases: its tree written from git (as `run --head` writes base's), the run's
matrix derived for it (mlagate.gate.headbase.derive: the commit is the arm `head`; its `base` is
the end a performance case is compared with, and for a correctness case the commit itself, so
its key is the commit's files alone), then one run of mlagate.gate.run with the bisection's
result store, so a case whose key (the files it runs, by content) was measured before is taken
from the store."""

from __future__ import annotations

import dataclasses
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from mlagate.bisect.request import BisectRequest
from mlagate.errors import UsageError
from mlagate.gate import headbase
from mlagate.gate import run as execute
from mlagate.gate.request import RunRequest
from mlagate.matrix import MatrixError, load
from mlagate.modulefiles import module_file
from mlagate.plan import PlanError, Selection, expand
from mlagate.scan.discovery import DiscoveryError, known_modules, runtime_of


@dataclass
class Measured:
    """A commit's results by case id (missing: planned, no result), or why it could not be run
    (`problem`: its tree has no such module, does not import, the run stopped)."""

    sha: str
    rows: dict[str, dict] = field(default_factory=dict)
    problem: str | None = None
    seconds: float = 0.0
    reused: int = 0
    files: dict[str, str] = field(default_factory=dict)  # module id -> its file in the tree


def folder(req: BisectRequest, sha: str) -> Path:
    return req.out / "commits" / sha[:12]


def tree_of(req: BisectRequest, sha: str) -> Path:
    """The commit's tree under OUT/commits/SHA/tree (written once)."""
    where = folder(req, sha) / "tree"
    if not (where / ".complete").exists():
        if where.exists():
            shutil.rmtree(where)
        package = runtime_of(req.matrix, req.tree).package
        headbase.export_tree(req.tree, sha, where, package)
        (where / ".complete").write_text(sha)
    return where


def derived(req: BisectRequest, sha: str, base_sha: str):
    """The run's matrix for commit sha (arm head) against base_sha (arm base), and the module
    files; a DiscoveryError when the commit's tree does not hold the selected modules."""
    tree, base = tree_of(req, sha), tree_of(req, base_sha)
    runtime = runtime_of(req.matrix, tree, f"commit {sha[:12]}")
    found = known_modules(req.matrix, runtime, tree)
    missing = [m for m in req.modules if m not in found]
    if missing:
        raise DiscoveryError(f"commit {sha[:12]}: no MLA class of {', '.join(missing)}")
    doc = headbase.derive(req.matrix, runtime, tree, base, found)  # all: the arm's every class
    path = folder(req, sha) / f"matrix-{base_sha[:12]}.yaml"
    path.write_text(
        f"# written by mlagate bisect: commit {sha} as head, {base_sha} as base, from "
        f"{req.matrix.path}\n" + yaml.safe_dump(doc, sort_keys=False)
    )
    files = {}
    for mid, f in found.items():
        if req.modules and mid not in req.modules:
            continue
        p = module_file(tree, f.import_path)
        files[mid] = str(p.relative_to(tree)) if p is not None else f.import_path
    return load(path), files


def planned(req: BisectRequest, sha: str, base_sha: str) -> list[str]:
    """The case ids the selection names at commit sha (arm head); none is bad input."""
    matrix, _ = derived(req, sha, base_sha)
    selection = Selection(req.suites, req.modules or tuple(matrix.modules), (headbase.HEAD,))
    ids = [c.id for c in expand(matrix, selection, req.profile, req.backend, req.runner)]
    if req.cases:
        unknown = [c for c in req.cases if c not in ids]
        if unknown:
            raise UsageError(f"--case {unknown[0]}: names no case of the selection at --bad")
        return list(req.cases)
    if not ids:
        raise UsageError("the selection names no case at --bad (--suite, --module)")
    return ids


def commit(
    req: BisectRequest, sha: str, base_sha: str, ids: list[str], fresh: bool = False
) -> Measured:
    """Run the cases ids on commit sha (base_sha the base arm) through the result store; fresh
    (a re-check): measured again, never taken from the store (its result is still stored)."""
    started = time.monotonic()
    got = Measured(sha)
    reuse = dataclasses.replace(req.reuse, read=False) if fresh else req.reuse
    try:
        matrix, got.files = derived(req, sha, base_sha)
        run = RunRequest(
            matrix,
            Selection(req.suites, req.modules or tuple(matrix.modules), (headbase.HEAD,)),
            req.profile,
            req.backend,
            req.runner,
            folder(req, sha) / f"{'recheck' if fresh else 'run'}-{base_sha[:12]}",
            req.workers,
            req.cache,
            cpu=req.cpu,
            reuse=reuse,
            cases=tuple(ids),
        )
        outcome = execute.run(run)
    except (DiscoveryError, headbase.HeadBaseError, MatrixError, PlanError, UsageError) as exc:
        got.problem = str(exc)
    else:
        got.rows = {r["case_id"]: r for r in outcome.summary.rows}
        got.reused = sum(1 for r in got.rows.values() if r.get("reused"))
    got.seconds = time.monotonic() - started
    return got
