"""What each case is expected to do, decided before it runs.

A known finding in matrix.yaml's `expectations` wins (pass, fail, or skip: not planned, with its
reason; a fail names the failure kinds it fails with). Otherwise the arm's role decides: a
stock or base arm is a *control*, which must fail the suites that detect the single-query
guard (their contract's controls_fail) with one of the kinds that defect produces (its
control_kinds) and pass the others; a patched or head arm must pass. A checkpoint the
runner does not hold is argued, not measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlagate.matrix import Matrix

CONTROL_ROLES = ("stock", "base")


@dataclass(frozen=True)
class Expected:
    verdict: str  # pass, fail, argued or skip
    why: str
    control: bool = False  # a role-based expectation of failure (its pass is "lost control")
    kinds: tuple[str, ...] = ()  # verdict fail: the failure kinds that confirm it (empty: any)


def expect(
    matrix: Matrix, suite: str, module: str, arm: str, geometry: str, backend: str, evidence: str
) -> Expected:
    """geometry: the case's geometry id, or its checkpoint id."""
    if evidence == "argued":
        return Expected("argued", "the runner does not hold the checkpoint: argued-not-measured")
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
    return Expected("pass", f"{role} arm")
