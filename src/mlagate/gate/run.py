"""Plain functions behind the CLI: plan, check arms, run suites. Each returns a result object."""

from __future__ import annotations

import ast
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from mlagate import arms as arms_mod
from mlagate import lifeline, results, runplan
from mlagate.arms import ArmInstall
from mlagate.gate import bounds, live, outdir, resume, shard
from mlagate.gate.errors import UsageError  # noqa: F401 (raised here, caught by the CLI as execute.UsageError)
from mlagate.harness.supervisor import pinned_cpu
from mlagate.matrix import Matrix, bundled
from mlagate.plan import Case, Coverage, PlanError, Selection, coverage, expand
from mlagate.worker import machine


def installs_for(
    matrix: Matrix, selection: Selection, cache: Path | None = None
) -> dict[str, ArmInstall]:
    """Materialise the arms the selection touches and check that every module exists in them."""
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
        arms_mod.verify_all(installs)
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
            if cls not in _classes(inst, module.import_path):
                raise UsageError(
                    f"{matrix.path}: modules.{module.id}.attention: no class {cls} in "
                    f"{module.import_path} of arm {arm.id}"
                )


def _classes(inst: ArmInstall, import_path: str) -> set[str]:
    base = inst.site.joinpath(*import_path.split("."))
    path = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}


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
) -> PlanOutcome:
    installs = installs_for(matrix, selection, cache)
    try:
        every = expand(matrix, selection, profile, backend, runner, installs, aa, keep_skipped=True)
    except PlanError as exc:
        raise UsageError(str(exc)) from None
    cases = [c for c in every if c.expected != "skip"]
    return PlanOutcome(
        cases, coverage(matrix, installs), [c for c in every if c.expected == "skip"], installs
    )


def _plugin_installed() -> bool:
    """Whether pytest will load mlagate's plugin by its entry point (mlagate installed), or needs
    -p."""
    from importlib.metadata import entry_points

    return any(ep.name == "mlagate" for ep in entry_points(group="pytest11"))


def suite_file(matrix: Matrix, suite: str) -> Path:
    s = matrix.suites[suite]
    path = s.path or bundled("suites") / s.kind / f"test_{suite}.py"
    if not path.is_file():
        raise UsageError(f"{matrix.path}: suites.{suite}: no suite file {path}")
    return path


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
) -> shard.GatePlan:
    """The PR gate's jobs: per runner, correctness cases in `shards` balanced shards and the
    performance cases in one job."""
    costs = costs or shard.load_costs()
    kinds = {s: matrix.suites[s].kind for s in matrix.suites}
    plan = shard.GatePlan()
    installs = installs_for(matrix, Selection(), cache)
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


@dataclass
class RunOutcome:
    summary: results.Summary
    out: Path
    pytest_codes: dict[str, int] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return self.summary.exit_code


def set_aside(out: Path) -> Path | None:
    """Move an earlier run's results out of OUT/results/ (to OUT/previous/<time>-<random>/), so that
    a
    case this run does not finish cannot be counted with an old verdict; nothing is deleted.
    The folder is not named results/ there, so a report of OUT never reads it back."""
    earlier = out / "results"
    if not earlier.is_dir() or not any(earlier.glob("*.json")):
        return None
    (out / "previous").mkdir(parents=True, exist_ok=True)
    target = Path(
        tempfile.mkdtemp(
            prefix=time.strftime("%Y%m%dT%H%M%SZ-", time.gmtime()), dir=out / "previous"
        )
    )
    earlier.rename(target)  # over the empty folder just made: a name no other run can hold
    print(f"mlagate: earlier results in {earlier} moved to {target}", file=sys.stderr)
    return target


def run(
    matrix: Matrix,
    selection: Selection,
    profile: str,
    backend: str,
    runner: str,
    out: Path,
    workers: int = 1,
    cache: Path | None = None,
    pytest_args: list[str] | None = None,
    aa: bool = False,
    shard_spec: tuple[int, int] | None = None,
    costs: shard.Costs | None = None,
    cpu: str = "auto",
    verbose: bool = False,
    only: list[str] | None = None,
) -> RunOutcome:
    """Run the selected suites through pytest; results land in OUT/results/ as each case ends.

    The run holds OUT (mlagate.gate.outdir) from start to end: a second run on OUT is refused.

    Correctness suites run under xdist with `workers` processes; performance suites always
    run serially, after them. With shard_spec (I, N) only the cases of shard I of N run
    (mlagate.gate.shard.assign); OUT/manifest.json records what this run was asked to run. cpu pins
    the workers of serial runs to one CPU (mlagate.harness.supervisor.pinned_cpu).
    """
    try:
        pinned_cpu(cpu, under_xdist=False)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    with outdir.hold(out):
        return _run_held(
            matrix,
            selection,
            profile,
            backend,
            runner,
            out,
            workers,
            cache,
            pytest_args,
            aa,
            shard_spec,
            costs,
            cpu,
            verbose,
            only,
        )


def _run_held(
    matrix,
    selection,
    profile,
    backend,
    runner,
    out,
    workers,
    cache,
    pytest_args,
    aa,
    shard_spec,
    costs,
    cpu,
    verbose,
    only,
) -> RunOutcome:
    """mlagate run while it holds OUT; with `only` (a resume), earlier results of OUT stay."""
    outcome = plan(matrix, selection, profile, backend, runner, cache, aa)
    refuse_gaps(matrix, outcome.gaps)
    if only is None:
        set_aside(out)
    run_id = lifeline.new_run_id()
    cases = _cases_to_run(matrix, outcome, out, shard_spec, costs, only, profile, backend, runner)
    plan_file = runplan.write(
        out, runplan.RunPlan(matrix, profile, backend, runner, aa, tuple(cases), outcome.installs)
    )
    machine.record(out, "start")
    follow = live.start(
        out, cases, {s: matrix.suites[s].kind for s in matrix.suites}, workers, costs, verbose
    )
    with_cases = {c.suite for c in cases}
    suites = [s for s in (selection.suites or tuple(matrix.suites)) if s in with_cases]
    codes = {}
    for kind in ("correctness", "performance"):
        chosen = [s for s in suites if matrix.suites[s].kind == kind]
        if not chosen:
            continue
        args = _pytest_command(
            matrix, chosen, kind, plan_file, out, cpu, cache, workers, pytest_args
        )
        code = follow.child(args + ["-p", "mlagate.harness.events"], _child_env(run_id), kind)
        codes[kind] = code
        if code not in (0, 1, 5):
            follow.end()
            raise UsageError(
                f"pytest stopped with exit status {code} running the {kind} suites (see "
                f"{follow.where(kind)})"
            )
    follow.end()
    machine.record(out, "end")
    wanted = {c.id for c in cases} if only is None else set(resume.planned(out))
    rows = _own_results(out, wanted, only, run_id)
    return RunOutcome(results.summarise(rows, sorted(wanted)), out, codes, follow.logs)


def _cases_to_run(
    matrix, outcome, out, shard_spec, costs, only, profile, backend, runner
) -> list[Case]:
    """The planned cases this run runs: its shard's (OUT/shard-cases.json), then the resumed
    ones; a run that is no resume records them in OUT/manifest.json."""
    cases = outcome.cases
    if shard_spec is not None:
        bounds.shards(shard_spec[1], len(outcome.cases), "--shard")
        kinds = {s: matrix.suites[s].kind for s in matrix.suites}
        cases = shard.assign(outcome.cases, shard_spec[1], kinds, costs or shard.load_costs())[
            shard_spec[0] - 1
        ]
        out.mkdir(parents=True, exist_ok=True)
        (out / "shard-cases.json").write_text(json.dumps([c.id for c in cases]))
    if only is not None:
        cases = resume.pick(cases, only, matrix)
        resume.write_cases(out, cases)
    else:
        shard.write_manifest(
            out, cases, outcome.cases, shard_spec or (1, 1), profile, backend, runner
        )
    return cases


def _pytest_command(
    matrix, chosen, kind, plan_file, out, cpu, cache, workers, pytest_args
) -> list[str]:
    """The pytest command line for the chosen suites of one kind: correctness under xdist with
    `workers` processes, performance serially."""
    args = [
        sys.executable,
        "-m",
        "pytest",
        *map(str, (suite_file(matrix, s) for s in chosen)),
        "-q",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(bundled("suites")),
        "--mlagate-plan",
        str(plan_file),
        "--mlagate-out",
        str(out),
        "--mlagate-cpu",
        cpu,
    ]
    if cache:
        args += ["--mlagate-cache", str(cache)]
    if kind == "correctness" and workers > 1:
        args += ["-n", str(workers)]
    if kind == "performance":
        args += ["-p", "no:xdist"]
    if not _plugin_installed():
        args += ["-p", "mlagate.harness.plugin"]
    args += pytest_args or []
    return args


def _child_env(run_id: str) -> dict[str, str]:
    """This environment less any pytest-xdist or current-test variable, unbuffered, with the
    run's id."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))
    }
    return {**env, "PYTHONUNBUFFERED": "1", lifeline.RUN_ENV: run_id}


def _own_results(out: Path, wanted: set[str], only, run_id: str) -> list[dict]:
    """The results of OUT this run counts: its own (a resume also the earlier results it
    keeps)."""
    return [
        r
        for r in results.load_dir(out / "results")
        if r["case_id"] in wanted and (only is not None or r.get("run_id") == run_id)
    ]
