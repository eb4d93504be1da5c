"""Performance bisection (l1_parity, marginal_cost, speculative, crossover): noise-aware,
through the suites' own statistics, none of its own.

A suite with a baseline (l1_parity) compares two commits: one run of the suite with the later
commit as the arm `head` and the earlier as its `base` (mlagate.bisect.measure). Its rule is
one-sided (fail: head slower beyond the tolerance; pass: not slower, a faster head included), so
the direction matters: the later commit is always head. The ends are confirmed first (bad
against good must fail, else it stops: the regression does not reproduce on this runner); each
midpoint is compared with both ends of its range, the midpoint against the good end and the
bad end against the midpoint (`midpoint`). Each culprit is re-checked against its parent,
measured fresh (never from the store).

A suite that is its own bound (marginal_cost, speculative, crossover: a case judged against its
bound, not against base) is measured once per commit as its own base and bisected on its
verdicts as a correctness case is (mlagate.bisect.run); the culprit and its parent are then
measured fresh: confirmed when the culprit still fails and its parent still passes."""

from __future__ import annotations

import sys
import time

from mlagate.bisect import history, measure
from mlagate.bisect import run as bisecting
from mlagate.bisect.request import BisectRequest
from mlagate.bisect.run import FOUND, LEFT, SAME, UNMEASURED, Outcome
from mlagate.bisect.search import BAD, GOOD, SKIPPED, Tried

SAME_, DIFFERS, UNDECIDED = "same", "differs", "undecided"
BOTH = "differs from both"


class Limit(Exception):
    """--max-commits or --budget-s reached: the range left is in the message."""


def state(m: measure.Measured) -> tuple[str, dict]:
    """same (every case passed), differs (one failed), undecided; with each case's intervals."""
    seen, states = {}, []
    for cid, row in m.rows.items():
        l1 = (row.get("metrics") or {}).get("l1") or {}
        seen[cid] = {
            "verdict": row["verdict"],
            "interval": [
                f"T={t}: {r['ci'][0]:+.1%}..{r['ci'][1]:+.1%}" for t, r in l1.items() if r.get("ci")
            ],  # fmt: skip
            "replay": row.get("replay") or "",
        }
        states.append(row["verdict"])
    if m.problem or not states:
        return UNDECIDED, seen
    if "fail" in states:
        return DIFFERS, seen
    return (SAME_ if all(v == "pass" for v in states) else UNDECIDED), seen


def midpoint(vs_good: str, vs_bad: str) -> str:
    """A midpoint's verdict. vs_good: the midpoint (head) against the good side (base), differs
    = slower than it; vs_bad: the bad side (head) against the midpoint (base), differs = the bad
    side slower than it. Slower than good: bad (a culprit at or before it), unless the bad side
    is slower than it too: two culprits; the bad side slower than it and the midpoint not slower
    than good, or undecided against it: good (a culprit after it); else (neither slower) skipped.
    One decisive comparison decides: the other, undecided, only leaves a second culprit on its
    side unsearched, and the culprit found is re-checked against its parent."""
    if vs_good == DIFFERS:
        return BOTH if vs_bad == DIFFERS else BAD
    return GOOD if vs_bad == DIFFERS else SKIPPED


def paired(req: BisectRequest) -> bool:
    """Whether the selection's suites compare head with base (a `baseline` suite) rather than
    each case with its own bound; the bisect verb refuses a selection of both."""
    return all(req.matrix.suites[s].baseline for s in req.suites)


def pairs_of(m: measure.Measured) -> int:
    return sum(
        ((r.get("metrics") or {}).get("sequential") or {}).get("process_pairs", 0)
        for r in m.rows.values()
        if not r.get("reused")
    )


class Bisection:
    def __init__(self, req: BisectRequest, ids: list[str], commits: list[str]):
        self.req, self.ids, self.order = req, ids, [req.good] + commits
        self.tried: list[Tried] = []
        self.pairs = 0
        self.started = time.monotonic()
        self.culprits: list[str] = []
        self.left: list[str] = []

    def compare(
        self, head: str, base: str, fresh: bool = False
    ) -> tuple[str, dict, measure.Measured]:
        """One run of the suite: head (the later commit) against base."""
        assert self.order.index(head) > self.order.index(base), (head, base)
        m = measure.commit(self.req, head, base, self.ids, fresh)
        self.pairs += pairs_of(m)
        s, seen = state(m)
        return s, seen, m

    def _limit(self, a: int, b: int) -> None:
        r = self.req
        if r.max_commits is not None and len(self.tried) >= r.max_commits:
            why = f"--max-commits {r.max_commits} reached"
        elif r.budget_s is not None and time.monotonic() - self.started >= r.budget_s:
            why = f"--budget-s {r.budget_s:g} spent"
        else:
            return
        self.left += self.order[a + 1 : b + 1]
        raise Limit(why)

    def search(self, a: int, b: int, skipped: frozenset = frozenset()) -> None:
        """The culprit(s) in order[a+1..b]: order[a] is like good, order[b] like bad."""
        span = [i for i in range(a + 1, b) if i not in skipped]
        if not span:
            if b - a == 1 or not [i for i in range(a + 1, b)]:
                self.culprits.append(self.order[b])
            else:
                self.left += self.order[a + 1 : b + 1]
            return
        self._limit(a, b)
        middle = (a + b) / 2
        i = min(span, key=lambda k: (abs(k - middle), k))
        sha = self.order[i]
        t0 = time.monotonic()
        good, bad = self.order[a][:12], self.order[b][:12]
        va, seen_a, m = self.compare(sha, self.order[a])
        vb, seen_b, mb = self.compare(self.order[b], sha)
        verdict = midpoint(va, vb)
        detail = {f"{cid}: this vs {good}": d for cid, d in seen_a.items()}
        detail |= {f"{cid}: {bad} vs this": d for cid, d in seen_b.items()}
        why = ""
        if verdict == SKIPPED or UNDECIDED in (va, vb):
            why = f"this vs {good}: {va}; {bad} vs this: {vb}"
        if verdict in (GOOD, BAD) and why:
            why += "; a second culprit on the undecided side is not searched"
        took = time.monotonic() - t0
        t = Tried(sha, verdict, took, why, m.reused + mb.reused, detail, m.files)
        self.tried.append(t)
        print(f"bisect: {sha[:12]} {verdict} (this vs {good}: {va}, {bad} vs this: {vb}; "
              f"{t.seconds:.0f} s, {self.pairs} pairs so far)",
              file=sys.stderr, flush=True)  # fmt: skip
        if verdict == GOOD:
            self.search(i, b)
        elif verdict == BAD:
            self.search(a, i)
        elif verdict == BOTH:
            self.search(a, i)
            self.search(i, b)
        else:
            self.search(a, b, skipped | {i})

    def recheck(self) -> tuple[list[str], dict[str, list[str]], dict]:
        """Each culprit against its parent, measured fresh: confirmed when it still differs; an
        undecided re-check (a loaded machine) is measured once more, a same one is final."""
        confirmed, replays, files = [], {}, {}
        for sha in self.culprits:
            parent = self.order[self.order.index(sha) - 1]
            for attempt in (1, 2):
                t0 = time.monotonic()
                s, seen, m = self.compare(sha, parent, fresh=True)
                verdict = BAD if s == DIFFERS else SKIPPED
                why = f"re-checked against its parent {parent[:12]}, measured fresh: {s}"
                why += " (the second time)" if attempt == 2 else ""
                self.tried.append(Tried(sha, verdict, time.monotonic() - t0, why, m.reused, seen))
                if s != UNDECIDED:
                    break
            if s == DIFFERS:
                confirmed.append(sha)
                replays[sha] = [d["replay"] for d in seen.values() if d["replay"]]
                files = m.files
        return confirmed, replays, files


def run(req: BisectRequest) -> Outcome:
    return (by_pairs if paired(req) else own_bound)(req)


def by_pairs(req: BisectRequest) -> Outcome:
    commits = history.between(req.tree, req.good, req.bad)
    ids = measure.planned(req, req.bad, req.good)
    b = Bisection(req, ids, [c.sha for c in commits])
    t0 = time.monotonic()
    s, seen, m = b.compare(req.bad, req.good)
    b.tried.append(Tried(req.bad, "end", time.monotonic() - t0, "bad against good: " + s,
                         m.reused, seen, m.files))  # fmt: skip
    print(f"bisect: ends: bad against good: {s} ({b.pairs} pairs)", file=sys.stderr, flush=True)
    if s != DIFFERS:
        status = SAME if s == SAME_ else UNMEASURED
        msg = (
            f"the regression does not reproduce on this runner: bad {req.bad[:12]} against "
            f"good {req.good[:12]} is {s}" + (f" ({m.problem})" if m.problem else "")
        )
        out = Outcome(status, msg, commits, b.tried)
        out.pairs = b.pairs
        return out
    try:
        b.search(0, len(b.order) - 1)
        stopped = None
    except Limit as exc:
        stopped = str(exc)
    confirmed, replays, files = b.recheck()
    lost = [c[:12] for c in b.culprits if c not in confirmed]
    if stopped or not confirmed:
        why = stopped or "no culprit was confirmed against its parent"
        msg = f"{why}: {len(b.left)} commit(s) left undecided" + (
            f"; not confirmed: {', '.join(lost)}" if lost else ""
        )
        out = Outcome(LEFT, msg, commits, b.tried, confirmed, b.left)
    else:
        msg = f"culprit(s): {', '.join(c[:12] for c in confirmed)}" + (
            f" (not confirmed when re-checked: {', '.join(lost)})" if lost else ""
        )
        out = Outcome(FOUND, msg, commits, b.tried, confirmed)
    out.replays, out.files, out.pairs = replays, files, b.pairs
    out.watched = dict.fromkeys(ids, [])
    return out


def own_bound(req: BisectRequest) -> Outcome:
    """Each commit measured once as its own base (mlagate.bisect.run), then the culprit and its
    parent measured fresh."""
    out = bisecting.run(req)
    if out.status != FOUND:
        return out
    culprit = out.culprits[0]
    order = [req.good] + [c.sha for c in out.commits]
    parent = order[order.index(culprit) - 1]
    t0 = time.monotonic()
    now = measure.commit(req, culprit, culprit, list(out.watched), fresh=True)
    before = measure.commit(req, parent, parent, list(out.watched), fresh=True)
    got = bisecting.classify(now, out.watched).verdict
    was = bisecting.classify(before, out.watched).verdict
    detail = {f"{cid}: this": d for cid, d in bisecting.seen(now, list(out.watched)).items()}
    detail |= {
        f"{cid}: {parent[:12]}": d for cid, d in bisecting.seen(before, list(out.watched)).items()
    }
    why = f"re-checked with its parent {parent[:12]}, measured fresh: this {got}, parent {was}"
    confirmed = got == BAD and was == GOOD
    out.tried.append(
        Tried(culprit, BAD if confirmed else SKIPPED, time.monotonic() - t0, why,
              now.reused + before.reused, detail, now.files)
    )  # fmt: skip
    print(f"bisect: {culprit[:12]} {why}", file=sys.stderr, flush=True)
    if not confirmed:
        out.status, out.left, out.culprits, out.replays = LEFT, [culprit], [], {}
        out.message = f"no culprit was confirmed: {culprit[:12]} {why}"
    return out
