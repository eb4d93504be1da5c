"""Which runner a run is for, and the MLX backend that runner declares (mlagate.backends).

A case records its runner's declared backend; the worker checks it against the backend MLX
reports there (mlagate.harness: a mismatch makes the case invalid), so budgets chosen by the
backend are never another backend's.
"""

from __future__ import annotations

import os

from mlagate.backends import default_backend
from mlagate.matrix import Matrix


class BackendError(ValueError):
    """A runner and --backend that disagree; one line."""


def default_runner(matrix: Matrix, backend: str) -> str:
    """The first runner of the matrix that declares this backend (else the first runner)."""
    for label, runner in matrix.runners.items():
        if runner.backend == backend:
            return label
    return next(iter(matrix.runners))


def chosen(matrix: Matrix, runner: str | None, backend: str | None) -> tuple[str, str]:
    """(runner, backend) from the command line's --runner (else $MLAGATE_RUNNER) and --backend:
    an unknown runner label is refused, then as resolve."""
    asked = runner or os.environ.get("MLAGATE_RUNNER")
    if asked and asked not in matrix.runners:
        raise BackendError(
            f"--runner: unknown runner label {asked!r} (matrix has {', '.join(matrix.runners)})"
        )
    return resolve(matrix, asked, backend)


def resolve(matrix: Matrix, runner: str | None, backend: str | None) -> tuple[str, str]:
    """(runner, backend) of a run: the runner's declared backend wins; --backend must agree."""
    runner = (
        runner
        or os.environ.get("MLAGATE_RUNNER")
        or default_runner(matrix, backend or default_backend())
    )
    declared = matrix.runners[runner].backend if runner in matrix.runners else None
    if declared and backend and backend != declared:
        raise BackendError(
            f"--backend {backend}: runner {runner} declares backend {declared} in {matrix.path}"
        )
    return runner, declared or backend or default_backend()
