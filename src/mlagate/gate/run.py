"""Plain functions behind the CLI: plan, check arms, run suites. Each returns a result object."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from mlagate import lifeline, results, runplan
from mlagate.errors import UsageError  # noqa: F401 (raised here, caught by the CLI as execute.UsageError)
from mlagate.gate import bounds, launch, live, outdir, resume, shard
from mlagate.gate.launch import suite_file
from mlagate.gate.planning import (  # noqa: F401 (planning, re-exported for the CLI and tests)
    PlanOutcome,
    check_modules,
    gate_plan,
    installs_for,
    plan,
    refuse_gaps,
)
from mlagate.gate.request import RunRequest
from mlagate.gate.reuse import apply, calibrated
from mlagate.harness.supervisor import pinned_cpu
from mlagate.plan import Case
from mlagate.worker import machine


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


def run(request: RunRequest) -> RunOutcome:
    """Run the selected suites through pytest; results land in OUT/results/ as each case ends.

    The run holds OUT (mlagate.gate.outdir) from start to end: a second run on OUT is refused.

    Correctness suites run under xdist with `workers` processes; performance suites always
    run serially, after them. With a shard (I of N) only the cases of shard I run
    (mlagate.gate.shard.assign); OUT/manifest.json records what this run was asked to run. cpu pins
    the workers of serial runs to one CPU (mlagate.harness.supervisor.pinned_cpu). With reuse
    (a result store) a case whose key has a decisive stored result is not measured
    (mlagate.gate.reuse); this run's decisive results are stored there unless read-only.
    """
    try:
        pinned_cpu(request.cpu, under_xdist=False)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    with outdir.hold(request.out):
        return _run_held(request)


def _run_held(req: RunRequest) -> RunOutcome:
    """mlagate run while it holds OUT; a resume (`only`) keeps the earlier results of OUT."""
    m, out = req.matrix, req.out
    outcome = plan(m, req.selection, req.profile, req.backend, req.runner, req.cache, req.aa)
    refuse_gaps(m, outcome.gaps)
    if req.only is None:
        set_aside(out)
    run_id = lifeline.new_run_id()
    planned = _cases_to_run(req, outcome)
    cases, reusing = planned, None
    if req.reuse is not None:
        r = req.reuse
        mc = (req.machine or {}).get("machine_class") or {}
        cases, reusing = apply.split(
            m, outcome.installs, req.backend, planned, r.path, out, run_id, r.read, r.write,
            r.into, mc.get("id"),
        )  # fmt: skip
    bounds = reusing.calibrated if reusing else calibrated.overlay(m, req.backend, None, None)
    plan_file = runplan.write(
        out,
        runplan.HandOff(
            bounds.matrix,
            req.profile,
            req.backend,
            req.runner,
            req.aa,
            tuple(cases),
            outcome.installs,
            bounds.tolerance_from,
        ),  # fmt: skip
    )
    started = machine.record(out, "start")
    kinds = {s: m.suites[s].kind for s in m.suites}
    follow = live.start(out, cases, kinds, req.workers, req.costs, req.verbose)
    with_cases = {c.suite for c in cases}
    suites = [s for s in (req.selection.suites or tuple(m.suites)) if s in with_cases]
    codes = {}
    for kind in ("correctness", "performance"):
        chosen = [s for s in suites if kinds[s] == kind]
        if not chosen:
            continue
        code = follow.child(_launch(req, chosen, plan_file, run_id).start, kind)
        codes[kind] = code
        if code not in launch.OK_CODES:
            follow.end()
            raise UsageError(
                f"pytest stopped with exit status {code} running the {kind} suites (see "
                f"{follow.where(kind)})"
            )
    follow.end()
    machine.record(out, "end", started)
    wanted = {c.id for c in planned} if req.only is None else set(resume.planned(out))
    rows = _own_results(out, wanted, req.only is not None, run_id)
    if reusing is not None:
        apply.keep(reusing, rows, planned)
    return RunOutcome(results.summarise(rows, sorted(wanted)), out, codes, follow.logs)


def _launch(req: RunRequest, chosen: list[str], plan_file: Path, run_id: str) -> launch.Launch:
    """The pytest process for the chosen suites of one kind: correctness under xdist with
    `workers` processes, performance serially."""
    serial = req.matrix.suites[chosen[0]].kind == "performance"
    return launch.Launch(
        plan_file,
        tuple(suite_file(req.matrix, s) for s in chosen),
        req.out,
        run_id,
        cpu=req.cpu,
        cache=req.cache,
        workers=req.workers,
        serial=serial,
        pytest_args=req.pytest_args,
    )


def _cases_to_run(req: RunRequest, outcome: PlanOutcome) -> list[Case]:
    """The planned cases this run runs: its shard's (OUT/shard-cases.json), then the resumed
    ones; a run that is no resume records them in OUT/manifest.json."""
    cases, out = outcome.cases, req.out
    if req.cases is not None:
        cases = [c for c in cases if c.id in req.cases]
    if req.shard is not None:
        bounds.shards(req.shard.count, len(outcome.cases), "--shard")
        kinds = {s: req.matrix.suites[s].kind for s in req.matrix.suites}
        costs = req.costs or shard.load_costs()
        cases = shard.assign(outcome.cases, req.shard.count, kinds, costs)[req.shard.index - 1]
        out.mkdir(parents=True, exist_ok=True)
        (out / "shard-cases.json").write_text(json.dumps([c.id for c in cases]))
    if req.only is not None:
        cases = resume.pick(cases, list(req.only), req.matrix)
        resume.write_cases(out, cases)
    else:
        spec = (req.shard.index, req.shard.count) if req.shard else (1, 1)
        shard.write_manifest(out, cases, outcome.cases, spec, req.profile, req.backend, req.runner)
    return cases


def _own_results(out: Path, wanted: set[str], resumed: bool, run_id: str) -> list[dict]:
    """The results of OUT this run counts: its own (a resume also the earlier results it
    keeps)."""
    return [
        r
        for r in results.load_dir(out / "results")
        if r["case_id"] in wanted and (resumed or r.get("run_id") == run_id)
    ]
