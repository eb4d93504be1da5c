"""The bisection over a commit range: each commit tried is bad, good or skipped; skipped ones
are gone around (the next nearest to the middle is tried). Pure: `judge` measures a commit."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

BAD, GOOD, SKIPPED = "bad", "good", "skipped"


@dataclass
class Tried:
    sha: str
    verdict: str  # bad, good, skipped (performance: also "differs from both")
    seconds: float
    why: str = ""  # a skipped commit's reason; what was seen on each case
    reused: int = 0
    detail: dict = field(default_factory=dict)  # per case: verdict, failure kinds, intervals
    files: dict = field(default_factory=dict)  # module id -> its file in the commit's tree


@dataclass
class Search:
    """commits: the range after good, bad last. lo: index of the last commit known good (-1: the
    good end), hi: of the first known bad. left: why the search stopped before one commit."""

    commits: list[str]
    lo: int = -1
    hi: int = -1
    skipped: set[int] = field(default_factory=set)
    stopped: str | None = None

    def __post_init__(self) -> None:
        self.hi = len(self.commits) - 1

    def candidates(self) -> list[int]:
        return [i for i in range(self.lo + 1, self.hi) if i not in self.skipped]

    def next(self) -> int | None:
        """The untried commit nearest the middle of the range left (None: nothing left)."""
        middle = (self.lo + self.hi) / 2
        return min(self.candidates(), key=lambda i: (abs(i - middle), i), default=None)

    def mark(self, i: int, verdict: str) -> None:
        if verdict == BAD:
            self.hi = i
        elif verdict == GOOD:
            self.lo = i
        else:
            self.skipped.add(i)

    def range_left(self) -> list[str]:
        """The commits one of which is the first bad: after the last good up to the first bad."""
        return self.commits[self.lo + 1 : self.hi + 1]


def bisect(
    commits: list[str],
    judge: Callable[[str], Tried],
    max_commits: int | None,
    budget_s: float | None,
    tried_already: int,
    started: float,
    progress: Callable[[Search, Tried], None],
) -> tuple[Search, list[Tried]]:
    """Bisect commits (good end excluded, bad end last, both ends already judged: tried_already
    of them) until one commit is left or a limit is reached."""
    s = Search(list(commits))
    tried: list[Tried] = []
    while True:
        i = s.next()
        if i is None:
            return s, tried
        if max_commits is not None and tried_already + len(tried) >= max_commits:
            s.stopped = f"--max-commits {max_commits} reached"
            return s, tried
        if budget_s is not None and time.monotonic() - started >= budget_s:
            s.stopped = f"--budget-s {budget_s:g} spent"
            return s, tried
        t = judge(commits[i])
        tried.append(t)
        s.mark(i, t.verdict)
        progress(s, t)
