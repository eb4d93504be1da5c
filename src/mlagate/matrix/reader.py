"""Strict reading of matrix.yaml's nodes: the Reader every section reader uses, which raises a
MatrixError naming the file, the line and the key."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from mlagate import yamlread
from mlagate.matrix.model import MatrixError

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]*$")  # the ids of a table's entries

Node = yamlread.Node


def compose(text: str, file: str) -> Node:
    """The document's nodes, read by mlagate.yamlread (no aliases, core tags only, bounded
    depth)."""
    try:
        return yamlread.compose(text)
    except yamlread.ReadError as exc:
        raise MatrixError(file, exc.line, exc.key, exc.message) from None


class Reader:
    """Checks on the nodes of one file; every failure is a MatrixError naming that file."""

    def __init__(self, file: str):
        self.file = file

    def fail(self, node: Node | None, key: str, message: str) -> MatrixError:
        return MatrixError(self.file, node.line if node else None, key, message)

    def mapping(
        self, node: Node, key: str, allowed: set[str], required: set[str]
    ) -> dict[str, Node]:
        if not isinstance(node.value, dict):
            raise self.fail(node, key, f"expected a mapping, got {_kind(node.value)}")
        for k, v in node.value.items():
            if k not in allowed:
                raise self.fail(
                    v, f"{key}.{k}", f"unknown key (allowed: {', '.join(sorted(allowed))})"
                )
        for k in sorted(required - set(node.value)):
            raise self.fail(node, f"{key}.{k}", "required key is missing")
        return node.value

    def table(self, node: Node, key: str) -> dict[str, Node]:
        if not isinstance(node.value, dict):
            raise self.fail(node, key, f"expected a mapping of ids, got {_kind(node.value)}")
        for k, v in node.value.items():
            if not isinstance(k, str) or not _ID.match(k):
                raise self.fail(v, f"{key}.{k}", "ids use letters, digits, '.', '_', '-' and '/'")
        return node.value

    def scalar(
        self,
        node: Node,
        key: str,
        kind: type | tuple[type, ...],
        check: Callable[[Any], bool] | None = None,
        what: str = "",
    ) -> Any:
        value = node.value
        ok = isinstance(value, kind) and not (
            isinstance(value, bool) and kind in (int, float, (int, float))
        )
        if not ok or (check is not None and not check(value)):
            want = what or (
                kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            )
            raise self.fail(node, key, f"expected {want}, got {yamlread.show(value)}")
        return value

    def opt(self, m: dict[str, Node], name: str, key: str, kind, default=None, **kw) -> Any:
        node = m.get(name)
        if node is None or node.value is None:
            return default
        return self.scalar(node, f"{key}.{name}", kind, **kw)

    def req(self, m: dict[str, Node], name: str, key: str, kind, **kw) -> Any:
        return self.scalar(m[name], f"{key}.{name}", kind, **kw)

    def str_list(self, node: Node | None, key: str) -> tuple[str, ...]:
        if node is None or node.value is None:
            return ()
        if not isinstance(node.value, list):
            raise self.fail(node, key, f"expected a list, got {_kind(node.value)}")
        return tuple(self.scalar(v, f"{key}[{i}]", str) for i, v in enumerate(node.value))

    def id_list(self, node: Node, key: str, table: Mapping[str, Any], what: str) -> tuple[str, ...]:
        """A list of ids, each of which must name an entry of table."""
        ids = self.str_list(node, key)
        for i, name in enumerate(ids):
            if name not in table:
                raise self.fail(node.value[i], f"{key}[{i}]", f"unknown {what} {name!r}")
        return ids

    def int_list(self, node: Node, key: str) -> tuple[int, ...]:
        if not isinstance(node.value, list) or not node.value:
            raise self.fail(node, key, "expected a non-empty list of integers")
        return tuple(
            self.scalar(v, f"{key}[{i}]", int, lambda x: x >= 0, "a non-negative integer")
            for i, v in enumerate(node.value)
        )

    def plain(self, node: Node) -> Any:
        if isinstance(node.value, dict):
            return MappingProxyType({k: self.plain(v) for k, v in node.value.items()})
        if isinstance(node.value, list):
            return tuple(self.plain(v) for v in node.value)
        return node.value


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", type(None): "nothing"}.get(
        type(value), type(value).__name__
    )


# keyword arguments of Reader.req and Reader.opt for integer fields
POSITIVE = dict(check=lambda x: x > 0, what="a positive integer")
NON_NEGATIVE = dict(check=lambda x: x >= 0, what="a non-negative integer")
