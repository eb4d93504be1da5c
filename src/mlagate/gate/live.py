"""The pytest children of mlagate run, followed from outside with live progress.

Quiet by default: a child's output (tracebacks included) goes to OUT/logs/pytest-<kind>.log and
the terminal shows progress (mlagate.gate.progress). verbose streams the child's output instead.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO

from mlagate import lifeline
from mlagate.gate import progress, shard
from mlagate.harness import events
from mlagate.plan import Case


class Follow:
    def __init__(self, out: Path, state: progress.State, view, verbose: bool):
        self.out, self.state, self.view, self.verbose = out, state, view, verbose
        self.follower = progress.Follower(out, set(state.estimates))
        self.logs: dict[str, Path] = {}
        self.ended = False

    def where(self, kind: str) -> str:
        log = self.logs.get(kind)
        return str(log) if log else "its output above"

    def child(self, start: Callable[[IO[str] | None], subprocess.Popen], kind: str) -> int:
        """Run one pytest child (start: mlagate.gate.launch.Launch.start) to its end, updating
        the view as results land."""
        fh = None
        if not self.verbose:
            log = self.out / "logs" / f"pytest-{kind}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            self.logs[kind] = log
            fh = open(log, "w", encoding="utf-8")  # noqa: SIM115  (closed below)
        try:
            proc = start(fh)
            try:
                while True:
                    try:
                        code = proc.wait(timeout=0.25)
                    except subprocess.TimeoutExpired:
                        code = None
                    self.view.update(self.state, self.follower.poll(self.state))
                    if code is not None:
                        return code
            except BaseException:
                lifeline.kill(proc)  # pytest and its xdist workers go with mlagate run
                self.end()
                raise
        finally:
            if fh is not None:
                fh.close()

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self.view.update(self.state, self.follower.poll(self.state))
            self.view.end(self.state)


def _what(cases: list[Case], kinds: dict[str, str], workers: int) -> str:
    corr = sum(1 for c in cases if kinds[c.suite] == "correctness")
    perf = len(cases) - corr
    parts = []
    if corr:
        parts.append(f"{corr} correctness on {workers} worker{'s' if workers > 1 else ''}")
    if perf:
        parts.append(f"{perf} performance serially")
    return f"running {len(cases)} cases ({', '.join(parts) or 'none'})"


def start(
    out: Path,
    cases: list[Case],
    kinds: dict[str, str],
    workers: int,
    costs: shard.Costs | None = None,
    verbose: bool = False,
) -> Follow:
    costs = costs or shard.load_costs()
    shutil.rmtree(Path(out) / events.EVENTS, ignore_errors=True)
    estimates = {c.id: costs.of(c) for c in cases}
    parallel = {c.id: (workers if kinds[c.suite] == "correctness" else 1) for c in cases}
    state = progress.State(len(cases), estimates, parallel)
    view = progress.view(verbose)
    follow = Follow(Path(out), state, view, verbose)
    view.begin(state, _what(cases, kinds, workers))
    return follow
