"""The MLX backends mlagate knows, one record each: the one place a backend is added.

A new record here is a new backend everywhere: the matrix accepts it (a runner's `backend`,
`backend_limits`, expectations) and then refuses to load until every per-backend setting
(`Keyed("backend", ...)` in a suite's contract: budgets, floors, margins) names it; plans
expand for it; the CLI offers it to --backend; a worker reports it; `mlagate health` checks
it. Standard library only: the worker imports it (.importlinter).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class Backend:
    name: str
    device: str  # the MLX device type its worker computes on: "cpu" or "gpu"
    probe: str | None  # the mlx.core module whose is_available() says MLX runs this backend;
    # None: this device's backend when no other backend's probe says so
    platforms: tuple[str, ...]  # the sys.platform values it runs on
    only_on: str  # what `mlagate health` says on another platform
    health: Mapping[str, tuple[str, ...]]  # per platform, its checks (machine.health.BACKEND)
    default_on: tuple[str, ...] = ()  # platforms where a bare run uses it, whatever
    # $MLAGATE_BACKEND says


REGISTRY: Mapping[str, Backend] = MappingProxyType(
    {
        b.name: b
        for b in (
            Backend(
                "cpu",
                device="cpu",
                probe=None,
                platforms=("darwin", "linux"),
                only_on="MLX's CPU backend runs on macOS and Linux",
                health=MappingProxyType({"linux": ("blas",)}),
            ),
            Backend(
                "metal",
                device="gpu",
                probe="metal",
                platforms=("darwin",),
                only_on="Metal runs only on macOS",
                health=MappingProxyType({"darwin": ("metal",)}),
                default_on=("darwin",),
            ),
            Backend(
                "cuda",
                device="gpu",
                probe=None,
                platforms=("linux",),
                only_on="MLX's CUDA backend runs only on Linux",
                health=MappingProxyType({"linux": ("cuda",)}),
            ),
        )
    }
)
FALLBACK = "cpu"  # the backend of a bare run where no record is the default and none is asked


def names() -> tuple[str, ...]:
    """Every backend, in the registry's order (read at each call: a test may add one)."""
    return tuple(REGISTRY)


def default_backend() -> str:
    """The platform's own backend (metal on macOS), else $MLAGATE_BACKEND, else cpu."""
    for b in REGISTRY.values():
        if sys.platform in b.default_on:
            return b.name
    asked = os.environ.get("MLAGATE_BACKEND", FALLBACK)
    return asked if asked in REGISTRY else FALLBACK


def running(mx) -> str:
    """The backend a worker's MLX (mlx.core, passed in) computes on: its default device's type,
    then the backend of that type whose probe says it is available."""
    kind = "gpu" if mx.default_device().type == mx.gpu else "cpu"
    of_kind = [b for b in REGISTRY.values() if b.device == kind]
    for b in of_kind:
        probe = getattr(mx, b.probe, None) if b.probe else None
        if probe is not None and probe.is_available():
            return b.name
    return next((b.name for b in of_kind if b.probe is None), kind)
