"""A runtime checkout as the gate's subject: `mlagate run --head PATH [--base REF]`.

The checkout at PATH (its working tree, as it is) becomes the path arm `head` (role head); the
commit where it left REF (git merge-base) becomes the path arm `base` (role base), head's
baseline. The modules are the MLA attention classes that discovery finds in head
(mlagate.gate.discovery): each runs as the registered module it matches, wherever in the tree it
is; the unknown ones are one error naming the command that writes their entries. The run's matrix is
written to OUT/headbase/matrix.yaml (with base's tree beside it) so every replay command works.
Cases run on head only; base is what the paired suites compare it with.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from mlagate.gate.discovery import Found, extend, known_modules, runtime_of
from mlagate.matrix import Matrix, load
from mlagate.matrix.model import Runtime

HEAD, BASE = "head", "base"


class HeadBaseError(ValueError):
    """A --head / --base problem; one line."""


@dataclass(frozen=True)
class HeadBase:
    matrix: Path  # the derived matrix file
    modules: tuple[str, ...]  # matrix module ids found in head
    runtime: str
    base_commit: str


def _git(path: Path, *args: str) -> str:
    try:
        proc = subprocess.run(
            ["git", "-C", str(path), *args], capture_output=True, text=True, timeout=120
        )
    except FileNotFoundError:
        raise HeadBaseError("--head: git is not installed") from None
    if proc.returncode != 0:
        first = next(
            (ln for ln in proc.stderr.splitlines() if ln.strip()), f"exit {proc.returncode}"
        )
        raise HeadBaseError(f"--head {path}: git {' '.join(args)}: {first.strip()}")
    return proc.stdout.strip()


def default_base(path: Path) -> str:
    """The first of origin/HEAD, origin/main and main that names a commit (else main)."""
    for ref in ("origin/HEAD", "origin/main", "main"):
        try:
            _git(path, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
            return ref
        except HeadBaseError:
            continue
    return "main"


def export_base(head: Path, ref: str, dest: Path) -> str:
    """Write the tree of merge-base(HEAD, ref) to dest; return that commit."""
    commit = _git(head, "merge-base", "HEAD", ref)
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile() as tar:
        proc = subprocess.run(
            ["git", "-C", str(head), "archive", "--format=tar", commit],
            stdout=tar,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
        if proc.returncode != 0:
            first = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[0]
            raise HeadBaseError(f"--head {head}: git archive {commit}: {first}")
        tar.seek(0)
        with tarfile.open(fileobj=tar) as archive:
            archive.extractall(dest, filter="data")
    return commit


def derive(
    matrix: Matrix, runtime: Runtime, head: Path, base_tree: Path, modules: dict[str, Found]
) -> dict:
    """The matrix's own document with only the arms head and base and the modules found in head."""
    raw = yaml.safe_load(matrix.path.read_text(encoding="utf-8"))
    extend(raw, matrix, runtime, modules)  # a derived runtime, modules found at other paths
    raw["arms"] = {
        HEAD: {"runtime": runtime.id, "path": str(head), "role": HEAD, "baseline": BASE},
        BASE: {"runtime": runtime.id, "path": str(base_tree), "role": BASE},
    }
    kept = {}
    for mid, found in modules.items():
        entry = {k: v for k, v in raw["modules"][mid].items() if k not in ("arms", "overrides")}
        in_base = (base_tree / Path(*found.import_path.split("."))).with_suffix(".py").is_file()
        kept[mid] = {
            **entry,
            "attention": found.attention,
            "arms": [HEAD, BASE] if in_base else [HEAD],
        }
    raw["modules"] = kept
    raw["checkpoints"] = {
        k: v for k, v in (raw.get("checkpoints") or {}).items() if v.get("module") in kept
    }
    if not raw["checkpoints"]:
        raw.pop("checkpoints")
    for suite in (raw.get("suites") or {}).values():
        if isinstance(suite, dict) and suite.get("modules") is not None:
            suite["modules"] = [m for m in suite["modules"] if m in kept]
    return raw


def prepare(matrix_path: Path, head: Path, base: str | None, out: Path) -> HeadBase:
    """Write OUT/headbase/matrix.yaml (and base's tree) for a run of head against its merge base."""
    head = head.resolve()
    if not head.is_dir():
        raise HeadBaseError(f"--head {head}: no such directory")
    matrix = load(matrix_path)
    runtime = runtime_of(matrix, head)
    modules = known_modules(matrix, runtime, head)
    ref = base or default_base(head)
    where = (out / "headbase").resolve()
    base_tree = where / "base"
    if base_tree.exists():
        shutil.rmtree(base_tree)
    commit = export_base(head, ref, base_tree)
    doc = derive(matrix, runtime, head, base_tree, modules)
    target = where / "matrix.yaml"
    target.write_text(
        f"# written by mlagate run --head {head} --base {ref} (merge base {commit})\n"
        + yaml.safe_dump(doc, sort_keys=False)
    )
    return HeadBase(target, tuple(sorted(modules)), runtime.id, commit)
