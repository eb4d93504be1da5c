"""Reading a YAML configuration file that may be hostile or broken, into nodes with line numbers.

The file is read as bytes (regular files only, at most MAX_BYTES), decoded as UTF-8 and parsed
by PyYAML's safe loader after a pass over its events that refuses aliases (no alias bombs,
no recursive structures), tags other than the core ones, and nesting deeper than MAX_DEPTH.
Scalars are built here: integers within +-2**53, finite floats, no dates. Every problem is a
ReadError with a line, a key path and a message that never holds an internal repr.
"""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path
from typing import Any

import yaml

MAX_BYTES = 1 << 20
MAX_DEPTH = 32
MAX_NODES = 100_000
MAX_INT = 1 << 53
_CORE = "tag:yaml.org,2002:"
LOADER = getattr(
    yaml, "CSafeLoader", yaml.SafeLoader
)  # libyaml when present: 20x faster, same events
TAGS = {f"{_CORE}{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq")}


class ReadError(ValueError):
    def __init__(self, line: int | None, key: str, message: str):
        self.line, self.key, self.message = line, key, message
        super().__init__(f"{line}: {key}: {message}")


class Node:
    """A YAML value with the line it came from."""

    __slots__ = ("value", "line")

    def __init__(self, value: Any, line: int):
        self.value, self.line = value, line


def show(value: Any, width: int = 60) -> str:
    """A value for an error message: scalars as repr (cut to width), containers by kind."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def read_text(path: Path, max_bytes: int = MAX_BYTES) -> str:
    """The file's text; ReadError for anything but a readable UTF-8 regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError) as exc:
        raise ReadError(
            None, "<file>", f"cannot read: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ReadError(None, "<file>", "not a regular file")
    with os.fdopen(fd, "rb") as fh:
        try:
            data = fh.read(max_bytes + 1)
        except OSError as exc:
            raise ReadError(None, "<file>", f"cannot read: {exc.strerror}") from None
    if len(data) > max_bytes:
        raise ReadError(None, "<file>", f"larger than {max_bytes} bytes")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ReadError(line, "<file>", f"not UTF-8 text (byte 0x{data[exc.start]:02x})") from None


def compose(text: str) -> Node:
    """The document's root node; ReadError for invalid YAML or anything this reader refuses."""
    try:
        _check_events(text)
        root = yaml.compose(text, Loader=LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ReadError(line, "<yaml>", f"not valid YAML: {problem}") from None
    if root is None:
        raise ReadError(1, "<root>", "the file is empty")
    return _Converter().convert(root, "<root>")


def _check_events(text: str) -> None:
    depth = nodes = 0
    for ev in yaml.parse(text, Loader=LOADER):
        line = ev.start_mark.line + 1 if ev.start_mark else None
        if isinstance(ev, yaml.AliasEvent):
            raise ReadError(line, "<yaml>", "aliases (*name) are not allowed; write the value out")
        if isinstance(ev, yaml.NodeEvent):
            nodes += 1
            tag = getattr(ev, "tag", None)
            if tag is not None and tag not in TAGS:
                raise ReadError(
                    line, "<yaml>", f"tag {show(tag)} is not allowed (only plain values)"
                )
            if nodes > MAX_NODES:
                raise ReadError(line, "<yaml>", f"more than {MAX_NODES} values")
        if isinstance(ev, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise ReadError(line, "<yaml>", f"nested deeper than {MAX_DEPTH} levels")
        elif isinstance(ev, yaml.CollectionEndEvent):
            depth -= 1


class _Converter:
    def __init__(self):
        self.constructor = yaml.SafeLoader("")

    def convert(self, node: yaml.Node, path: str) -> Node:
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Node] = {}
            for knode, vnode in node.value:
                kline = knode.start_mark.line + 1
                if not isinstance(knode, yaml.ScalarNode):
                    raise ReadError(kline, f"{path}.<key>", "keys must be scalars")
                key = knode.value
                if key in out:
                    raise ReadError(kline, key[:80], "duplicate key")
                child = self.convert(vnode, f"{path}.{key}" if path != "<root>" else key)
                child.line = kline
                out[key] = child
            return Node(out, line)
        if isinstance(node, yaml.SequenceNode):
            return Node([self.convert(v, f"{path}[{i}]") for i, v in enumerate(node.value)], line)
        return Node(self.scalar(node, path), line)

    def scalar(self, node: yaml.ScalarNode, path: str) -> Any:
        line = node.start_mark.line + 1
        kind = node.tag.rsplit(":", 1)[-1]
        if node.tag not in TAGS:
            what = "dates" if kind == "timestamp" else f"values of type {show(kind)}"
            raise ReadError(
                line, path, f"{what} are not allowed here; quote the value to make it text"
            )
        try:
            value = self.constructor.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError):
            raise ReadError(line, path, f"{show(node.value)} is not a valid {kind}") from None
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise ReadError(
                line, path, f"integer out of range (at most 2**53 in size), got {show(node.value)}"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise ReadError(line, path, f"expected a finite number, got {show(node.value)}")
        return value
