"""One bisection: the ends first, then the range between them (mlagate.bisect.search), each
commit measured by mlagate.bisect.measure; returns the outcome the document is written from."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from mlagate.bisect import history, measure
from mlagate.bisect.request import BisectRequest
from mlagate.bisect.search import BAD, GOOD, SKIPPED, Search, Tried, bisect
from mlagate.caseid import CaseId

FOUND, SAME, LEFT, UNMEASURED = "found", "ends do not differ", "range left", "ends not measured"
EXIT = {FOUND: 0, SAME: 1, LEFT: 3, UNMEASURED: 3}


@dataclass
class Outcome:
    status: str
    message: str
    commits: list[history.Commit]
    tried: list[Tried]
    culprits: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    watched: dict[str, list] = field(default_factory=dict)  # case id -> [good's, bad's]
    files: dict[str, str] = field(default_factory=dict)
    replays: dict[str, list[str]] = field(default_factory=dict)  # culprit -> its cases' replays
    pairs: int = 0

    @property
    def exit_code(self) -> int:
        return EXIT[self.status]


def kinds(row: dict) -> list[str]:
    failure = row.get("failure") or {}
    return sorted(set(failure.get("kinds") or [failure.get("kind")]) - {None})


def seen(m: measure.Measured, ids: list[str]) -> dict[str, dict]:
    out = {}
    for cid in ids:
        row = m.rows.get(cid)
        out[cid] = (
            {"verdict": row["verdict"], "kinds": kinds(row), "replay": row.get("replay") or ""}
            if row
            else {"verdict": None}
        )
    return out


def classify(m: measure.Measured, watched: dict[str, list]) -> Tried:
    """bad: a watched case gives the bad end's verdict (a fail with its failure kinds, or the
    pass of a fix); good: every watched case gives the good end's; else skipped with why
    (another failure, invalid, no result, not built)."""
    t = Tried(m.sha, SKIPPED, m.seconds, reused=m.reused, detail=seen(m, list(watched)))
    t.files = m.files
    if m.problem:
        t.why = m.problem
        return t
    odd, like_good = [], 0
    for cid, (was, now) in watched.items():
        got = state(m.rows.get(cid))
        if got is not None and got == now:
            t.verdict = BAD
        elif got is not None and got == was:
            like_good += 1
        else:
            row = m.rows.get(cid)
            odd.append(
                f"{cid}: " + (" ".join(got) if got else row["verdict"] if row else "no result")
            )
    if t.verdict != BAD:
        t.verdict, t.why = (GOOD, "") if like_good == len(watched) else (SKIPPED, "; ".join(odd))
    return t


def progress_line(req: BisectRequest, started: float):
    def show(s: Search, t: Tried) -> None:
        left = s.range_left()
        took = f"{t.seconds:.0f} s" + (f", {t.reused} reused" if t.reused else "")
        print(
            f"bisect: {t.sha[:12]} {t.verdict} ({took}); {len(left)} commit(s) left "
            f"[{time.monotonic() - started:.0f} s]" + (f": {t.why}" if t.why else ""),
            file=sys.stderr,
            flush=True,
        )

    return show


def state(row: dict | None) -> list[str] | None:
    """A case's verdict as bisection compares it: ["pass"], ["fail", kinds...], else None."""
    if row is None or row["verdict"] not in ("pass", "fail"):
        return None
    return ["pass"] if row["verdict"] == "pass" else ["fail", *kinds(row)]


def ends(req: BisectRequest, ids: list[str]) -> tuple[Tried, Tried, dict[str, list]]:
    """Measure the bad and the good end; the watched cases: a pass on one end and a fail on the
    other (a regression, or a fix: the good end is the older one), {case id: [good's, bad's]}."""
    bad = measure.commit(req, req.bad, req.bad, ids)
    good = measure.commit(req, req.good, req.good, ids)
    watched = {}
    for cid in ids:
        pair = [state(good.rows.get(cid)), state(bad.rows.get(cid))]
        if None not in pair and "pass" in (pair[0][0], pair[1][0]) and pair[0] != pair[1]:
            watched[cid] = pair
    shown = watched or {cid: [None, None] for cid in ids}
    tb, tg = classify(bad, shown), classify(good, shown)
    if not watched:
        tb.verdict, tg.verdict = "end", "end"
    return tg, tb, watched


def run(req: BisectRequest) -> Outcome:
    started = time.monotonic()
    commits = history.between(req.tree, req.good, req.bad)
    ids = measure.planned(req, req.bad, req.bad)
    good, bad, watched = ends(req, ids)
    tried = [good, bad]
    show = progress_line(req, started)
    for t in tried:
        print(f"bisect: end {t.sha[:12]}: {describe(t.detail)}", file=sys.stderr, flush=True)
    if not watched:
        status = UNMEASURED if _unmeasured(good, bad) else SAME
        msg = (
            ("an end could not be measured" if status == UNMEASURED else "the ends do not differ")
            + f": good {req.good[:12]}: {describe(good.detail)}; bad "
            f"{req.bad[:12]}: {describe(bad.detail)}"
            + (f" ({bad.why or good.why})" if _unmeasured(good, bad) else "")
        )
        return Outcome(status, msg, commits, tried)
    shas = [c.sha for c in commits]

    def judge(sha: str) -> Tried:
        return classify(measure.commit(req, sha, sha, ids), watched)

    s, more = bisect(shas, judge, req.max_commits, req.budget_s, 2, started, show)
    tried += more
    return conclude(req, s, commits, tried, watched)


def _unmeasured(good: Tried, bad: Tried) -> bool:
    return any(d["verdict"] in (None, "invalid") for t in (good, bad) for d in t.detail.values())


def describe(detail: dict) -> str:
    return (
        ", ".join(
            f"{CaseId.parse(cid).suite} {d['verdict'] or 'no result'}"
            + (f" ({', '.join(d['kinds'])})" if d.get("kinds") else "")
            for cid, d in detail.items()
        )
        or "no case"
    )


def conclude(req, s: Search, commits, tried, watched) -> Outcome:
    left = s.range_left()
    if len(left) == 1:
        culprit = left[0]
        out = Outcome(FOUND, f"first bad commit: {culprit[:12]}", commits, tried, [culprit])
        at = next(t for t in tried if t.sha == culprit)
        out.replays[culprit] = [d["replay"] for d in at.detail.values() if d.get("replay")]
        out.files = at.files
    else:
        why = s.stopped or "every commit between them was skipped"
        msg = (
            f"{why}: the first bad commit is one of {len(left)}, after {_name(s, commits)} up "
            f"to {left[-1][:12]}"
        )
        out = Outcome(LEFT, msg, commits, tried, left=left)
    out.watched = watched
    return out


def _name(s: Search, commits) -> str:
    return commits[s.lo].sha[:12] if s.lo >= 0 else "the good end"
