"""The validated matrix as plain JSON and back: the hand-off carries it to the pytest process."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from mlagate.matrix.model import Matrix


def thaw(value: Any) -> Any:
    """A frozen config value as plain JSON-ready dicts and lists."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


def to_json(value: Any) -> Any:
    """A validated matrix (or any part of it) as plain JSON: dataclasses as dicts, paths as
    strings."""
    if dataclasses.is_dataclass(value):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [to_json(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def freeze(value: Any) -> Any:
    """Plain JSON frozen as the matrix holds it (mappings read-only, lists as tuples)."""
    if isinstance(value, dict):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


def _revive(value: Any, hint: Any) -> Any:
    import typing

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if value is None:
        return None
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return hint(
            **{
                f.name: _revive(value[f.name], hints[f.name])
                for f in dataclasses.fields(hint)
                if f.name in value
            }
        )
    if origin in (Mapping, dict) or hint is Mapping:
        inner = args[1] if len(args) == 2 else Any
        return MappingProxyType({k: _revive(v, inner) for k, v in value.items()})
    if origin is tuple:
        return tuple(_revive(v, args[0]) for v in value)
    if args and type(None) in args:  # X | None
        return _revive(value, next(a for a in args if a is not type(None)))
    if hint is Path:
        return Path(value)
    if hint is Any:
        return freeze(value)
    return value


def from_json(data: dict) -> Matrix:
    """The matrix that to_json wrote, frozen again (no YAML, no validation: it was validated
    once)."""
    return _revive(data, Matrix)
