"""Which BLAS a worker's MLX computes with (stdlib only; chosen by the parent).

MLX's Linux CPU wheel ships a reference BLAS: a float32 1024x512x2048 matmul takes about 20x
longer with it than with OpenBLAS (docs/performance.md). Where the machine has OpenBLAS, the
worker preloads it (LD_PRELOAD) with one thread, so a step still runs on the one CPU a serial
run pins its workers to. The choice is `MLAGATE_BLAS`:

- `auto` (default): OpenBLAS where this machine has it, else MLX's own; never on macOS
  (Accelerate) and never over an LD_PRELOAD that already names a BLAS;
- `reference`: MLX's own, whatever the machine has;
- a path to a shared library: that one (it must exist).

The library mapped into the worker is in its fingerprint (`blas`), and two workers whose
fingerprints differ are never compared, so timings of one BLAS never mix with another's.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

BLAS_ENV = "MLAGATE_BLAS"
THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
# Debian/Ubuntu (libopenblas0-pthread), then Fedora/RHEL, Arch and Alpine
_LIBDIRS = ("/usr/lib/{triple}/openblas-pthread", "/usr/lib/{triple}", "/usr/lib64", "/usr/lib")
_NAMES = ("libopenblas.so.0", "libopenblasp.so.0", "libopenblas.so")


class BlasChoiceError(ValueError):
    """MLAGATE_BLAS names nothing usable (bad input: the parent refuses to start)."""


def _triples() -> list[str]:
    machine = os.uname().machine if hasattr(os, "uname") else ""
    return [f"{machine}-linux-gnu", f"{machine}-linux-musl"]


def find_openblas() -> str | None:
    """This machine's OpenBLAS shared library, or None."""
    for pattern in _LIBDIRS:
        for triple in _triples() if "{triple}" in pattern else [""]:
            folder = Path(pattern.format(triple=triple))
            for name in _NAMES:
                if (folder / name).is_file():
                    return str(folder / name)
    return None


def _names_blas(preload: str) -> bool:
    return any(k in Path(p).name.lower() for p in preload.split() for k in ("blas", "mkl", "blis"))


def chosen_library(env: dict[str, str], platform: str = sys.platform) -> str | None:
    """The library to preload into a worker started with env, or None for none. Raises
    BlasChoiceError naming MLAGATE_BLAS when it is neither auto, reference nor a file."""
    choice = env.get(BLAS_ENV, "auto").strip() or "auto"
    if choice == "reference":
        return None
    if choice != "auto":
        if not Path(choice).is_file():
            raise BlasChoiceError(
                f"{BLAS_ENV}={choice}: not auto, reference or an existing shared library"
            )
        return choice
    if platform != "linux" or _names_blas(env.get("LD_PRELOAD", "")):
        return None
    return find_openblas()


def worker_env(env: dict[str, str], platform: str = sys.platform) -> dict[str, str]:
    """env with the chosen BLAS preloaded, on one thread (threads already set are kept)."""
    lib = chosen_library(env, platform)
    if lib is None:
        return dict(env)
    out = dict(env)
    out["LD_PRELOAD"] = " ".join(p for p in (lib, env.get("LD_PRELOAD", "")) if p)
    for name in THREADS:
        out.setdefault(name, "1")
    return out
