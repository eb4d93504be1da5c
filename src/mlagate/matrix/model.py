"""The validated matrix: MatrixError, the constants of matrix.yaml and the frozen dataclasses
that mlagate.matrix.parse builds."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from types import MappingProxyType
from typing import Any

from mlagate.paths import shipped_suite

SCHEMA_VERSION = 1
ROLES = ("stock", "patched", "base", "head")
SUITE_KINDS = ("correctness", "performance")
# a machine class's id (mlagate.machine.classes): mc- and 12 hex digits of its parts' sha256
MACHINE_CLASS_ID = re.compile(r"mc-[0-9a-f]{12}", re.ASCII)
DTYPES = ("float32", "bfloat16", "float16")


class MatrixError(ValueError):
    """A one-line configuration error: ``FILE:LINE: KEY: message``."""

    def __init__(self, file: str, line: int | None, key: str, message: str):
        self.file, self.line, self.key, self.message = file, line, key, message
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {key}: {message}")


@dataclass(frozen=True)
class Runtime:
    id: str
    package: str
    distribution: str


@dataclass(frozen=True)
class ArmSource:
    kind: str  # pypi | git | path
    spec: str  # requirement, git URL or path
    ref: str | None = None

    def describe(self) -> str:
        return f"{self.spec}@{self.ref}" if self.ref else self.spec


@dataclass(frozen=True)
class Activation:
    """Code an arm's worker runs after its paths are set and before it builds a model: a module
    imported (its parent packages' inits stay bare), then an optional function of it called with
    no arguments, under environment variables set for the worker (None: unset there)."""

    module: str
    function: str | None = None
    env: Mapping[str, str | None] = field(default_factory=lambda: MappingProxyType({}))
    install: tuple[str, ...] = ()  # requirements or resolved paths, installed with --no-deps


@dataclass(frozen=True)
class OverlayFile:
    dest: str  # a path inside the arm's site/ (posix, relative)
    source: Path


@dataclass(frozen=True)
class Overlay:
    """Files copied over another arm's install (its source, needs and patches)."""

    on: Arm
    files: tuple[OverlayFile, ...]


@dataclass(frozen=True)
class Arm:
    id: str
    runtime: str
    source: ArmSource
    role: str
    patches: tuple[Path, ...] = ()
    needs: tuple[str, ...] = ()
    baseline: str | None = None
    activate: Activation | None = None
    overlay: Overlay | None = None  # this arm is overlay.on's install with files replaced


@dataclass(frozen=True)
class Indexer:
    n_heads: int
    head_dim: int
    topk: int
    kpool: int | None = None


@dataclass(frozen=True)
class Geometry:
    id: str
    kv_lora_rank: int
    qk_nope_head_dim: int
    v_head_dim: int
    qk_rope_head_dim: int
    num_attention_heads: int
    hidden_size: int
    q_lora_rank: int | None
    source: str
    indexer: Indexer | None = None

    @property
    def rnv(self) -> tuple[int, int, int]:
        return (self.kv_lora_rank, self.qk_nope_head_dim, self.v_head_dim)


@dataclass(frozen=True)
class Module:
    id: str
    runtime: str
    import_path: str
    attention: str
    model: str
    args: str
    config: Mapping[str, Any]
    geometries: tuple[str, ...]
    geometry_keys: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    arms: tuple[str, ...] | None = None
    sparse: bool = False
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))
    notes: str = ""
    deep: Mapping[str, Any] = field(
        default_factory=lambda: MappingProxyType({})
    )  # config keys of a whole model of two or more layers
    ops: tuple[str, ...] = ()  # MLX operations its tiny model runs that a backend limit names

    def attention_for(self, arm: str) -> str:
        return self.overrides.get(arm, {}).get("attention", self.attention)

    def config_for(self, arm: str) -> dict[str, Any]:
        return {**self.config, **self.overrides.get(arm, {}).get("config", {})}


@dataclass(frozen=True)
class Checkpoint:
    id: str
    module: str
    geometry: str
    size_gb: float
    runners: Mapping[str, str]  # runner label -> local path


@dataclass(frozen=True)
class Suite:
    id: str
    kind: str
    gates: Mapping[str, Any]
    baseline: bool = False  # runs only on arms with a baseline, comparing the two
    modules: tuple[str, ...] | None = None  # only these modules (None: every module)
    sparse: bool = False  # only modules with a sparse indexer
    controls_fail: bool = (
        False  # the suite detects the single-query guard: a control arm must fail it
    )
    path: Path | None = (
        None  # the suite's file (suites/<kind>/test_<id>.py, or `file:` beside the matrix)
    )
    failure_kinds: tuple[str, ...] = ()  # the kinds its contract says it can produce
    control_kinds: tuple[str, ...] = ()  # the kinds a control arm's defect produces
    retry: bool = False  # `retry: true`: a case that failed, then passed (flaky) is not red

    @property
    def file(self) -> Path:
        """The suite's test body (its contract lies beside it)."""
        return self.path or shipped_suite(self.kind, self.id)


@dataclass(frozen=True)
class Expectation:
    """A known finding: the verdict a case is expected to have, and why."""

    suite: str
    module: str
    arm: str
    verdict: (
        str  # pass, fail, or skip (not planned: the case cannot be measured, for the reason given)
    )
    reason: str
    link: str = ""
    geometry: str | None = None  # None: every geometry (and checkpoint) of the module
    backend: str | None = None  # None: every backend
    kinds: tuple[str, ...] = ()  # verdict fail: every failure kind it fails with

    def matches(self, suite: str, module: str, arm: str, geometry: str, backend: str) -> bool:
        return (
            (self.suite, self.module, self.arm) == (suite, module, arm)
            and self.geometry in (None, geometry)
            and self.backend in (None, backend)
        )


@dataclass(frozen=True)
class Unservable:
    """What a runtime cannot serve or express, per configuration of a serving case, against a
    named finding (docs/findings.md): the configurations (globs over the labels a serving suite
    gives them) of the suite's cases of those modules and arms (None: every one) where the
    runtime raises (`how: raises`) or its own API says it has no way (`how: probe`: the
    worker's not_servable or not_expressible), its reason containing `match`. Such a
    configuration is listed, not failed; any other configuration of the case is judged
    (mlagate.harness.configurations)."""

    finding: str
    suite: str
    configurations: tuple[str, ...]
    how: str  # raises or probe
    reason: str
    link: str = ""
    modules: tuple[str, ...] | None = None
    arms: tuple[str, ...] | None = None
    backend: str | None = None
    match: str = ""  # the runtime's reason must contain this ("": any)

    def holds_for(self, suite: str, module: str, arm: str, backend: str) -> bool:
        return (
            self.suite == suite
            and (self.modules is None or module in self.modules)
            and (self.arms is None or arm in self.arms)
            and self.backend in (None, backend)
        )

    def covers(self, label: str) -> bool:
        return any(fnmatchcase(label, g) for g in self.configurations)


@dataclass(frozen=True)
class BackendLimit:
    """What an MLX backend cannot run: an operation at a dtype. Every case on that backend that
    runs the dtype, of a module whose `ops` name the operation, is skipped with the reason,
    whatever its arm (mlagate.verdict.expectations)."""

    backend: str
    dtype: str
    op: str
    reason: str
    link: str = ""


@dataclass(frozen=True)
class Runner:
    label: str
    backend: str
    notes: str = ""
    runs_on: tuple[str, ...] = ()  # GitHub `runs-on` labels of correctness jobs
    perf_runs_on: tuple[
        str, ...
    ] = ()  # GitHub `runs-on` labels of performance jobs (machines that run nothing else)
    profile: str | None = None  # the profile the gate runs here
    gate: bool = False  # whether `mlagate plan --format github` plans jobs for this runner
    workers: int | None = None  # the most correctness workers at once (`-n auto` stops there)
    machine_class: str | None = None  # the class its hosts must be (mlagate.machine.classes)


@dataclass(frozen=True)
class Profile:
    id: str
    heads: int
    hidden_size: int
    q_lora_rank: int
    vocab_size: int
    index_heads: int
    index_topk: int
    cache_lengths: tuple[int, ...]
    widths: tuple[int, ...]
    prefill_widths: tuple[int, ...]
    prefill_chunk: int
    samples: int
    warmup: int
    perf_cache_lengths: tuple[int, ...]
    crossover_cache: int
    crossover_widths: tuple[int, ...]
    dtype: str
    timeout_s: float
    sample_min_s: float = (
        0.0  # a timed sample repeats its step until it lasts this long (0: one step)
    )


@dataclass(frozen=True)
class Allow:
    module: str
    guard: str
    reason: str
    gates: str = (
        "other"  # what the allowed guard's single-query branch does: absorbed, pooling or other
    )


@dataclass(frozen=True)
class EquivalentMutant:
    """A mutant argued equivalent (`mutants: equivalent:`): arm, mutant id (a glob) and why, on
    one backend or (None) every one."""

    arm: str
    mutant: str
    reason: str
    backend: str | None = None


@dataclass(frozen=True)
class Matrix:
    path: Path
    version: int
    runtimes: Mapping[str, Runtime]
    arms: Mapping[str, Arm]
    geometries: Mapping[str, Geometry]
    modules: Mapping[str, Module]
    checkpoints: Mapping[str, Checkpoint]
    suites: Mapping[str, Suite]
    runners: Mapping[str, Runner]
    profiles: Mapping[str, Profile]
    allowlist: tuple[Allow, ...] = ()
    expectations: tuple[Expectation, ...] = ()
    equivalent_mutants: tuple[EquivalentMutant, ...] = ()  # mlagate mutate: argued, never run
    backend_limits: tuple[BackendLimit, ...] = ()  # what a backend cannot run (skips)
    unservable: tuple[Unservable, ...] = ()  # serving configurations a runtime cannot serve

    def arms_for(self, module: Module) -> list[Arm]:
        chosen = module.arms if module.arms is not None else tuple(self.arms)
        return [self.arms[a] for a in chosen if self.arms[a].runtime == module.runtime]
