"""Typed gate declarations: each suite declares its `gates` keys in its contract (`gates:` in
suites/<kind>/<suite>.suite.yaml, mlagate.contract.suites), and matrix.yaml's values are checked
against them when the matrix is read: an unknown key, a missing one, a wrong type or a value out of
bounds is a one-line `FILE:LINE: KEY: message`.

A declaration reads a YAML node (anything with `.value` and `.line`) through a `Check` context
that knows how to fail and which profiles and backends exist.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from mlagate.yamlread import show

MIN_DECIDING_SAMPLES = 9  # an interval that decides a verdict comes from at least this many samples


@dataclass(frozen=True)
class Check:
    """What a declaration needs from the matrix reader."""

    fail: Callable[[Any, str, str], Exception]  # (node, key, message) -> the error to raise
    profiles: tuple[str, ...]
    backends: tuple[str, ...]
    dtypes: tuple[str, ...]


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


UNCALIBRATED = "uncalibrated"  # a calibrated gate's value on a runner that has not measured it


@dataclass(frozen=True)
class Number:
    """A finite number within [low, high] (None: unbounded); integer=True for whole numbers;
    odd=True for sample counts whose median is a sample."""

    low: float | None = None
    high: float | None = None
    integer: bool = False
    odd: bool = False
    above: bool = False  # low is exclusive
    optional: bool = False
    calibrated: bool = False  # a runner's measured bound: UNCALIBRATED until mlagate calibrate

    def describe(self) -> str:
        what = "an odd integer" if self.odd else "an integer" if self.integer else "a number"
        lo = "" if self.low is None else f"{'>' if self.above else '>='} {self.low:g}"
        hi = (
            ""
            if self.high is None
            else f"<= {self.high:d}"
            if self.integer
            else f"<= {self.high:g}"
        )
        bounds = " and ".join(b for b in (lo, hi) if b)
        told = (
            f", or {UNCALIBRATED} (not measured yet: mlagate calibrate)" if self.calibrated else ""
        )
        return f"{what} {bounds}".strip() + told

    def read(self, node, key: str, ctx: Check) -> Any:
        v = node.value
        if self.calibrated and v == UNCALIBRATED:
            return v
        ok = (isinstance(v, int) and not isinstance(v, bool)) if self.integer else _is_number(v)
        ok = ok and (self.low is None or (v > self.low if self.above else v >= self.low))
        ok = ok and (self.high is None or v <= self.high) and (not self.odd or v % 2 == 1)
        if not ok:
            raise ctx.fail(node, key, f"expected {self.describe()}, got {show(v)}")
        return v


def Int(low: int | None = None, high: int | None = None, **kw) -> Number:  # noqa: N802  (a type's name)
    return Number(low, high, integer=True, **kw)


def Samples(optional: bool = False) -> Number:  # noqa: N802
    """A timed sample count that decides a verdict through an interval."""
    return Number(MIN_DECIDING_SAMPLES, 1001, integer=True, odd=True, optional=optional)


@dataclass(frozen=True)
class Choice:
    options: tuple[str, ...]
    optional: bool = False

    def describe(self) -> str:
        return "one of " + ", ".join(self.options)

    def read(self, node, key: str, ctx: Check) -> Any:
        if node.value not in self.options:
            raise ctx.fail(
                node, key, f"expected one of {', '.join(self.options)}, got {show(node.value)}"
            )
        return node.value


@dataclass(frozen=True)
class Dtype:
    optional: bool = False

    def describe(self) -> str:
        return "a dtype"

    def read(self, node, key: str, ctx: Check) -> Any:
        return Choice(ctx.dtypes).read(node, key, ctx)


@dataclass(frozen=True)
class Text:
    pattern: str | None = None  # a regular expression the whole string matches
    optional: bool = False

    def describe(self) -> str:
        return f"a string matching `{self.pattern}`" if self.pattern else "a string"

    def read(self, node, key: str, ctx: Check) -> Any:
        import re

        v = node.value
        if not isinstance(v, str) or (self.pattern and not re.fullmatch(self.pattern, v)):
            raise ctx.fail(
                node,
                key,
                f"expected a string{f' matching {self.pattern}' if self.pattern else ''}, got "
                f"{show(v)}",
            )
        return v


@dataclass(frozen=True)
class List:
    item: Any
    min_len: int = 1
    optional: bool = False

    def describe(self) -> str:
        return f"a list ({self.min_len} or more) of {self.item.describe()}"

    def read(self, node, key: str, ctx: Check) -> Any:
        if not isinstance(node.value, list) or len(node.value) < self.min_len:
            raise ctx.fail(
                node,
                key,
                f"expected a list of at least {self.min_len} "
                f"({self.item.describe() if hasattr(self.item, 'describe') else 'values'})",
            )
        return tuple(self.item.read(v, f"{key}[{i}]", ctx) for i, v in enumerate(node.value))


@dataclass(frozen=True)
class Record:
    """A mapping with exactly these keys (optional ones may be left out)."""

    fields: Mapping[str, Any]
    optional: bool = False

    def describe(self) -> str:
        return "{" + ", ".join(f"{k}: {v.describe()}" for k, v in self.fields.items()) + "}"

    def read(self, node, key: str, ctx: Check) -> Any:
        if not isinstance(node.value, dict):
            raise ctx.fail(node, key, f"expected a mapping with keys {', '.join(self.fields)}")
        for k, v in node.value.items():
            if k not in self.fields:
                raise ctx.fail(
                    v, f"{key}.{k}", f"unknown key (allowed: {', '.join(sorted(self.fields))})"
                )
        out = {}
        for k, spec in self.fields.items():
            child = node.value.get(k)
            if child is None or child.value is None:
                if getattr(spec, "optional", False):
                    continue
                raise ctx.fail(node, f"{key}.{k}", "required key is missing")
            out[k] = spec.read(child, f"{key}.{k}", ctx)
        return MappingProxyType(out)


@dataclass(frozen=True)
class Keyed:
    """A mapping with one entry per backend, profile or dtype (of, a declaration, for each)."""

    over: str  # "backend", "profile" or "dtype"
    of: Any
    optional: bool = False

    def describe(self) -> str:
        return f"per {self.over}: {self.of.describe()}"

    def read(self, node, key: str, ctx: Check) -> Any:
        names = {"backend": ctx.backends, "profile": ctx.profiles, "dtype": ctx.dtypes}[self.over]
        if not isinstance(node.value, dict):
            raise ctx.fail(
                node, key, f"expected a mapping with one entry per {self.over} ({', '.join(names)})"
            )
        for k, v in node.value.items():
            if k not in names:
                raise ctx.fail(
                    v, f"{key}.{k}", f"unknown {self.over} (allowed: {', '.join(names)})"
                )
        if self.over != "dtype":
            for k in names:
                if k not in node.value:
                    raise ctx.fail(
                        node,
                        f"{key}.{k}",
                        f"required: one entry per {self.over} ({', '.join(names)})",
                    )
        return MappingProxyType(
            {k: self.of.read(v, f"{key}.{k}", ctx) for k, v in node.value.items()}
        )


def read(declared: Mapping[str, Any], node, key: str, ctx: Check) -> Mapping[str, Any]:
    """matrix.yaml's `gates` of one suite, checked against the suite's declaration."""
    if node is None or node.value is None:
        if any(not getattr(s, "optional", False) for s in declared.values()):
            missing = [k for k, s in declared.items() if not getattr(s, "optional", False)]
            raise ctx.fail(node, key, f"required: a gates block with {', '.join(missing)}")
        return MappingProxyType({})
    return Record(declared).read(node, key, ctx)


@dataclass(frozen=True)
class Quant:
    """Weights unquantised ("none") or {group_size, bits}."""

    optional: bool = False

    def describe(self) -> str:
        return "none, or {group_size: an integer, bits: an integer 2 to 8}"

    def read(self, node, key: str, ctx: Check) -> Any:
        if node.value == "none":
            return "none"
        return Record({"group_size": Int(16, 1024), "bits": Int(2, 8)}).read(node, key, ctx)
