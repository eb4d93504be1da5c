"""Where the matrix and the files shipped with mlagate are."""

from __future__ import annotations

from pathlib import Path


def default_path() -> Path:
    """The matrix a bare command uses: ./matrix.yaml, else the one shipped with mlagate."""
    local = Path("matrix.yaml")
    if local.is_file():
        return local
    return bundled("matrix.yaml")


def bundled(name: str) -> Path:
    """A file shipped with mlagate: the source checkout's copy, else the wheel's."""
    here = Path(__file__).resolve().parents[1]  # the mlagate package
    for candidate in (here.parents[1] / name, here / "_bundled" / name):
        if candidate.exists():
            return candidate
    return here.parents[1] / name
