"""Plain functions behind the CLI: plan, check arms, run suites. Each returns a result object."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from mlagate import lifeline, results, runplan
from mlagate.gate import bounds, live, outdir, resume, shard
from mlagate.gate.errors import UsageError  # noqa: F401 (raised here, caught by the CLI as execute.UsageError)
from mlagate.gate.planning import (  # noqa: F401 (planning, re-exported for the CLI and tests)
    PlanOutcome,
    check_modules,
    gate_plan,
    installs_for,
    plan,
    refuse_gaps,
)
from mlagate.gate.reuse import apply
from mlagate.harness.supervisor import pinned_cpu
from mlagate.matrix import Matrix, bundled
from mlagate.plan import Case, Selection
from mlagate.worker import machine


def _plugin_installed() -> bool:
    """Whether pytest will load mlagate's plugin by its entry point (mlagate installed), or needs
    -p."""
    from importlib.metadata import entry_points

    return any(ep.name == "mlagate" for ep in entry_points(group="pytest11"))


def suite_file(matrix: Matrix, suite: str) -> Path:
    path = matrix.suites[suite].file
    if not path.is_file():
        raise UsageError(f"{matrix.path}: suites.{suite}: no suite file {path}")
    return path


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
    reuse: Path | None = None,
    reuse_mode: tuple[bool, bool] = (True, True),
) -> RunOutcome:
    """Run the selected suites through pytest; results land in OUT/results/ as each case ends.

    The run holds OUT (mlagate.gate.outdir) from start to end: a second run on OUT is refused.

    Correctness suites run under xdist with `workers` processes; performance suites always
    run serially, after them. With shard_spec (I, N) only the cases of shard I of N run
    (mlagate.gate.shard.assign); OUT/manifest.json records what this run was asked to run. cpu pins
    the workers of serial runs to one CPU (mlagate.harness.supervisor.pinned_cpu). With reuse
    (a result store folder) a case whose key has a decisive stored result is not measured
    (mlagate.gate.reuse); this run's decisive results are stored there. reuse_mode: whether
    the store is read (not with --no-reuse) and written (not with --reuse-read-only).
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
            (reuse, *reuse_mode),
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
    reuse=(None, True, True),
) -> RunOutcome:
    """mlagate run while it holds OUT; with `only` (a resume), earlier results of OUT stay."""
    outcome = plan(matrix, selection, profile, backend, runner, cache, aa)
    refuse_gaps(matrix, outcome.gaps)
    if only is None:
        set_aside(out)
    run_id = lifeline.new_run_id()
    planned = _cases_to_run(matrix, outcome, out, shard_spec, costs, only, profile, backend, runner)
    cases, reusing = planned, None
    if reuse[0] is not None:
        cases, reusing = apply.split(
            matrix, outcome.installs, backend, planned, reuse[0], out, run_id, *reuse[1:]
        )
    plan_file = runplan.write(
        out, runplan.RunPlan(matrix, profile, backend, runner, aa, tuple(cases), outcome.installs)
    )
    started = machine.record(out, "start")
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
    machine.record(out, "end", started)
    wanted = {c.id for c in planned} if only is None else set(resume.planned(out))
    rows = _own_results(out, wanted, only, run_id)
    if reusing is not None:
        apply.keep(reusing, rows, planned)
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
