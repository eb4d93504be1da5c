"""Where the matrix and the files shipped with mlagate are."""

from __future__ import annotations

from pathlib import Path


def default_path() -> Path:
    """The matrix a bare command uses: ./matrix.yaml, else the one shipped with mlagate."""
    local = Path("matrix.yaml")
    if local.is_file():
        return local
    return bundled("matrix.yaml")


def shipped_suite(kind: str, suite: str) -> Path:
    """Where a shipped suite's test body is: suites/<kind>/test_<suite>.py (a suite with `file:`
    lies beside the matrix instead: mlagate.matrix.runs)."""
    return bundled("suites") / kind / f"test_{suite}.py"


def bundled(name: str) -> Path:
    """A file shipped with mlagate: the source checkout's copy, else the wheel's."""
    here = Path(__file__).resolve().parent  # the mlagate package
    for candidate in (here.parents[1] / name, here / "_bundled" / name):
        if candidate.exists():
            return candidate
    return here.parents[1] / name
