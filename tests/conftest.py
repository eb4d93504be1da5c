import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
FAKE_MATRIX = FIXTURES / "fake-matrix.yaml"

pytest_plugins = ["pytester"]


@pytest.fixture(scope="session", autouse=True)
def pack_key(tmp_path_factory) -> Path:
    """The key packs are signed and checked with (MLAGATE_PACK_KEY), for every test and the
    commands they start; a test of a missing or other key sets its own."""
    path = tmp_path_factory.mktemp("packkey") / "pack.key"
    path.write_bytes(os.urandom(32).hex().encode())
    os.environ["MLAGATE_PACK_KEY"] = str(path)
    return path


@pytest.fixture(scope="session")
def real_cache() -> Path:
    """The arm cache for the real arms: shared across tests and runs (installing them takes a
    minute)."""
    path = Path(os.environ.get("MLAGATE_CACHE") or Path.home() / ".cache" / "mlagate")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def fake_cache(tmp_path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def fake_matrix(tmp_path) -> Path:
    """A private copy of the fake matrix and its runtime tree, free to edit."""
    shutil.copytree(FIXTURES / "fakemla-tree", tmp_path / "fakemla-tree")
    target = tmp_path / "matrix.yaml"
    shutil.copy(FAKE_MATRIX, target)
    return target


CPU_BUDGETS = (
    "          cpu: {absorbed_factor: 4, growth_factor: 4, floor_ulps: 4, max_ulps: 512}  # cpu"
)


def uncalibrated_correctness(tmp_path) -> Path:
    """A copy of the fake correctness matrix (and its runtime tree) whose cpu equivalence
    budgets are uncalibrated."""
    text = (FIXTURES / "fake-correctness.yaml").read_text()
    assert text.count(CPU_BUDGETS) == 2
    text = text.replace(
        CPU_BUDGETS,
        "          cpu: {absorbed_factor: 4, growth_factor: 4, floor_ulps: uncalibrated, "
        "max_ulps: uncalibrated}",
    )
    matrix = tmp_path / "m" / "fake-correctness.yaml"
    shutil.copytree(FIXTURES, matrix.parent, symlinks=True)
    matrix.write_text(text)
    return matrix


INSTALL_LINE = re.compile(r"^mlagate: install(ing|ed) arm .*\n", re.MULTILINE)


def cli(*args, cwd=None, cache=None, timeout=900):
    """mlagate as a subprocess. An arm install says so on stderr (at a terminal or in a CI log):
    those lines are kept in `install_lines` and taken out of stderr, so that what a test reads
    there is what the command said of its input."""
    env = {**os.environ}
    if cache is not None:
        env["MLAGATE_CACHE"] = str(cache)
    proc = subprocess.run(
        [sys.executable, "-m", "mlagate", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )
    proc.install_lines = [m.group(0) for m in INSTALL_LINE.finditer(proc.stderr or "")]
    proc.stderr = INSTALL_LINE.sub("", proc.stderr or "")
    return proc


@pytest.fixture
def run_cli():
    return cli
