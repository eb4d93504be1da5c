"""The bisection's document, `mlagate.bisect/1` (schemas/bisect.json, read back through
mlagate.documents), written as OUT/bisect.json, and its page OUT/bisect.html
(mlagate.report.bisectpage)."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from mlagate import documents
from mlagate.bisect import history
from mlagate.bisect.request import BisectRequest
from mlagate.bisect.run import Outcome
from mlagate.report import bisectpage

SCHEMA = "mlagate.bisect/1"
FILE, PAGE = "bisect.json", "bisect.html"


def build(req: BisectRequest, outcome: Outcome, seconds: float, kind: str) -> dict:
    subjects = {c.sha: c.subject for c in outcome.commits}
    subjects.setdefault(req.good, history.subject(req.tree, req.good))
    order = [req.good] + [c.sha for c in outcome.commits]
    culprits = []
    for sha in outcome.culprits:
        parent = order[order.index(sha) - 1]
        stat = history.diff_stat(req.tree, parent, sha, sorted(set(outcome.files.values())))
        culprits.append(
            {
                "commit": sha,
                "subject": subjects.get(sha, ""),
                "parent": parent,
                "diff_stat": stat,
                "replay": outcome.replays.get(sha, []),
            }
        )
    return {
        "schema": SCHEMA,
        "kind": kind,
        "tree": str(req.tree),
        "good": req.good,
        "bad": req.bad,
        "command": req.command,
        "cases": sorted(outcome.watched) or list(req.cases),
        "store": str(req.reuse.path),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(seconds, 1),
        "commits_in_range": len(outcome.commits),
        "status": outcome.status,
        "message": outcome.message,
        "exit_code": outcome.exit_code,
        "culprits": culprits,
        "range_left": outcome.left,
        "pairs": outcome.pairs,
        "tried": [
            {
                "commit": t.sha,
                "subject": subjects.get(t.sha, ""),
                "verdict": t.verdict,
                "seconds": round(t.seconds, 1),
                "why": t.why,
                "reused": t.reused,
                "cases": t.detail,
            }
            for t in outcome.tried
        ],
    }


def write(out: Path, doc: dict) -> tuple[Path, Path]:
    documents.validate(doc, "bisect", "the bisection's document")
    out.mkdir(parents=True, exist_ok=True)
    path = out / FILE
    fd, tmp = tempfile.mkstemp(dir=out, prefix=".", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
    os.replace(tmp, path)
    page = out / PAGE
    page.write_text(bisectpage.page(documents.load(path, "bisect")), encoding="utf-8")
    return path, page
