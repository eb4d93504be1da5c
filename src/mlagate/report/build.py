"""`mlagate report`: load result sources, merge them, write the commit page, and add the
commit to a history. The page (mlagate.report.page) and the history (mlagate.report.history)
are rendered from the merged document only."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mlagate import documents, headrun, safefiles
from mlagate.contract import metrics
from mlagate.report import history as history_mod
from mlagate.report import mutation as killmatrix
from mlagate.report.catalogue import Catalogue
from mlagate.report.merged import (
    ReportError,
    git_commit,
    load_merged,
    load_source,
    merge,
    merge_gaps,
)
from mlagate.report.page import Outcome, write_commit
from mlagate.worker import machine


def _machine(path: Path) -> dict | None:
    """A run folder's machine record (mlagate.documents); a bad one is left out, with a
    warning (the page only shows it)."""
    try:
        return documents.load(path, "machine")
    except documents.DocumentError as exc:
        print(f"mlagate: warning: {exc}; its machine is not shown", file=sys.stderr)
        return None


def build(
    sources: list[Path],
    out: Path,
    history: Path | None = None,
    commit: str | None = None,
    rerender: bool = False,
    mutation: Path | None = None,
) -> Outcome:
    """Load, merge and render; with history, add this commit to it and rebuild the index."""
    if not sources:
        raise ReportError("report: give one or more result folders, archives or merged.json files")
    mutation_doc = killmatrix.load(mutation) if mutation is not None else None
    loaded = [(safefiles.shown(p), load_source(p)) for p in sources]
    gaps = merge_gaps(sources)
    sha, when = git_commit()
    earlier = Path(sources[0]) / "merged.json" if Path(sources[0]).is_dir() else Path(sources[0])
    if not commit and len(sources) == 1 and earlier.name == "merged.json" and earlier.exists():
        old = load_merged(earlier)  # re-rendering one earlier report: keep its commit
        commit, sha, when = old["commit"], old["commit"], old.get("commit_time")
    commit = commit or os.environ.get("GITHUB_SHA") or sha or "unknown"
    if commit != sha:
        when = None
    if not history_mod.COMMIT_ID.fullmatch(commit):
        raise ReportError(
            f"--commit: {commit[:90]!r} is not a commit id (letters, digits, . _ -, not first "
            "a '.'; at most 80)"
        )
    catalogue = Catalogue.of_sources(sources)
    shipped = Catalogue.shipped().entries
    known = {sid: e.path for sid, e in catalogue.entries.items() if sid not in shipped}
    try:  # a suite beside its matrix: its contract is known from the run's hand-off
        for name, rows in loaded:
            for r in rows:
                metrics.check(r, f"{name}: case {r['case_id'][:200]}", known)
    except metrics.MetricsError as exc:
        raise ReportError(str(exc)) from None
    merged = merge(loaded, commit, when)
    merged["suites"] = catalogue.to_json({r["suite"] for r in merged["results"]})
    if any(gaps.values()):
        merged["gaps"] = gaps
    try:
        head_run = headrun.for_report(sources, merged["results"])
    except documents.DocumentError as exc:
        raise ReportError(str(exc)) from None
    if head_run is not None:  # outcomes relative to base (mlagate.headrun)
        merged["head_run"], merged["outcomes"] = head_run, head_run["outcomes"]
    machines = [
        dict(m, source=safefiles.shown(p))
        for p in sources
        if Path(p).is_dir() and (Path(p) / machine.FILE).is_file()
        for m in [_machine(Path(p) / machine.FILE)]
        if m
    ]
    if machines:
        merged["machines"] = machines
    if mutation_doc is not None:
        merged["mutation"] = mutation_doc
    link = None
    if history is not None:
        link = history_mod.link(Path(history), Path(out))
    plot_list = write_commit(merged, Path(out), link)
    if history is not None:
        history_mod.add(Path(history), merged, rerender=rerender)
    return Outcome(Path(out), merged, plot_list, history)
