"""Shards: the cases of a selection split into N deterministic, cost-balanced parts.

Correctness cases are balanced one by one by measured cost (greedy longest processing time
first); the performance cases of a runner stay together as one unit, so they run serially
on one machine. The cost table is data (costs.json beside this file, made by `mlagate
costs` from real results); a case it does not know costs the median of its suite.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from mlagate.plan import Case

MANIFEST = "manifest.json"
MANIFEST_SCHEMA = "mlagate.manifest/1"
PLAN_SCHEMA = "mlagate.plan/1"
COSTS_SCHEMA = "mlagate.costs/1"
UNKNOWN_COST_S = 10.0


class ShardError(ValueError):
    """A bad shard spec or cost table; one line."""


def parse_spec(text: str) -> tuple[int, int]:
    """'I/N' in ASCII digits (no sign, space or '_') with 1 <= I <= N."""
    if not re.fullmatch(r"[0-9]{1,9}/[0-9]{1,9}", text, flags=re.ASCII):
        raise ShardError(f"--shard: expected I/N (for example 2/4), got {text[:40]!r}")
    i, n = (int(x) for x in text.split("/"))
    if n < 1 or not 1 <= i <= n:
        raise ShardError(f"--shard: expected I/N with 1 <= I <= N, got {text!r}")
    return i, n


# --- costs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Costs:
    """Seconds per case: per suite and module, with a per-suite default."""

    suites: dict[str, dict]
    source: str = ""

    def of(self, case: Case) -> float:
        if case.evidence == "argued":
            return 0.0
        suite = self.suites.get(case.suite)
        if suite is None:
            return UNKNOWN_COST_S
        return float(suite.get("modules", {}).get(case.module, suite["default"]))


def default_costs_path() -> Path:
    return Path(__file__).resolve().parent / "costs.json"


def load_costs(path: Path | None = None) -> Costs:
    path = Path(path or default_costs_path())
    from mlagate import documents

    try:
        data = documents.load(path, "costs")
    except documents.DocumentError as exc:
        raise ShardError(str(exc)) from None
    if data.get("schema") != COSTS_SCHEMA or not isinstance(data.get("suites"), dict):
        raise ShardError(
            f"{path}: schema is {data.get('schema')!r}, expected {COSTS_SCHEMA} with a 'suites' "
            "mapping"
        )
    for name, suite in data["suites"].items():
        if not isinstance(suite, dict) or not isinstance(suite.get("default"), (int, float)):
            raise ShardError(f"{path}: suites.{name}.default: expected a number of seconds")
    return Costs(data["suites"], data.get("source", ""))


def derive_costs(rows: list[dict], source: str = "") -> dict:
    """A cost table from result rows: the median duration per (suite, module) and per suite.

    Argued rows (nothing run) are left out. Caveat: durations come from one runner and
    profile; shards are balanced by the ratios, which hold only roughly on another machine.
    """
    by: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        if r["verdict"] == "argued" or "duration_s" not in r:
            continue
        by.setdefault(r["suite"], {}).setdefault(r["module"], []).append(float(r["duration_s"]))
    suites = {}
    for suite, modules in sorted(by.items()):
        every = [d for ds in modules.values() for d in ds]
        suites[suite] = {
            "default": round(statistics.median(every), 3),
            "modules": {m: round(statistics.median(ds), 3) for m, ds in sorted(modules.items())},
        }
    runners = sorted({f"{r.get('runner', '?')}/{r.get('profile', '?')}" for r in rows})
    return {"schema": COSTS_SCHEMA, "source": source, "runners": runners, "suites": suites}


# --- assignment ----------------------------------------------------------------------


def _units(cases: list[Case], kinds: dict[str, str]) -> list[list[Case]]:
    """Correctness cases one by one; the performance cases of each runner as one unit."""
    units: list[list[Case]] = []
    perf: dict[str, list[Case]] = {}
    for c in cases:
        if kinds[c.suite] == "performance":
            perf.setdefault(c.runner, []).append(c)
        else:
            units.append([c])
    return units + [perf[r] for r in sorted(perf)]


def assign(cases: list[Case], count: int, kinds: dict[str, str], costs: Costs) -> list[list[Case]]:
    """Split cases into `count` shards, deterministically, balancing the summed cost.

    Units are placed heaviest first (ties by case id) on the least loaded shard (ties by
    shard number). Each shard keeps the cases in their plan order. A shard may be empty
    when there are fewer units than shards.
    """
    if count < 1:
        raise ShardError(f"--shards: expected a positive number, got {count}")
    units = sorted(
        _units(cases, kinds), key=lambda u: (-sum(costs.of(c) for c in u), u[0].runner, u[0].id)
    )
    heap = [(0.0, i) for i in range(count)]
    where: dict[tuple[str, str], int] = {}
    for unit in units:
        load, i = heapq.heappop(heap)
        for c in unit:
            where[(c.runner, c.id)] = i
        heapq.heappush(heap, (load + sum(costs.of(c) for c in unit), i))
    return [[c for c in cases if where[(c.runner, c.id)] == i] for i in range(count)]


def digest(cases: list[Case]) -> str:
    """A short fingerprint of a set of cases: shards of one plan share it."""
    return hashlib.sha1(
        "\n".join(sorted(f"{c.runner}::{c.id}" for c in cases)).encode()
    ).hexdigest()[:12]


# --- manifests and the gate's plan ---------------------------------------------------


def write_manifest(
    out: Path,
    cases: list[Case],
    planned: list[Case],
    shard: tuple[int, int],
    profile: str,
    backend: str,
    runner: str,
) -> Path:
    """What a run (or shard) was asked to run, written before it starts: merge reports what is
    missing."""
    out.mkdir(parents=True, exist_ok=True)
    data = {
        "schema": MANIFEST_SCHEMA,
        "runner": runner,
        "profile": profile,
        "backend": backend,
        "shard": f"{shard[0]}/{shard[1]}",
        "plan": digest(planned),
        "cases": [c.id for c in cases],
    }
    path = out / MANIFEST
    path.write_text(json.dumps(data, indent=1))
    return path


@dataclass(frozen=True)
class Job:
    """One job of the gate's matrix: a shard of one runner's cases of one kind."""

    kind: str
    runner: str
    profile: str
    backend: str
    runs_on: tuple[str, ...]
    index: int
    count: int
    cases: tuple[Case, ...]
    cost_s: float

    @property
    def artifact(self) -> str:
        return f"results-{self.runner}-{self.kind}-{self.index}-of-{self.count}"

    def entry(self) -> dict:
        return {
            "name": f"{self.kind} {self.runner} {self.index}/{self.count}",
            "kind": self.kind,
            "runner": self.runner,
            "profile": self.profile,
            "backend": self.backend,
            "runs_on": list(self.runs_on),
            "shard": f"{self.index}/{self.count}",
            "cases": len(self.cases),
            "cost_s": round(self.cost_s, 1),
            "artifact": self.artifact,
        }


@dataclass
class GatePlan:
    jobs: list[Job] = field(default_factory=list)

    def entries(self, kind: str) -> list[dict]:
        return [j.entry() for j in self.jobs if j.kind == kind and j.cases]

    def outputs(self) -> dict[str, str]:
        """The plan job's outputs: one JSON matrix per kind (empty shards left out) and counts."""
        out = {}
        for kind in ("correctness", "performance"):
            entries = self.entries(kind)
            out[kind] = json.dumps({"include": entries}, separators=(",", ":"))
            out[f"{kind}_jobs"] = str(len(entries))
        out["cases"] = str(sum(len(j.cases) for j in self.jobs))
        return out

    def to_json(self) -> dict:
        return {
            "schema": PLAN_SCHEMA,
            "jobs": [{**j.entry(), "case_ids": [c.id for c in j.cases]} for j in self.jobs],
        }


def gate_jobs(
    kind: str,
    cases: list[Case],
    shards: int,
    kinds: dict[str, str],
    costs: Costs,
    runs_on: tuple[str, ...],
    profile: str,
    backend: str,
    runner: str,
) -> list[Job]:
    """The jobs of one runner and kind: correctness in `shards` shards, performance in one."""
    mine = [c for c in cases if kinds[c.suite] == kind]
    count = shards if kind == "correctness" else 1
    return [
        Job(
            kind,
            runner,
            profile,
            backend,
            runs_on,
            i + 1,
            count,
            tuple(part),
            sum(costs.of(c) for c in part),
        )
        for i, part in enumerate(assign(mine, count, kinds, costs))
    ]
