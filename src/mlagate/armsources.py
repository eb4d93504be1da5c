"""Where an arm's runtime comes from, one record per source kind: the one place a kind is added.

A record is the kind's key under `arms.<id>` in matrix.yaml, whether it takes a `ref`, whether
its spec is a local path (resolved beside the matrix, hashed by content in the cache key, and
copied when it is a bare package tree) and the requirement pip installs from it. The matrix
reader (mlagate.matrix.armread), the install (mlagate.arm.installing) and the arm's identity
(mlagate.arm.armidentity) read it. Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class SourceKind:
    key: str  # the arm's key in matrix.yaml: `pypi: mlx-lm==0.32.2`
    requirement: Callable[[str, str | None, str], str]  # (spec, ref, distribution) -> for pip
    takes_ref: bool = False  # needs a `ref`, and is the only kind that takes one
    local: bool = False  # a path beside the matrix, by content; a bare package tree is copied


KINDS: Mapping[str, SourceKind] = MappingProxyType(
    {
        k.key: k
        for k in (
            SourceKind("pypi", lambda spec, ref, dist: spec),
            SourceKind("git", lambda spec, ref, dist: f"{dist} @ git+{spec}@{ref}", takes_ref=True),
            SourceKind("path", lambda spec, ref, dist: spec, local=True),
        )
    }
)


def names() -> tuple[str, ...]:
    """Every source kind, in the registry's order (read at each call: a test may add one)."""
    return tuple(KINDS)
