"""Planning, with nothing of the worker, the harness or pytest imported: the arms a
selection needs (materialised and checked), its cases, and the PR gate's job matrices. `mlagate
plan` runs on this alone; mlagate.gate.run re-exports it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mlagate.arm import arms as arms_mod
from mlagate.arm.arms import ArmInstall
from mlagate.errors import UsageError
from mlagate.gate import bounds, shard
from mlagate.matrix import Matrix
from mlagate.plan import Case, Coverage, PlanError, Selection, arm_scan, coverage, expand


def clock(seconds: float) -> str:
    """Seconds as M:SS, or H:MM:SS from an hour."""
    s = max(0, int(round(seconds)))
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


def footer(cases, costs: shard.Costs | None = None) -> str:
    """The selection's size and its time estimate from the cost table, serially."""
    costs = costs or shard.load_costs()
    serial = sum(costs.of(c) for c in cases)
    argued = sum(c.evidence == "argued" for c in cases)
    return (
        f"{len(cases)} cases selected ({argued} argued-not-measured), "
        f"{len({c.module for c in cases})} modules, {len({c.arm for c in cases})} arms; "
        f"estimated {clock(serial)} on one worker, from the cost table"
    )


def installs_for(
    matrix: Matrix, selection: Selection, cache: Path | None = None, trust_unchanged: bool = False
) -> dict[str, ArmInstall]:
    """Materialise the arms the selection touches and check that every module exists in them;
    trust_unchanged: for a verb that runs no arm (arms.verify_all)."""
    selection.check(matrix)
    wanted = {
        a.id
        for m in matrix.modules.values()
        for a in matrix.arms_for(m)
        if (not selection.arms or a.id in selection.arms)
        and (not selection.modules or m.id in selection.modules)
    }
    wanted = sorted(wanted | {matrix.arms[a].baseline for a in wanted if matrix.arms[a].baseline})
    try:
        installs = arms_mod.materialise_all(matrix, wanted, cache)
        arms_mod.verify_all(installs, trust_unchanged)
    except arms_mod.ArmError as exc:
        raise UsageError(str(exc)) from None
    check_modules(matrix, installs)
    return installs


def check_modules(matrix: Matrix, installs: dict[str, ArmInstall]) -> None:
    """Every registered module's import path and attention class exist in each of its arms."""
    for module in matrix.modules.values():
        for arm in matrix.arms_for(module):
            inst = installs.get(arm.id)
            if inst is None:
                continue
            if not inst.has_module(module.import_path):
                raise UsageError(
                    f"{matrix.path}: modules.{module.id}.import: {module.import_path} does not "
                    f"exist in arm {arm.id} ({inst.version})"
                )
            cls = module.attention_for(arm.id)
            if cls not in arm_scan(inst).classes_of(module.import_path):
                raise UsageError(
                    f"{matrix.path}: modules.{module.id}.attention: no class {cls} in "
                    f"{module.import_path} of arm {arm.id}"
                )


@dataclass(frozen=True)
class PlanOutcome:
    cases: list[Case]
    gaps: list[Coverage]
    skipped: list[Case] = field(
        default_factory=list
    )  # cases a known finding leaves out (expectation skip)
    installs: dict[str, ArmInstall] = field(default_factory=dict)  # the resolved arms

    @property
    def exit_code(self) -> int:
        """An arm holding a module the matrix does not register: bad input (2), as `run`."""
        return 2 if self.gaps else 0


def plan(
    matrix: Matrix,
    selection: Selection,
    profile: str,
    backend: str,
    runner: str,
    cache: Path | None = None,
    aa: bool = False,
    trust_unchanged: bool = False,
) -> PlanOutcome:
    installs = installs_for(matrix, selection, cache, trust_unchanged)
    try:
        every = expand(matrix, selection, profile, backend, runner, installs, aa, keep_skipped=True)
    except PlanError as exc:
        raise UsageError(str(exc)) from None
    cases = [c for c in every if c.expected != "skip"]
    return PlanOutcome(
        cases, coverage(matrix, installs), [c for c in every if c.expected == "skip"], installs
    )


def refuse_gaps(matrix: Matrix, gaps) -> None:
    """Running or planning the gate with an arm that holds an unregistered MLA module is a usage
    error."""
    for gap in gaps:
        raise UsageError(
            f"{matrix.path}: arm {gap.arm} holds MLA modules the matrix does not register: "
            f"{', '.join(gap.missing)}"
        )


def gate_plan(
    matrix: Matrix,
    runners: list[str],
    shards: int,
    cache: Path | None = None,
    profile: str | None = None,
    costs: shard.Costs | None = None,
    trust_unchanged: bool = False,
) -> shard.GatePlan:
    """The PR gate's jobs: per runner, correctness cases in `shards` balanced shards and the
    performance cases in one job."""
    costs = costs or shard.load_costs()
    kinds = {s: matrix.suites[s].kind for s in matrix.suites}
    plan = shard.GatePlan()
    installs = installs_for(matrix, Selection(), cache, trust_unchanged)
    refuse_gaps(matrix, coverage(matrix, installs))
    for label in runners:
        runner = matrix.runners[label]
        prof = profile or runner.profile or "quick"
        try:
            cases = expand(matrix, Selection(), prof, runner.backend, label, installs)
        except PlanError as exc:
            raise UsageError(str(exc)) from None
        bounds.shards(shards, bounds.MAX_SHARDS, "--shards")
        # a runner with fewer correctness cases than --shards gets one shard per case, never an
        # empty one
        per_runner = max(1, min(shards, sum(kinds[c.suite] == "correctness" for c in cases)))
        plan.jobs += shard.gate_jobs(
            "correctness",
            cases,
            per_runner,
            kinds,
            costs,
            runner.runs_on,
            prof,
            runner.backend,
            label,
        )
        plan.jobs += shard.gate_jobs(
            "performance",
            cases,
            shards,
            kinds,
            costs,
            runner.perf_runs_on,
            prof,
            runner.backend,
            label,
        )
    return plan
