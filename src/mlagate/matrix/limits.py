"""`backend_limits:` of matrix.yaml: what an MLX backend cannot run (an operation at a dtype),
stated once for every arm, head and vendored tree. A module says which of the limited operations its
tiny model runs (`modules.<id>.ops`); mlagate.verdict.expectations skips the cases that need one on
the backend that lacks it."""

from __future__ import annotations

import re
from collections.abc import Mapping

from mlagate import backends
from mlagate.matrix.model import DTYPES, BackendLimit, Module
from mlagate.matrix.reader import Node, Reader

_KEYS = {"backend", "dtype", "op", "reason", "link"}


def read_backend_limits(
    r: Reader, node: Node | None, modules: Mapping[str, Module], module_nodes: Node
) -> tuple[BackendLimit, ...]:
    """`backend_limits: [{backend, dtype, op, reason, link?}]`; every op a module names must be
    one a limit names (a misspelt op would silently skip nothing)."""
    limits: list[BackendLimit] = []
    if node is not None and node.value is not None:
        if not isinstance(node.value, list):
            raise r.fail(node, "backend_limits", "expected a list")
        for i, item in enumerate(node.value):
            key = f"backend_limits[{i}]"
            m = r.mapping(item, key, _KEYS, _KEYS - {"link"})
            limit = BackendLimit(
                r.req(m, "backend", key, str, check=lambda x: x in backends.names(),
                      what=" or ".join(backends.names())),
                r.req(m, "dtype", key, str, check=lambda x: x in DTYPES, what=" or ".join(DTYPES)),
                r.req(m, "op", key, str, check=lambda x: re.fullmatch(r"[a-z_][a-z0-9_]*", x)
                      is not None, what="an MLX operation name"),
                r.req(m, "reason", key, str, check=lambda x: bool(x.strip()), what="a reason"),
                r.opt(m, "link", key, str, default=""),
            )  # fmt: skip
            if any((x.backend, x.dtype, x.op) == (limit.backend, limit.dtype, limit.op)
                   for x in limits):  # fmt: skip
                raise r.fail(item, key, "duplicate limit (same backend, dtype and op)")
            limits.append(limit)
    named = {x.op for x in limits}
    tables = r.table(module_nodes, "modules")
    for mid, module in modules.items():
        for i, op in enumerate(module.ops):
            if op not in named:
                raise r.fail(
                    tables[mid].value["ops"].value[i],
                    f"modules.{mid}.ops[{i}]",
                    f"no backend_limits entry names op {op!r} (named: "
                    f"{', '.join(sorted(named)) or 'none'})",
                )
    return tuple(limits)


def limit_for(
    limits: tuple[BackendLimit, ...], module: Module, backend: str, dtypes: set[str]
) -> BackendLimit | None:
    """The first limit that a case of module on backend running dtypes meets, else None."""
    for x in limits:
        if x.backend == backend and x.dtype in dtypes and x.op in module.ops:
            return x
    return None
