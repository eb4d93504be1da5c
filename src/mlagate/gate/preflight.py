"""Checks in the parent before any worker starts: can MLX run here at all, with the BLAS the
workers will preload (mlagate.worker.blas)?"""

from __future__ import annotations

import os
import subprocess
import sys

from mlagate.worker import blas

# Importing MLX and evaluating on the CPU: what an install without a backend library fails.
# A declared GPU backend the worker does not run is the cases' business (invalid, per case).
PROBE = "import mlx.core as mx; mx.eval(mx.add(mx.array([1.0]), 1, stream=mx.cpu))"


class PreflightError(ValueError):
    """This machine cannot run the workers; one line saying what to install."""


def remedy() -> str:
    if sys.platform == "darwin":
        return "install mlx (pip install mlx)"
    return (
        "install mlagate with the cpu extra (pip install 'mlagate[cpu]'), "
        "which brings MLX's CPU backend"
    )


def check(python: str | None = None, timeout: float = 120) -> None:
    """Import MLX and evaluate one array in a fresh interpreter, as a worker will (its BLAS
    preloaded: a library that cannot load fails here, not in every case)."""
    cmd = [python or sys.executable, "-c", PROBE]
    try:
        env = blas.worker_env({**os.environ, "PYTHONUNBUFFERED": "1"})
    except blas.BlasChoiceError as exc:
        raise PreflightError(str(exc)) from None
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise PreflightError(f"MLX did not answer within {timeout:.0f} s; {remedy()}") from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        last = lines[-1] if lines else f"exit {proc.returncode}"
        raise PreflightError(f"MLX cannot run here ({last}); {remedy()}")
