"""Checks in the parent before any worker starts: can MLX run here on the chosen backend?"""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = """
import mlx.core as mx
backend = {backend!r}
if backend != "cpu":
    lib = getattr(mx, backend, None)
    if lib is None or not lib.is_available():
        raise SystemExit(f"MLX has no {{backend}} device here")
    mx.set_default_device(mx.gpu)
mx.eval(mx.array([1.0]) + 1)
"""


class PreflightError(ValueError):
    """This machine cannot run the workers; one line saying what to install."""


def remedy(backend: str) -> str:
    if backend == "metal":
        return "run on Apple Silicon with mlx installed, or give --backend cpu"
    if backend == "cuda":
        return "install mlx with its CUDA backend (pip install 'mlx[cuda]'), or give --backend cpu"
    if sys.platform == "darwin":
        return "install mlx (pip install mlx)"
    return (
        "install mlagate with the cpu extra (pip install 'mlagate[cpu]'), "
        "which brings MLX's CPU backend"
    )


def check(backend: str, python: str | None = None, timeout: float = 120) -> None:
    """Import MLX and evaluate one array in a fresh interpreter, as a worker will."""
    cmd = [python or sys.executable, "-c", PROBE.format(backend=backend)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise PreflightError(
            f"MLX ({backend}) did not answer within {timeout:.0f} s; {remedy(backend)}"
        ) from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        last = lines[-1] if lines else f"exit {proc.returncode}"
        raise PreflightError(
            f"MLX cannot run the {backend} backend here ({last}); {remedy(backend)}"
        )
