"""One repro: a request in (the case, its configuration, where to write, whether to run), a
result out (the files written, whether it reproduces, whether that is what the matrix
expects)."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mlagate import armsources
from mlagate.arm import arms
from mlagate.caseid import CaseId, CaseIdError
from mlagate.errors import UsageError
from mlagate.matrix import Matrix
from mlagate.repro import env, findings, writing
from mlagate.verdict.expectations import expect


@dataclass(frozen=True)
class ReproRequest:
    matrix: Matrix
    case: str  # a case id, suite::module::arm::geometry::dtype::backend
    out: Path
    profile: str = "quick"
    config: str | None = None
    run: bool = True
    venv: Path | None = None  # reuse (or make) the environment there; None: a fresh one


@dataclass(frozen=True)
class ReproResult:
    finding: findings.Finding
    case: str
    script: Path
    issue: Path
    expected: bool | None  # the matrix says it holds here; None: declared for every module
    run: env.Run | None

    @property
    def reproduced(self) -> bool | None:
        return None if self.run is None else self.run.reproduced

    def line(self) -> str:
        said = {True: "reproduces", False: "does not reproduce", None: "could not run"}
        wanted = {
            True: "expected",
            False: "not expected here",
            None: "declared for every module of the suite: the runtime decides",
        }[self.expected]
        got = "not run" if self.run is None else said[self.reproduced]
        return f"{self.finding.name} on {self.case}: {got} ({wanted}); {self.script}"

    @property
    def exit_code(self) -> int:
        if self.run is None:
            return 0
        if self.reproduced is None:
            return 3
        return 0 if self.expected in (None, self.reproduced) else 1


def _case(matrix: Matrix, text: str) -> CaseId:
    try:
        cid = CaseId.parse(text, "CASE")
    except CaseIdError as exc:
        raise UsageError(str(exc)) from None
    for what, key, table in (
        ("suite", cid.suite, matrix.suites),
        ("module", cid.module, matrix.modules),
        ("arm", cid.arm, matrix.arms),
        ("geometry", cid.geometry, matrix.geometries),
    ):
        if key not in table:
            raise UsageError(f"CASE: {what} {key!r} is not in {matrix.path}")
    if cid.geometry not in matrix.modules[cid.module].geometries:
        raise UsageError(f"CASE: geometry {cid.geometry!r} is not one of {cid.module}'s")
    return cid


def _holds(finding: findings.Finding, cid: CaseId, expected, declared: list) -> bool | None:
    """True where an expectation of the case names the finding's kinds, the finding holds on
    the case's backend and arm (a backend's, with no expectation) or an `unservable`
    declaration naming the case's module shows it; None where only declarations for every
    module of the suite do (whether this module is one the runtime decides)."""
    if expected.verdict == "fail" and set(finding.kinds) & set(expected.kinds):
        return True
    if finding.holds_on(cid.backend, cid.arm):
        return True
    shown = [u for u in declared if u.finding in finding.unservable]
    if any(u.modules for u in shown):
        return True
    return None if shown else False


def repro(req: ReproRequest) -> ReproResult:
    m = req.matrix
    cid = _case(m, req.case)
    expected = expect(
        m, cid.suite, cid.module, cid.arm, cid.geometry, cid.backend, "synthetic", cid.dtype
    )
    declared = [u for u in m.unservable if u.holds_for(cid.suite, cid.module, cid.arm, cid.backend)]
    finding = findings.for_case(
        cid.suite, req.config, expected.kinds, {u.finding for u in declared}
    )
    if finding is None:
        known = ", ".join(findings.configs(cid.suite)) or "none"
        raise UsageError(
            f"--config: {req.config or '(none given)'} names no finding of {cid.suite} for this "
            f"case (its configurations with a repro: {known})"
        )
    holds = _holds(finding, cid, expected, declared)
    arm = m.arms[cid.arm]
    runtime = m.runtimes[arm.runtime]
    requirement = armsources.KINDS[arm.source.kind].requirement(
        arm.source.spec, arm.source.ref, runtime.distribution
    )
    case = writing.case_of(m, cid, req.profile, finding)
    mlx = env.mlx_requirement(cid.backend)
    made = writing.script(case, finding, requirement, mlx)
    req.out.mkdir(parents=True, exist_ok=True)
    script = req.out / f"repro_{finding.name}.py"
    script.write_text(made.text, encoding="utf-8")
    (req.out / "case.json").write_text(json.dumps(case, indent=1, sort_keys=True) + "\n")
    run = None
    if req.run:
        install = arms.materialise(arm, runtime)
        where = req.venv or Path(tempfile.mkdtemp(prefix="venv-", dir=req.out))
        try:
            python = env.make(where, requirement, runtime.distribution, install.site, mlx)
            run = env.run(python, script)
        except env.EnvError as exc:
            run = env.Run(3, f"the environment could not be made: {exc}")
        (req.out / "output.txt").write_text(run.output + "\n", encoding="utf-8")
    issue = req.out / "issue.md"
    issue.write_text(writing.issue(finding, case, run, script.name, made.text), encoding="utf-8")
    return ReproResult(finding, str(cid), script, issue, holds, run)
