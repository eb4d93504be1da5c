"""The tree shows the three processes: import-linter (.importlinter, run by `tox -e lint`) keeps
the worker package free of the rest of mlagate and third-party packages (an allow-list:
the standard library, MLX, mlagate.worker and the guard model), the guard model on the standard
library, and sibling modules free of import cycles. Planting an import outside the allow-list
breaks the contract, whether the imported module is old or new."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT

LINT = Path(sys.executable).with_name("lint-imports")


def _lint(src: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(ROOT)])}  # ROOT: tools/
    return subprocess.run(
        [str(LINT), "--config", str(ROOT / ".importlinter"), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=src,
        env=env,
        timeout=300,
    )


def test_the_architecture_contracts_hold():
    proc = _lint(ROOT / "src")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    contracts = (ROOT / ".importlinter").read_text().count("[importlinter:contract:")
    assert f"Contracts: {contracts} kept, 0 broken." in proc.stdout


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(
        ROOT / "src" / "mlagate", tmp_path / "mlagate", ignore=shutil.ignore_patterns("__pycache__")
    )
    return tmp_path / "mlagate"


def _plant(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n{line}  # planted\n")


def test_a_forbidden_import_in_the_worker_package_breaks_the_contract(tmp_path):
    pkg = _copy(tmp_path)
    _plant(pkg / "worker" / "probes.py", "from mlagate import matrix")
    (pkg / "newmodule.py").write_text("X = 1\n")  # listed nowhere: still refused
    _plant(pkg / "worker" / "building.py", "from mlagate import newmodule")
    _plant(pkg / "worker" / "tracing.py", "import yaml")
    proc = _lint(tmp_path)
    assert proc.returncode != 0
    for link in (
        "mlagate.worker.probes -> mlagate.matrix",
        "mlagate.worker.building -> mlagate.newmodule",
        "mlagate.worker.tracing -> yaml",
    ):
        assert link in proc.stdout, proc.stdout[-3000:]


def test_the_guard_model_and_the_backend_registry_import_only_the_standard_library(tmp_path):
    pkg = _copy(tmp_path)
    _plant(pkg / "guardmodel.py", "import mlx.core")
    _plant(pkg / "backends.py", "from mlagate import matrix")
    proc = _lint(tmp_path)
    assert proc.returncode != 0
    for link in ("mlagate.guardmodel -> mlx", "mlagate.backends -> mlagate.matrix"):
        assert link in proc.stdout, proc.stdout[-3000:]


def test_a_bisection_that_imports_the_harness_breaks_its_contract(tmp_path):
    pkg = _copy(tmp_path)
    _plant(pkg / "bisect" / "search.py", "from mlagate.harness import timing")
    proc = _lint(tmp_path)
    assert proc.returncode != 0
    assert "mlagate.bisect.search -> mlagate.harness" in proc.stdout, proc.stdout[-3000:]


SIZES = ROOT / "tools" / "sizes.py"
CODE = ("src", "suites", "benchmarks", "tools")


def _sizes(*paths) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(SIZES), *map(str, paths)]
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_every_module_and_function_is_within_the_size_limits():
    proc = _sizes(*CODE)
    assert proc.returncode == 0, proc.stdout


def test_the_size_limits_catch_a_long_function_and_a_long_module(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    (tmp_path / "long_function.py").write_text(f"def f():\n{body}\n")
    (tmp_path / "long_module.py").write_text("x = 1\n" * 401)
    (tmp_path / "fine.py").write_text("def g():\n" + "\n".join(body.splitlines()[:79]) + "\n")
    proc = _sizes(tmp_path)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        f"{tmp_path / 'long_function.py'}:1: function f of 81 lines (at most 80)",
        f"{tmp_path / 'long_module.py'}:1: module of 401 lines (at most 400)",
    ]
    assert _sizes(tmp_path / "missing").returncode == 2
