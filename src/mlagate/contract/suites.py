"""A suite's contract, held as data: `suites/<kind>/<name>.suite.yaml` beside its test body
`test_<name>.py` (a suite kept beside a matrix, `suites.<id>.file: test_x.py`, has `x.suite.yaml`
beside it). It is read as a document (YAML, validated against schemas/suite.json through
mlagate.documents), never imported, so that reading the matrix, a report or `compare` runs no
suite code, and no document that names a file can make mlagate run it. It declares:

- gates: the matrix's `gates` keys, each typed as a mlagate.contract.gates type, with its meaning;
- controls_fail: a control arm must fail it; control_kinds: the failure kinds its defect
  produces; failure_kinds: every kind the test can produce (`runtime_raised` always);
- plan_check: rules a sparse suite's grid must meet (PLAN_RULES), checked when the matrix is
  read, from each geometry's pool width and top-k; gate_check: rules between its gates
  (mlagate.contract.gaterules), checked then too;
- order: where the report lists it among the suites of its kind (lower first);
- metrics: a version and the JSON Schema the result's metrics meet;
- key_figures: numbers the history follows and `compare` judges, read from the metrics by
  JMESPath expressions (KeyFigure); plots: the report section drawn from its results (a
  drawing of mlagate.report.drawings).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import jmespath
import jsonschema
from jmespath import functions as jp_functions

from mlagate import documents, yamlread
from mlagate.contract import gates
from mlagate.contract.gaterules import GATE_RULES

Row = Mapping[str, Any]  # one result document (mlagate.results)
RUNTIME_RAISED = "runtime_raised"  # a failure kind every suite can produce
SUFFIX = ".suite.yaml"


class ContractError(ValueError):
    """A suite without a readable contract; one line."""


class _Functions(jp_functions.Functions):
    @jp_functions.signature({"types": ["object"]})
    def _func_items(self, obj):  # noqa: N802 (JMESPath's naming)
        """items(obj): [[key, value], ...], so a figure can pick an entry by its key."""
        return [[k, v] for k, v in obj.items()]


_OPTIONS = jmespath.Options(custom_functions=_Functions())


def _search(expr: str, data: Any) -> Any:
    """The value of a JMESPath expression over data; None where it does not apply (a function
    given a value of another type)."""
    try:
        return jmespath.search(expr, data, _OPTIONS)
    except jmespath.exceptions.JMESPathError:
        return None


def _number(v: Any) -> float | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok else None


@dataclass(frozen=True)
class KeyFigure:
    """A number the history follows per (module, arm, geometry, backend), read from one result's
    metrics: `value` at `at` (divided by `over`, times `scale`) and, where the suite measures
    one, its 95 % `interval` (mlagate compare calls a rise worse unless higher_is_worse is
    False). Each is a JMESPath expression; a result without the number gives None."""

    id: str
    label: str
    unit: str
    value_path: str | None = None
    interval_path: str | None = None
    higher_is_worse: bool = True
    at: str | None = None
    over: str | None = None
    scale: float = 1.0

    def _base(self, metrics: Any) -> Any:
        return _search(self.at, metrics) if self.at else metrics

    def value(self, row: Row) -> float | None:
        if self.value_path is None:
            return None
        base = self._base(row.get("metrics"))
        v = _number(_search(self.value_path, base))
        if v is not None and self.over:
            d = _number(_search(self.over, base))
            v = v / d if d else None
        return None if v is None else v * self.scale

    def interval(self, row: Row) -> tuple[float, float] | None:
        if self.interval_path is None:
            return None
        got = _search(self.interval_path, self._base(row.get("metrics")))
        ends = [_number(x) for x in got] if isinstance(got, list) and len(got) == 2 else []
        if len(ends) != 2 or None in ends:
            return None
        return (ends[0] * self.scale, ends[1] * self.scale)


@dataclass(frozen=True)
class PlotSection:
    """A section of the commit page: the report's drawing `draw` of the suite's results, under a
    heading and one paragraph saying how to read them."""

    id: str
    heading: str
    blurb: str
    draw: str


def crosses_window(T: int, S: int, k: int, kpool: int) -> bool:
    """Whether rejecting the last k of S tokens fed on a cache of T un-completes a pool window."""
    return (T + S) // kpool != (T + S - k) // kpool


def _aligned_and_misaligned(rule: Mapping, kpool: int, topk: int, g: Mapping) -> str | None:
    lengths = [topk + o for o in g[rule["past_topk"]]]
    if kpool > 1 and not (any(T % kpool == 0 for T in lengths) and any(T % kpool for T in lengths)):
        return (
            f"{rule['past_topk']} gives cache lengths {lengths}: both aligned and misaligned ones "
            f"are needed for kpool {kpool}"
        )
    return None


def _window_crossings_both(rule: Mapping, kpool: int, topk: int, g: Mapping) -> str | None:
    kinds = {
        crosses_window(topk + o, S, k, kpool)
        for o in g[rule["past_topk"]]
        for S in g[rule["widths"]]
        for k in range(1, S)
    }
    if kpool > 1 and kinds != {True, False}:
        return (
            f"the grid ({rule['past_topk']}, {rule['widths']}) holds only "
            f"{'window-crossing' if True in kinds else 'non-crossing'} rejections for kpool "
            f"{kpool}: both kinds are needed"
        )
    return None


# plan_check rules: (the rule, kpool, top-k, the suite's gates) -> why the grid cannot cover it
PLAN_RULES: dict[str, Callable[[Mapping, int, int, Mapping], str | None]] = {
    "aligned_and_misaligned": _aligned_and_misaligned,
    "window_crossings_both": _window_crossings_both,
}


@dataclass(frozen=True)
class Contract:
    path: Path  # the test body
    kind: str
    gates: Mapping[str, Any]  # key -> mlagate.contract.gates type
    controls_fail: bool
    rules: tuple[Mapping[str, Any], ...] = ()
    order: int = 1000
    key_figures: tuple[KeyFigure, ...] = ()
    plots: PlotSection | None = None
    failure_kinds: tuple[str, ...] = (RUNTIME_RAISED,)
    control_kinds: tuple[str, ...] = ()
    metrics_version: int = 1
    metrics_schema: Mapping[str, Any] = field(default_factory=dict)
    meanings: Mapping[str, str] = field(default_factory=dict)  # gate key -> its meaning
    gate_rules: tuple[Mapping[str, Any], ...] = ()  # gate_check: rules between its gates

    def gate_check(self, g: Mapping[str, Any]) -> tuple[str, str] | None:
        """The gate key at fault and why, where the gates break a rule between them."""
        for rule in self.gate_rules:
            found = GATE_RULES[rule["rule"]](rule, g)
            if found:
                return found
        return None

    def plan_check(self, kpool: int, topk: int, g: Mapping[str, Any]) -> str | None:
        """Why the suite's grid cannot cover a geometry of this pool width and top-k (None: it
        can)."""
        for rule in self.rules:
            why = PLAN_RULES[rule["rule"]](rule, kpool, topk, g)
            if why:
                return why
        return None

    def typed(self, row: Row) -> bool:
        """Whether the result's metrics were written under this contract's metrics version (or
        name none) and meet its schema: only such a result gives key figures and plots."""
        if row.get("metrics_version", self.metrics_version) != self.metrics_version:
            return False
        return self.validator().is_valid(row.get("metrics"))

    def validator(self) -> jsonschema.protocols.Validator:
        """The validator of the suite's metrics schema (built once per contract)."""
        return _validator(self.path)


def contract_path(test_file: Path) -> Path:
    """The contract beside a test body: <dir>/<name>.suite.yaml for <dir>/test_<name>.py."""
    return test_file.with_name(test_file.stem.removeprefix("test_") + SUFFIX)


def _gate(spec: Mapping[str, Any]) -> Any:
    """A gate type of the declaration as a mlagate.contract.gates type."""
    t, opt = spec["type"], bool(spec.get("optional", False))
    if t in ("number", "int"):
        bounds = {k: spec[k] for k in ("low", "high") if k in spec}
        flags = {"above": bool(spec.get("above")), "calibrated": bool(spec.get("calibrated"))}
        if t == "int":
            return gates.Int(**bounds, **flags, optional=opt)
        return gates.Number(**bounds, **flags, optional=opt)
    simple = {"samples": gates.Samples, "dtype": gates.Dtype, "quant": gates.Quant}
    if t in simple:
        return simple[t](optional=opt)
    if t == "choice":
        return gates.Choice(tuple(spec["options"]), optional=opt)
    if t == "text":
        return gates.Text(spec.get("pattern"), optional=opt)
    if t == "list":
        return gates.List(_gate(spec["of"]), spec.get("min_len", 1), optional=opt)
    if t == "record":
        return gates.Record({k: _gate(v) for k, v in spec["fields"].items()}, optional=opt)
    return gates.Keyed(spec["over"], _gate(spec["of"]), optional=opt)


def _plain(node: yamlread.Node) -> Any:
    if isinstance(node.value, dict):
        return {k: _plain(v) for k, v in node.value.items()}
    if isinstance(node.value, list):
        return [_plain(v) for v in node.value]
    return node.value


def read(path: Path) -> dict:
    """The contract document of a suite file, validated; ContractError (one line) else."""
    where = contract_path(path)
    if not where.is_file():
        raise ContractError(f"{path}: no contract {where.name} beside it (mlagate.contract.suites)")
    try:
        data = _plain(yamlread.compose(yamlread.read_text(where)))
        documents.validate(data, "suite", str(where))
    except yamlread.ReadError as exc:
        raise ContractError(f"{where}: {exc}") from None
    except documents.DocumentError as exc:
        raise ContractError(str(exc)) from None
    kinds = data.get("failure_kinds") or [RUNTIME_RAISED]
    control = data.get("control_kinds", [])
    stray = [k for k in control if k not in kinds and k != RUNTIME_RAISED]
    if stray:
        raise ContractError(f"{where}: control_kinds: {stray[0]!r} is not in failure_kinds")
    if data.get("controls_fail") and not control:
        raise ContractError(
            f"{where}: controls_fail: true needs control_kinds (the kinds a control's defect "
            "produces)"
        )
    for i, rule in enumerate(data.get("plan_check", [])):
        for k, v in rule.items():
            if k != "rule" and (data["gates"].get(v) or {}).get("type") != "list":
                raise ContractError(
                    f"{where}: plan_check.{i}.{k}: {v!r} is not one of its list gates"
                )
    for i, rule in enumerate(data.get("gate_check", [])):
        for k, v in rule.items():
            if k == "rule":
                continue
            for name in [v] if isinstance(v, str) else v:
                if name not in data["gates"]:
                    raise ContractError(f"{where}: gate_check.{i}.{k}: {name!r} is not a gate")
    try:
        schema = data["metrics"]["schema"]
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        raise ContractError(f"{where}: metrics.schema: {exc.message[:160]}") from None
    for i, f in enumerate(data.get("key_figures", [])):
        for k in ("at", "value", "over", "interval"):
            try:
                jmespath.compile(f.get(k) or "@")
            except jmespath.exceptions.JMESPathError as exc:
                msg = str(exc).splitlines()[0][:120]
                raise ContractError(
                    f"{where}: key_figures.{i}.{k}: not a JMESPath expression ({msg})"
                ) from None
    return data


@functools.cache
def load(path: Path) -> Contract:
    """The contract of the suite whose test body is `path` (read once per process)."""
    data = read(path)
    kinds = tuple(dict.fromkeys([*(data.get("failure_kinds") or []), RUNTIME_RAISED]))
    plots = data.get("plots")
    return Contract(
        path,
        data["kind"],
        MappingProxyType({k: _gate(v) for k, v in data["gates"].items()}),
        bool(data.get("controls_fail", False)),
        tuple(data.get("plan_check", [])),
        data.get("order", 1000),
        tuple(
            KeyFigure(
                f["id"],
                f["label"],
                f["unit"],
                f["value"],
                f.get("interval"),
                f.get("higher_is_worse", True),
                f.get("at"),
                f.get("over"),
                float(f.get("scale", 1.0)),
            )
            for f in data.get("key_figures", [])
        ),
        PlotSection(**plots) if plots else None,
        kinds,
        tuple(data.get("control_kinds", [])),
        data["metrics"]["version"],
        MappingProxyType(data["metrics"]["schema"]),
        MappingProxyType({k: v.get("meaning", "") for k, v in data["gates"].items()}),
        tuple(data.get("gate_check", [])),
    )


@functools.cache
def _validator(path: Path) -> jsonschema.protocols.Validator:
    schema = dict(load(path).metrics_schema)
    return jsonschema.validators.validator_for(schema)(schema)


@dataclass(frozen=True)
class Entry:
    """A suite the report knows: its id, kind and test body (its contract lies beside it)."""

    id: str
    kind: str
    path: Path | None

    @property
    def contract(self) -> Contract | None:
        """Its contract; None when it is gone or does not read (a report of old results still
        lists the suite, without its figures). Only data is read: no file is imported."""
        if self.path is None or not contract_path(self.path).is_file():
            return None
        try:
            return load(self.path)
        except ContractError:
            return None


def shipped(root: Path) -> dict[str, Entry]:
    """The suites under a suites folder: <root>/<kind>/test_<id>.py."""
    return {
        p.stem.removeprefix("test_"): Entry(p.stem.removeprefix("test_"), p.parent.name, p)
        for p in sorted(root.glob("*/test_*.py"))
    }
