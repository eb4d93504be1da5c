"""What one pytest process knows about the run, all of it from the hand-off (OUT/plan.json,
mlagate.runplan, named by --mlagate-handoff): the matrix, the profile, the runner and backend,
the cases and the arm installs; and the pool of workers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlagate import runplan
from mlagate.harness.supervisor import WorkerPool, pinned_cpu
from mlagate.matrix import Matrix, Profile
from mlagate.plan import Case

NO_PLAN = (
    "--mlagate-handoff: no hand-off given; suites run through mlagate run (or mlagate mutate), "
    "which writes OUT/plan.json and starts pytest on it"
)


class Context:
    """What one pytest process knows about the matrix and its workers."""

    def __init__(self, config):
        opt = config.getoption
        self._pool = None
        self.out = Path(opt("--mlagate-out"))
        self.cache = Path(opt("--mlagate-cache")) if opt("--mlagate-cache") else None
        try:
            self.cpu = pinned_cpu(
                opt("--mlagate-cpu"), under_xdist="PYTEST_XDIST_WORKER" in os.environ
            )
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        if not opt("--mlagate-handoff"):
            raise pytest.UsageError(NO_PLAN)
        try:
            plan = runplan.read(Path(opt("--mlagate-handoff")))
        except runplan.HandOffError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.matrix: Matrix = plan.matrix
        self.profile_name, self.backend, self.runner = plan.profile, plan.backend, plan.runner
        self.aa = plan.aa
        self.profile: Profile = self.matrix.profiles[self.profile_name]
        self.installs = plan.installs
        self.tolerance_from = plan.tolerance_from
        self.planned: dict[str, list[Case]] = {}
        for case in plan.cases:
            self.planned.setdefault(case.suite, []).append(case)

    @property
    def pool(self) -> WorkerPool:
        if self._pool is None:
            self._pool = WorkerPool(self.installs, log_dir=self.out / "logs", cpu=self.cpu)
        return self._pool

    def cases(self, suite: str) -> list[Case]:
        return self.planned.get(suite, [])
