"""History: one folder per commit (merged.json + its commit page) and an index over them with
the trend of each module's key figures and a flag where a figure stepped.

    HISTORY/index.html            the index (rebuilt on every add)
    HISTORY/<commit>/merged.json  the commit's merged results (the source of truth)
    HISTORY/<commit>/figures.json its key figures, derived from merged.json (a cache,
                                  recomputed when missing, older or of another version)
    HISTORY/<commit>/index.html   its commit page, plots, junit.xml, summary.md

Steps are found by mlagate.stats.detect_steps (its docstring states the rule).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from pathlib import Path

from mlagate import documents, safefiles, stats
from mlagate.report import merged as merged_doc
from mlagate.report import page as report
from mlagate.report import plots
from mlagate.report.catalogue import Catalogue
from mlagate.verdict import outcomes

FIGURES_SCHEMA = "mlagate.figures/1"
FIGURE_MAX = 1e15  # as schemas/figures.json: no key figure is larger; a step of two stays finite
# a commit id that may become a relative link: no scheme (':'), no path ('/'), no leading '.'
COMMIT_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,79}")


def key_figures(rows: list[dict]) -> dict[str, float]:
    """Key figures of one commit's results, as the shipped suites declare them."""
    return Catalogue.shipped().key_figures(rows)


def _labels(cat: Catalogue) -> dict[str, tuple[str, str]]:
    return {fid: (f.label, f.unit) for fid, f in cat.figures().items()}


def _figures(folder: Path) -> dict | None:
    """The commit's figures, from figures.json when it is current, else from merged.json."""
    merged_path, fig_path = folder / "merged.json", folder / "figures.json"
    if not merged_path.exists():
        return None
    if fig_path.exists() and fig_path.stat().st_mtime >= merged_path.stat().st_mtime:
        try:
            data = documents.load(fig_path, "figures")
            if set(data.get("figures_version", ())) >= set(Catalogue.shipped().figures()):
                return data
        except documents.DocumentError:
            pass  # recomputed from merged.json below
    merged = merged_doc.load_merged(merged_path)
    cat = Catalogue.of_merged(merged)
    data = {
        "schema": FIGURES_SCHEMA,
        "figures_version": sorted(cat.figures()),
        "commit": merged["commit"],
        "commit_time": merged.get("commit_time"),
        "counts": merged["counts"],
        "outcomes": outcomes.counts(merged["results"]),
        "figures": cat.key_figures(merged["results"]),
        "labels": {fid: list(lu) for fid, lu in _labels(cat).items()},
    }
    merged_doc.write_atomic(fig_path, json.dumps(data))
    return data


def add(history: Path, merged: dict, rerender: bool = False) -> Path:
    """Add (or replace) a commit in the history, optionally re-render every commit page, rebuild the
    index."""
    history.mkdir(parents=True, exist_ok=True)
    commit = merged["commit"]
    if not COMMIT_ID.fullmatch(commit):  # a name from a document becomes a folder: never a path
        raise merged_doc.ReportError(f"commit: {commit[:90]!r} is not a commit id")
    try:
        safefiles.no_links(history / commit, history)
    except safefiles.UnsafePath as exc:
        raise merged_doc.ReportError(str(exc)) from None
    report.write_commit(merged, history / commit, "../index.html")
    if rerender:
        for folder in sorted(
            p
            for p in history.iterdir()
            if p.is_dir()
            and not p.is_symlink()
            and p.name != commit
            and COMMIT_ID.fullmatch(p.name)
        ):
            try:
                safefiles.no_links(folder, history)
                again = merged_doc.load_merged(folder / "merged.json")
            except (merged_doc.ReportError, safefiles.UnsafePath) as exc:
                print(
                    f"mlagate: warning: history folder {safefiles.shown(folder)} not re-rendered: "
                    f"{_one_line(exc)}",
                    file=sys.stderr,
                )
                continue
            report.write_commit(again, folder, "../index.html")
    return render_index(history)


def link(history: Path, out: Path) -> str:
    """The commit page's relative link to the history index; a first segment that holds ':'
    (a folder named `javascript:x`) is prefixed with './' so it can never read as a scheme."""
    rel = Path(os.path.relpath(Path(history) / "index.html", Path(out))).as_posix()
    return f"./{rel}" if ":" in rel.split("/")[0] else rel


def load_commits(history: Path) -> list[dict]:
    """The key figures of every commit in a history folder, oldest first. A folder that does not
    hold a well-formed commit is skipped with a warning on stderr: one bad folder never fails a
    gate."""
    commits = []
    for p in sorted(Path(history).iterdir()):
        if not p.is_dir() or p.is_symlink():
            continue
        try:
            fig = _figures(p)
            if fig is not None:
                commits.append(_checked(fig, p))
        except (
            merged_doc.ReportError,
            ValueError,
            TypeError,
            KeyError,
            OSError,
            RecursionError,
        ) as exc:
            print(
                f"mlagate: warning: history folder {safefiles.shown(p)} skipped: {_one_line(exc)}",
                file=sys.stderr,
            )
    commits.sort(key=lambda c: (c.get("commit_time") or "", c["commit"]))
    return commits


def _one_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:300]


def _checked(fig: dict, folder: Path) -> dict:
    """The figures of one commit folder, or ValueError naming the first bad key."""
    commit = fig.get("commit")
    if not isinstance(commit, str) or not COMMIT_ID.fullmatch(commit) or commit != folder.name:
        raise ValueError("commit: not a commit id equal to the folder's name")
    if fig.get("commit_time") is not None and not isinstance(fig["commit_time"], str):
        raise ValueError("commit_time: expected a string")
    counts = fig.get("counts")
    if not isinstance(counts, dict) or not all(type(v) is int and v >= 0 for v in counts.values()):
        raise ValueError("counts: expected a mapping of non-negative integers")
    figures = fig.get("figures")
    if not isinstance(figures, dict):
        raise ValueError("figures: expected a mapping")
    for k, v in figures.items():
        if not isinstance(k, str) or k.count("|") != 4:
            raise ValueError("figures: a key is not module|figure|arm|geometry|backend")
        if type(v) not in (int, float) or not math.isfinite(v) or abs(v) > FIGURE_MAX:
            raise ValueError(f"figures.{k}: expected a finite number within +-{FIGURE_MAX:g}")
    return fig


def render_index(history: Path) -> Path:
    html = index_page(load_commits(history))
    out = Path(history) / "index.html"
    merged_doc.write_atomic(out, html)
    return out


def trends(commits: list[dict]) -> list[dict]:
    """Per series: values over commits (None where a commit has no value) and detected steps (commit
    indices)."""
    keys = sorted({k for c in commits for k in c["figures"]})
    out = []
    for k in keys:
        values = [c["figures"].get(k) for c in commits]
        present = [(i, v) for i, v in enumerate(values) if v is not None]
        steps = []
        for s in stats.detect_steps([v for _, v in present]):
            s = dict(s)
            s["index"] = present[s["index"]][0]
            steps.append(s)
        module, fig, arm, geo, backend = k.split("|")
        out.append(
            {
                "key": k,
                "module": module,
                "figure": fig,
                "arm": arm,
                "geometry": geo,
                "backend": backend,
                "values": values,
                "steps": steps,
            }
        )
    return out


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "—"
    return f"{v:.3g} {unit}" if unit != "cases" else f"{v:.0f}"


def index_page(commits: list[dict]) -> str:
    series = trends(commits)
    labels = _labels(Catalogue.shipped())
    for c in commits:
        for fid, lu in (c.get("labels") or {}).items():
            if isinstance(lu, list) and len(lu) == 2:
                labels.setdefault(fid, (str(lu[0]), str(lu[1])))
    order = list(labels)
    steps_at: dict[int, list[str]] = {}
    by_module: dict[str, list[dict]] = {}

    def rank(s):
        return (
            order.index(s["figure"]) if s["figure"] in order else 99,
            s["arm"],
            s["geometry"],
            s["backend"],
        )

    for s in sorted(series, key=rank):
        label, unit = labels.get(s["figure"], (s["figure"], ""))
        present = [v for v in s["values"] if v is not None]
        steps = [
            {
                "commit": commits[st["index"]]["commit"],
                "before": _fmt(st["before"], unit),
                "after": _fmt(st["after"], unit),
            }
            for st in s["steps"]
        ]
        for st in s["steps"]:
            steps_at.setdefault(st["index"], []).append(
                f"{s['module']} {label} {s['arm']} {s['geometry']}".strip()
            )
        by_module.setdefault(s["module"], []).append(
            {
                **s,
                "label": label,
                "unit": unit,
                "steps": steps,
                "spark": plots.sparkline(
                    s["values"],
                    [st["index"] for st in s["steps"]],
                    title=f"{s['module']} {label} {s['arm']}",
                ),
                "first": _fmt(present[0] if present else None, unit),
                "latest": _fmt(present[-1] if present else None, unit),
            }
        )
    rows = []
    for idx in reversed(range(len(commits))):
        flagged = steps_at.get(idx, [])
        more = f" (+{len(flagged) - 6})" if len(flagged) > 6 else ""
        rows.append({**commits[idx], "n": idx + 1, "flagged": "; ".join(flagged[:6]) + more})
    return report.ENV.get_template("history.html.j2").render(
        commits=commits,
        rendered=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        modules=sorted(by_module.items()),
        rows=rows,
    )
