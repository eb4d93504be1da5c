"""A case's key: the sha256 of everything its verdict depends on, so a result measured once can
stand for every later case with the same key (mlagate.store).

What enters (each part a digest, kept by name in `Key.parts`, so a store entry's key re-derives):

- `runtime`: the files of the arm's install that the case runs, by content: the module's file
  and, transitively, the arm's own modules it imports (read with `ast`,
  mlagate.scan.modelargs.Source, never imported), with the runtime modules the worker imports
  by name (`models.cache`, `speculative.cache_state`, `utils`, `generate`, `processors`) and
  the arm's activation module; `baseline_runtime` likewise for an arm with a baseline.
- `arm`: its patches, overlaid files, activation (module, function, env, installs) and needs
  (mlagate.arm.armidentity.reuse_data).
- `suite`: the test body and its contract; `harness`: the mlagate code the suite runs
  through (the harness, the worker and every mlagate module they import), by content.
- `matrix`: the case's resolved entry (suite gates, module config for the arm, geometry,
  checkpoint, profile, dtype, backend, evidence, A/A), without ids that only name things.
- `mlx`: MLX's version, the backend, the BLAS the worker will load (mlagate.worker.blas),
  Python's version.
- `machine_class` (performance suites only): the class of the machine (mlagate.machine.classes:
  chip or CPU, cores, GPU, memory, OS, MLX, backend, BLAS), so a timing is reused on every
  machine of its class and never on another class. No host name, machine id or runner label
  enters any key: a correctness result stands on every host whose other parts match.

Unrelated files of the arm do not enter. Only files are hashed and data serialised: nothing of
pytest, the worker or the harness is imported (`mlagate plan` counts reuse with this).
"""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import mlagate
from mlagate import hashing
from mlagate.arm.armidentity import reuse_data
from mlagate.arm.arms import ArmInstall
from mlagate.contract.suites import contract_path
from mlagate.machine import classes
from mlagate.machine.system import System
from mlagate.matrix import Matrix, to_json
from mlagate.modulefiles import module_file
from mlagate.plan import Case
from mlagate.scan.modelargs import Source
from mlagate.store.entries import combine, digest
from mlagate.worker.importers import runtime_root  # stdlib only: no MLX in the parent

# the runtime modules the worker imports by name, under a module's runtime package
# (mlagate.worker.stepping, rollback, speculation, importers.REAL_INITS)
WORKER_IMPORTS = ("models.cache", "speculative.cache_state", "utils", "generate", "processors")
PACKAGE = Path(mlagate.__file__).resolve().parent


def _stamp(path: Path) -> tuple:
    st = path.stat()
    return (str(path), st.st_ino, st.st_size, st.st_mtime_ns)


def file_sha(path: Path) -> str:
    return _sha(_stamp(path))


@functools.cache
def _sha(stamp: tuple) -> str:  # a file read once while it is unchanged
    return hashing.file_sha(stamp[0])


def _imports(path: Path) -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    return _read_imports(_stamp(path))


@functools.cache
def _read_imports(stamp: tuple) -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    return tuple(Source.read(Path(stamp[0])).modules)


def _dotted(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def closure(root: Path, starts: list[str], tops: set[str], inits: bool = False) -> dict[str, str]:
    """{path relative to root: sha256} of the modules named by starts and, transitively, every
    module under root they import whose top-level package is in tops (relative imports too).
    inits: with the __init__.py of each package on the way (Python runs them; the worker's
    LeanImporter leaves a runtime's bare, so not for an arm)."""
    todo = [p for p in (module_file(root, s) for s in starts) if p is not None]
    seen: dict[Path, str] = {}
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen[path] = file_sha(path)
        here = _dotted(root, path)
        package = here if path.name == "__init__.py" else here.rpartition(".")[0]
        for level, module, names in _imports(path):
            if level:
                up = package.split(".")[: len(package.split(".")) - (level - 1)]
                module = ".".join([*up, module] if module else up)
            if module.split(".")[0] not in tops:
                continue
            wanted = [module, *(f"{module}.{n}" for n in names if n != "*")]
            if inits:
                parts = module.split(".")
                wanted += [".".join(parts[:i]) for i in range(1, len(parts))]
            todo += [p for p in (module_file(root, d) for d in wanted) if p is not None]
    return {str(p.relative_to(root).as_posix()): sha for p, sha in sorted(seen.items())}


def _tops(site: Path) -> set[str]:
    return (
        {p.name for p in site.iterdir() if p.is_dir() or p.suffix == ".py"}
        if site.is_dir()
        else set()
    )


def runtime_files(inst: ArmInstall, import_path: str) -> dict[str, str]:
    """The files of an arm's install a case of this module runs, by content."""
    root = runtime_root(import_path, inst.runtime.package)
    starts = [import_path, *(f"{root}.{m}" for m in WORKER_IMPORTS)]
    tops = {p.removesuffix(".py") for p in _tops(inst.site)}
    files = closure(inst.site, starts, tops)
    act = inst.arm.activate
    if act is not None:  # its package's own init runs, and what it imports
        files |= closure(inst.site, [act.module], tops, inits=True)
    return files


def harness_files(package: Path = PACKAGE) -> dict[str, str]:
    """The mlagate code a suite runs through: the harness, the worker, and every mlagate module
    they import (their package inits included), by content."""
    starts = [
        _dotted(package.parent, p)
        for sub in ("harness", "worker")
        for p in sorted((package / sub).glob("*.py"))
    ]
    return closure(package.parent, starts, {"mlagate"}, inits=True)


def suite_files(matrix: Matrix, suite: str, package: Path = PACKAGE) -> dict[str, str]:
    """The suite's test body, its contract beside it, and the mlagate modules it imports."""
    path = matrix.suites[suite].file
    contract = contract_path(path)
    out = {
        "test": file_sha(path) if path.is_file() else "absent",
        "contract": file_sha(contract) if contract.is_file() else "absent",
    }
    starts = [m for lv, m, _ in _imports(path) if lv == 0 and m.split(".")[0] == "mlagate"]
    own = closure(package.parent, starts, {"mlagate"}, inits=True) if starts else {}
    return out | {f"imports/{k}": v for k, v in own.items()}


def case_entry(matrix: Matrix, case: Case) -> dict:
    """The case's resolved matrix entry, without the ids that only name things."""
    suite = to_json(matrix.suites[case.suite])
    for k in ("id", "path", "modules"):
        suite.pop(k, None)
    mod = matrix.modules[case.module]
    module = to_json(mod)
    for k in ("id", "arms", "overrides", "notes"):
        module.pop(k, None)
    module |= {"attention": mod.attention_for(case.arm), "config": mod.config_for(case.arm)}
    geometry = (
        to_json(matrix.geometries[case.geometry]) if case.geometry in matrix.geometries else None
    )
    checkpoint = to_json(matrix.checkpoints[case.checkpoint]) if case.checkpoint else None
    profile = to_json(matrix.profiles[case.profile])
    for part in (geometry, checkpoint, profile):
        (part or {}).pop("id", None)
    return {
        "suite": [case.suite, suite],
        "module": module,
        "runtime": to_json(matrix.runtimes[mod.runtime]) | {"id": None},
        "geometry": geometry,
        "checkpoint": checkpoint,
        "profile": profile,
        "case": {k: getattr(case, k) for k in ("dtype", "backend", "profile", "evidence", "aa")},
    }


def blas() -> dict:
    """The BLAS the worker will load: the LD_PRELOAD and thread counts the parent gives it
    (mlagate.worker.blas, stdlib only: OpenBLAS where present unless MLAGATE_BLAS says
    otherwise), each library by name and size."""
    from mlagate.worker import blas as chosen  # noqa: PLC0415  (only when hashing)

    try:
        env = chosen.worker_env(dict(os.environ))
    except chosen.BlasChoiceError:
        env = dict(os.environ)  # the run refuses to start its workers: nothing is reused
    preload = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if p]
    return {
        "ld_preload": [[os.path.basename(p), _size(Path(p))] for p in preload],
        "threads": {name: env.get(name) for name in chosen.THREADS},
        "choice": os.environ.get(chosen.BLAS_ENV),
    }


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def mlx_data(backend: str) -> dict:
    from importlib import metadata  # noqa: PLC0415  (its import costs 25 modules: only here)

    try:
        version = metadata.version("mlx")
    except metadata.PackageNotFoundError:
        version = None
    return {
        "mlx": version,
        "backend": backend,
        "blas": blas(),
        "python": platform.python_version(),
        "mlx_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("MLX_")},
    }


@dataclass(frozen=True)
class Key:
    digest: str
    parts: dict  # name: digest of that part (a store entry keeps them, to re-derive the key)


class Deriver:
    """Keys for the cases of one run (files read once, whatever the number of cases)."""

    def __init__(
        self,
        matrix: Matrix,
        installs: dict[str, ArmInstall],
        backend: str,
        machine_class: str | None = None,
        package: Path = PACKAGE,
    ):
        self.matrix, self.installs, self.package = matrix, installs, package
        self.mlx = digest(mlx_data(backend))
        self.harness = digest(harness_files(package))
        self.machine_class = machine_class or classes.of(System(), backend).id
        self._runtime: dict[tuple[str, str], str] = {}
        self._suite: dict[str, str] = {}

    def _runtime_of(self, arm: str, import_path: str) -> str:
        if (arm, import_path) not in self._runtime:
            inst = self.installs[arm]
            self._runtime[(arm, import_path)] = digest(
                {"files": runtime_files(inst, import_path), "arm": reuse_data(inst.arm)}
            )
        return self._runtime[(arm, import_path)]

    def _suite_of(self, suite: str) -> str:
        if suite not in self._suite:
            self._suite[suite] = digest(suite_files(self.matrix, suite, self.package))
        return self._suite[suite]

    def key(self, case: Case) -> Key:
        m = self.matrix
        import_path = m.modules[case.module].import_path
        parts = {
            "runtime": self._runtime_of(case.arm, import_path),
            "suite": self._suite_of(case.suite),
            "harness": self.harness,
            "matrix": digest(case_entry(m, case)),
            "mlx": self.mlx,
        }
        baseline = m.arms[case.arm].baseline
        if baseline and baseline in self.installs:
            parts["baseline_runtime"] = self._runtime_of(baseline, import_path)
        if m.suites[case.suite].kind == "performance":
            parts["machine_class"] = digest({"machine_class": self.machine_class})
        return Key(combine(parts), parts)
