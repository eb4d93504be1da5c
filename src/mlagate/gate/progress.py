"""Live progress of mlagate run: cases done of total, counts per verdict, the case on each worker,
elapsed and estimated time left. rich draws it on a terminal; plain lines otherwise (or CI=true).

The parent follows the pytest child from outside: results land in OUT/results/ as each case
ends, and OUT/.events/ names the case each worker runs now (mlagate.harness.events).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from mlagate import documents
from mlagate.contract import metrics
from mlagate.gate.planning import clock  # noqa: F401 (one clock format for every verb)
from mlagate.harness import events

WORDS = (
    ("pass", "passed"),
    ("fail", "failed"),
    ("invalid", "invalid"),
    ("argued", "argued-not-measured"),
)


def counts_text(counts: dict[str, int]) -> str:
    """The one vocabulary for counts, as in the verdict table's footer."""
    return ", ".join(f"{counts.get(v, 0)} {word}" for v, word in WORDS)


def plain_wanted(stream=None) -> bool:
    """Plain lines when the stream is not a terminal or under CI."""
    stream = stream or sys.stdout
    ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    return ci or not (hasattr(stream, "isatty") and stream.isatty())


@dataclass
class State:
    """What the parent knows about the run: filled from the results folder and the event files."""

    total: int
    estimates: dict[str, float]
    parallel: dict[str, int]
    started: float = field(default_factory=time.time)
    done: dict[str, dict] = field(default_factory=dict)
    running: dict[str, dict] = field(default_factory=dict)

    @property
    def counts(self) -> dict[str, int]:
        c: dict[str, int] = {}
        for row in self.done.values():
            c[row["verdict"]] = c.get(row["verdict"], 0) + 1
        return c

    def remaining_s(self) -> float | None:
        """Cost-table estimate of the unfinished cases, scaled by the pace of the finished ones."""
        left = sum(
            est / self.parallel.get(cid, 1)
            for cid, est in self.estimates.items()
            if cid not in self.done
        )
        measured = [
            cid for cid, r in self.done.items() if r.get("duration_s") and cid in self.estimates
        ]
        if measured:
            spent = sum(self.done[c]["duration_s"] for c in measured)
            planned = sum(self.estimates[c] for c in measured)
            if planned > 0:
                left *= spent / planned
        return left

    def headline(self) -> str:
        left = self.remaining_s()
        tail = (
            f", about {clock(left)} left"
            if left is not None and len(self.done) < self.total
            else ""
        )
        return (
            f"{len(self.done)}/{self.total} cases: {counts_text(self.counts)}; "
            f"{clock(time.time() - self.started)} elapsed{tail}"
        )


class Follower:
    """Reads new result files (once each) and the event files of OUT."""

    def __init__(self, out: Path, wanted: set[str]):
        self.out, self.wanted = Path(out), wanted
        self.seen: dict[Path, int] = {p: p.stat().st_mtime_ns for p in self._files()}
        self.refused: set[Path] = set()  # results whose metrics break their suite's schema

    def _files(self) -> list[Path]:
        """Result files, oldest first (so that plain lines come in the order cases ended)."""
        stamped = []
        for p in (self.out / "results").glob("*.json"):
            try:
                stamped.append((p.stat().st_mtime_ns, p))
            except OSError:
                continue
        return [p for _, p in sorted(stamped)]

    def poll(self, state: State) -> list[dict]:
        new = []
        for p in self._files():
            try:
                mtime = p.stat().st_mtime_ns
            except OSError:
                continue
            if self.seen.get(p) == mtime:
                continue
            self.seen[p] = mtime
            try:
                row = documents.load(p, "result")
            except documents.DocumentError:  # being written, or not a result: not counted
                continue
            try:
                metrics.check(row, str(p))
            except metrics.MetricsError as exc:  # counted when the run reads its results
                if p not in self.refused:
                    self.refused.add(p)
                    print(f"mlagate: error: {exc}", file=sys.stderr)
                continue
            if isinstance(row, dict) and row.get("case_id") in self.wanted:
                state.done[row["case_id"]] = row
                new.append(row)
        state.running = events.current(self.out)
        return new


class PlainView:
    """One line per finished case: for logs and CI."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout

    def begin(self, state: State, what: str) -> None:
        est = state.remaining_s()
        print(
            f"mlagate: {what}" + (f"; estimated {clock(est)}" if est else ""),
            file=self.stream,
            flush=True,
        )

    def update(self, state: State, new: list[dict]) -> None:
        first = len(state.done) - len(new)
        for i, row in enumerate(new, 1):
            print(
                f"[{first + i}/{state.total}] {row['verdict']:7} {row['case_id']} "
                f"({row.get('duration_s', 0):.1f} s)",
                file=self.stream,
                flush=True,
            )

    def end(self, state: State) -> None:
        print(f"mlagate: {state.headline()}", file=self.stream, flush=True)


class LiveView:
    """A rich live display, cleared at the end (the verdict table follows it)."""

    def __init__(self, stream=None):
        from rich.console import Console

        self.console = Console(file=stream or sys.stdout)
        self.live = None

    def _render(self, state: State):
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        grid = Table.grid(padding=(0, 1))
        grid.add_row(
            ProgressBar(total=max(state.total, 1), completed=len(state.done), width=30),
            Text(state.headline()),
        )
        lines = [grid]
        now = time.time()
        for worker, ev in sorted(state.running.items()):
            lines.append(
                Text(
                    f"  {worker:5} {ev['case']} ({clock(now - ev.get('started', now))})",
                    overflow="ellipsis",
                    no_wrap=True,
                )
            )
        return Group(*lines)

    def begin(self, state: State, what: str) -> None:
        from rich.live import Live

        self.console.print(f"mlagate: {what}", highlight=False)
        self.live = Live(
            self._render(state), console=self.console, transient=True, refresh_per_second=4
        )
        self.live.start()

    def update(self, state: State, new: list[dict]) -> None:
        if self.live is not None:
            self.live.update(self._render(state))

    def end(self, state: State) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
        self.console.print(f"mlagate: {state.headline()}", highlight=False)


def view(verbose: bool = False, stream=None):
    return PlainView(stream) if verbose or plain_wanted(stream) else LiveView(stream)
