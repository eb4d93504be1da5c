"""What each case is expected to do, decided before it runs.

What the backend cannot run comes first (`backend_limits`: skip, whatever the arm). Then a
known finding in matrix.yaml's `expectations` wins (pass, fail, or skip: not planned, with its
reason; a fail names the failure kinds it fails with). Otherwise the arm's role decides: a
stock or base arm is a *control*, which must fail the suites that detect the single-query
guard (their contract's controls_fail) with one of the kinds that defect produces (its
control_kinds) and pass the others; a patched or head arm must pass. A checkpoint the
runner does not hold is argued, not measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlagate.matrix import DTYPES, Matrix
from mlagate.matrix.limits import limit_for

CONTROL_ROLES = ("stock", "base")


@dataclass(frozen=True)
class Expected:
    verdict: str  # pass, fail, argued or skip
    why: str
    control: bool = False  # a role-based expectation of failure (its pass is "lost control")
    kinds: tuple[str, ...] = ()  # verdict fail: the failure kinds that confirm it (empty: any)
    baseline: str | None = None  # a patched arm's baseline: a fail as its fail is `not fixed`


def expect(
    matrix: Matrix,
    suite: str,
    module: str,
    arm: str,
    geometry: str,
    backend: str,
    evidence: str,
    dtype: str | None = None,
) -> Expected:
    """geometry: the case's geometry id, or its checkpoint id; dtype: the case's."""
    if evidence == "argued":
        return Expected("argued", "the runner does not hold the checkpoint: argued-not-measured")
    limit = limit_for(
        matrix.backend_limits, matrix.modules[module], backend, case_dtypes(matrix, suite, dtype)
    )
    if limit is not None:
        return Expected(
            "skip",
            f"backend limit: {limit.reason}" + (f" ({limit.link})" if limit.link else ""),
        )
    for e in matrix.expectations:
        if e.matches(suite, module, arm, geometry, backend):
            return Expected(
                e.verdict,
                f"known finding: {e.reason}" + (f" ({e.link})" if e.link else ""),
                kinds=e.kinds,
            )
    role = matrix.arms[arm].role
    declared = matrix.suites[suite]
    if role in CONTROL_ROLES and declared.controls_fail:
        return Expected(
            "fail",
            f"control: a {role} arm keeps the single-query guard that {suite} detects "
            f"({' or '.join(declared.control_kinds)})",
            control=True,
            kinds=declared.control_kinds,
        )
    baseline = matrix.arms[arm].baseline
    if role == "patched" and baseline:
        return Expected("pass", f"{role} arm (baseline {baseline})", baseline=baseline)
    return Expected("pass", f"{role} arm")


def case_dtypes(matrix: Matrix, suite: str, dtype: str | None) -> set[str]:
    """The dtypes a case runs: its own and every dtype its suite's gates name as a value or in a
    list (equivalence's `dtypes`)."""
    found = {dtype} - {None}
    for value in matrix.suites[suite].gates.values():
        for v in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(v, str) and v in DTYPES:
                found.add(v)
    return found
