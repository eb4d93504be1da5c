"""What one pytest process knows about the run: the matrix (or the run plan), the profile, the
runner and backend, the selected cases, the arm installs and the pool of workers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mlagate import arms as arms_mod
from mlagate import backends, runplan
from mlagate.harness.supervisor import WorkerPool, pinned_cpu
from mlagate.matrix import Matrix, MatrixError, Profile
from mlagate.matrix import default_path as default_matrix
from mlagate.matrix import load as load_matrix
from mlagate.plan import Case, PlanError, Selection, expand


class Context:
    """What one pytest process knows about the matrix and its workers."""

    def __init__(self, config):
        opt = config.getoption
        self._installs = None
        self._pool = None
        self.planned: dict[str, list[Case]] | None = None
        self.out = Path(opt("--mlagate-out"))
        self.cache = Path(opt("--mlagate-cache")) if opt("--mlagate-cache") else None
        try:
            self.cpu = pinned_cpu(
                opt("--mlagate-cpu"), under_xdist="PYTEST_XDIST_WORKER" in os.environ
            )
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        if opt("--mlagate-plan"):
            self._from_plan(opt("--mlagate-plan"))
            return
        path = opt("--mlagate-matrix") or default_matrix()
        try:
            self.matrix: Matrix = load_matrix(path)
        except MatrixError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.profile_name = opt("--mlagate-profile")
        if self.profile_name not in self.matrix.profiles:
            raise pytest.UsageError(f"--mlagate-profile: unknown profile {self.profile_name!r}")
        self.profile: Profile = self.matrix.profiles[self.profile_name]
        try:
            self.runner, self.backend = backends.resolve(
                self.matrix, opt("--mlagate-runner"), opt("--mlagate-backend")
            )
        except backends.BackendError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.aa = bool(opt("--mlagate-aa"))
        self.only = None
        if opt("--mlagate-cases"):
            try:
                self.only = frozenset(
                    json.loads(Path(opt("--mlagate-cases")).read_text(encoding="utf-8"))
                )
            except (OSError, ValueError, TypeError) as exc:
                raise pytest.UsageError(
                    f"--mlagate-cases: {opt('--mlagate-cases')}: not a readable JSON list of case "
                    f"ids ({exc})"
                ) from None
        self.selection = Selection(
            modules=tuple(opt("--mlagate-module")), arms=tuple(opt("--mlagate-arm"))
        )
        try:
            self.selection.check(self.matrix)
        except PlanError as exc:
            raise pytest.UsageError(str(exc)) from None

    def _from_plan(self, path: str) -> None:
        """Everything mlagate run decided: no matrix is read, no case expanded, no arm resolved
        here."""
        try:
            plan = runplan.read(Path(path))
        except runplan.RunPlanError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.matrix, self.profile_name, self.backend, self.runner, self.aa = (
            plan.matrix,
            plan.profile,
            plan.backend,
            plan.runner,
            plan.aa,
        )
        self.profile = self.matrix.profiles[self.profile_name]
        self._installs = plan.installs
        self.planned = {}
        for case in plan.cases:
            self.planned.setdefault(case.suite, []).append(case)
        self.only, self.selection = None, Selection()

    @property
    def installs(self):
        if self._installs is None:
            wanted = {
                a.id
                for m in self.matrix.modules.values()
                for a in self.matrix.arms_for(m)
                if not self.selection.arms or a.id in self.selection.arms
            }
            wanted = sorted(
                wanted
                | {self.matrix.arms[a].baseline for a in wanted if self.matrix.arms[a].baseline}
            )
            try:
                self._installs = arms_mod.materialise_all(self.matrix, wanted, self.cache)
            except arms_mod.ArmError as exc:
                raise pytest.UsageError(str(exc)) from None
        return self._installs

    @property
    def pool(self) -> WorkerPool:
        if self._pool is None:
            self._pool = WorkerPool(self.installs, log_dir=self.out / "logs", cpu=self.cpu)
        return self._pool

    def cases(self, suite: str) -> list[Case]:
        if self.planned is not None:
            return self.planned.get(suite, [])
        if suite not in self.matrix.suites:
            raise pytest.UsageError(
                f"suite {suite!r} is not declared in {self.matrix.path} (suites: "
                f"{', '.join(self.matrix.suites)})"
            )
        sel = Selection((suite,), self.selection.modules, self.selection.arms)
        cases = expand(
            self.matrix, sel, self.profile_name, self.backend, self.runner, self.installs, self.aa
        )
        return cases if self.only is None else [c for c in cases if c.id in self.only]
