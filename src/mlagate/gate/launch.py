"""The one launcher of the pytest process. A hand-off (OUT/plan.json, mlagate.runplan) and
the suite files go in; pytest starts tied to this process (mlagate.lifeline) and its harness
reads the matrix, cases and arm installs from the plan alone. mlagate run (head runs and
resumes too) and mlagate mutate both start pytest here; tests/test_launch.py fails when
another place builds a pytest command line."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from mlagate import lifeline
from mlagate.errors import UsageError
from mlagate.matrix import Matrix
from mlagate.paths import bundled

OK_CODES = (0, 1, 5)  # passed, some failed, nothing collected: pytest ran to its end


def suite_file(matrix: Matrix, suite: str) -> Path:
    path = matrix.suites[suite].file
    if not path.is_file():
        raise UsageError(f"{matrix.path}: suites.{suite}: no suite file {path}")
    return path


def plugin_installed() -> bool:
    """Whether pytest loads mlagate's plugin by its entry point (mlagate installed), or needs
    -p."""
    from importlib.metadata import entry_points

    return any(ep.name == "mlagate" for ep in entry_points(group="pytest11"))


@dataclass(frozen=True)
class Launch:
    """One pytest process over a hand-off: the suite files it collects, where its results go,
    and how it runs (under xdist with `workers` processes, or serially)."""

    plan: Path
    suites: tuple[Path, ...]
    out: Path
    run_id: str
    cpu: str = "auto"
    cache: Path | None = None
    workers: int = 1
    serial: bool = False  # performance suites: xdist off altogether
    pytest_args: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        args = [sys.executable, "-m", "pytest", *map(str, self.suites)]
        args += ["-q", "-p", "no:cacheprovider", "--rootdir", str(bundled("suites"))]
        args += ["--mlagate-handoff", str(self.plan), "--mlagate-out", str(self.out)]
        args += ["--mlagate-cpu", self.cpu]
        if self.cache:
            args += ["--mlagate-cache", str(self.cache)]
        if self.serial:
            args += ["-p", "no:xdist"]
        elif self.workers > 1:
            args += ["-n", str(self.workers)]
        if not plugin_installed():
            args += ["-p", "mlagate.harness.plugin"]
        return [*args, *self.pytest_args, "-p", "mlagate.harness.events"]

    def env(self) -> dict[str, str]:
        """This environment less any pytest-xdist or current-test variable, unbuffered, with the
        run's id."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))
        }
        return {**env, "PYTHONUNBUFFERED": "1", lifeline.RUN_ENV: self.run_id}

    def start(self, log: IO[str] | None) -> subprocess.Popen:
        """pytest in a session of its own, dying with this process; its output to log (None:
        this terminal)."""
        stderr = subprocess.STDOUT if log is not None else None
        return lifeline.popen(self.argv(), self.env(), stdout=log, stderr=stderr)


def call(launch: Launch, log: Path) -> int:
    """Run pytest to its end, its output in log; on any exception here, kill it with its
    workers."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w", encoding="utf-8") as fh:
        proc = launch.start(fh)
        try:
            return proc.wait()
        except BaseException:
            lifeline.kill(proc)
            raise
