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
import re
import sys
import time
from pathlib import Path

from mlagate import documents, stats
from mlagate.report import page as report
from mlagate.report import plots
from mlagate.report.catalogue import Catalogue

FIGURES_SCHEMA = "mlagate.figures/1"
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
    merged = report.load_merged(merged_path)
    cat = Catalogue.of_merged(merged)
    data = {
        "schema": FIGURES_SCHEMA, "figures_version": sorted(cat.figures()), "commit": merged["commit"],
        "commit_time": merged.get("commit_time"), "counts": merged["counts"],
        "figures": cat.key_figures(merged["results"]),
        "labels": {fid: list(lu) for fid, lu in _labels(cat).items()},
    }
    report.write_atomic(fig_path, json.dumps(data))
    return data


def add(history: Path, merged: dict, rerender: bool = False) -> Path:
    """Add (or replace) a commit in the history, optionally re-render every commit page, rebuild the index."""
    history.mkdir(parents=True, exist_ok=True)
    report.write_commit(merged, history / merged["commit"], "../index.html")
    if rerender:
        for folder in sorted(p for p in history.iterdir() if p.is_dir() and p.name != merged["commit"] and (p / "merged.json").exists()):
            report.write_commit(report.load_merged(folder / "merged.json"), folder, "../index.html")
    return render_index(history)


def load_commits(history: Path) -> list[dict]:
    """The key figures of every commit in a history folder, oldest first. A folder that does not
    hold a well-formed commit is skipped with a warning on stderr: one bad folder never fails a gate."""
    commits = []
    for p in sorted(Path(history).iterdir()):
        if not p.is_dir() or p.is_symlink():
            continue
        try:
            fig = _figures(p)
            if fig is not None:
                commits.append(_checked(fig, p))
        except (report.ReportError, ValueError, TypeError, KeyError, OSError, RecursionError) as exc:
            print(f"mlagate: warning: history folder {p} skipped: {_one_line(exc)}", file=sys.stderr)
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
        if type(v) not in (int, float) or not math.isfinite(v):
            raise ValueError(f"figures.{k}: expected a finite number")
    return fig


def render_index(history: Path) -> Path:
    html = index_page(load_commits(history))
    out = Path(history) / "index.html"
    report.write_atomic(out, html)
    return out


def trends(commits: list[dict]) -> list[dict]:
    """Per series: values over commits (None where a commit has no value) and detected steps (commit indices)."""
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
        out.append({"key": k, "module": module, "figure": fig, "arm": arm, "geometry": geo, "backend": backend, "values": values, "steps": steps})
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
    for s in series:
        for st in s["steps"]:
            steps_at.setdefault(st["index"], []).append(f"{s['module']} {labels.get(s['figure'], (s['figure'],))[0]} {s['arm']} {s['geometry']}".strip())
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">'
           f'<link rel="icon" href="data:,"><title>mlagate history</title><style>{report.CSS}td.step{{color:#d0312d;font-weight:bold}}#commits td:nth-child(-n+3){{white-space:nowrap}}</style></head><body>',
           f"<h1>mlagate history · {len(commits)} commits</h1>",
           f'<p class="meta">rendered {time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())} from each commit\'s merged.json. '
           "A step (red) is flagged where the median of up to 5 commits from there on differs from the median of the 5 before by more than "
           "4 robust standard deviations (1.4826 x MAD of both windows) and by more than 10 % of the earlier level; it needs 3 commits before and "
           "most of 3 commits after (so the newest commit alone never flags), and a one-commit spike is never a step.</p>",
           '<h2>Key figures per module</h2>']
    by_module: dict[str, list[dict]] = {}
    for s in series:
        by_module.setdefault(s["module"], []).append(s)
    for module in sorted(by_module):
        out.append(f'<h3>{report.esc(module)}</h3><table class="trend"><thead><tr><th>figure</th><th>arm</th><th>geometry</th><th>backend</th><th>trend (oldest → newest)</th><th>first</th><th>latest</th><th>steps</th></tr></thead><tbody>')
        for s in sorted(by_module[module], key=lambda s: (order.index(s["figure"]) if s["figure"] in order else 99, s["arm"], s["geometry"], s["backend"])):
            label, unit = labels.get(s["figure"], (s["figure"], ""))
            present = [v for v in s["values"] if v is not None]
            spark = plots.sparkline(s["values"], [st["index"] for st in s["steps"]], title=f"{module} {label} {s['arm']}")
            step_txt = "; ".join(
                f'<a href="{report.esc(commits[st["index"]]["commit"])}/index.html">{report.esc(commits[st["index"]]["commit"][:8])}</a> '
                f'{report.esc(_fmt(st["before"], unit))} → {report.esc(_fmt(st["after"], unit))}' for st in s["steps"])
            out.append(f'<tr><td>{report.esc(label)} ({report.esc(unit)})</td><td>{report.esc(s["arm"])}</td><td>{report.esc(s["geometry"])}</td><td>{report.esc(s["backend"])}</td><td>{spark}</td>'
                       f'<td>{report.esc(_fmt(present[0] if present else None, unit))}</td><td>{report.esc(_fmt(present[-1] if present else None, unit))}</td>'
                       f'<td class="{"step" if s["steps"] else ""}">{step_txt}</td></tr>')
        out.append("</tbody></table>")
    out.append('<h2>Commits</h2><table id="commits"><thead><tr><th>#</th><th>commit</th><th>commit time</th><th>pass</th><th>fail</th><th>invalid</th><th>argued</th><th>steps at this commit</th></tr></thead><tbody>')
    for i, c in enumerate(reversed(commits)):
        idx = len(commits) - 1 - i
        n = c["counts"]
        flagged = steps_at.get(idx, [])
        out.append(f'<tr><td>{idx + 1}</td><td><a href="{report.esc(c["commit"])}/index.html"><code>{report.esc(c["commit"][:12])}</code></a></td><td>{report.esc(c.get("commit_time"))}</td>'
                   f'<td>{report.esc(n.get("pass", 0))}</td><td>{report.esc(n.get("fail", 0))}</td>'
                   f'<td>{report.esc(n.get("invalid", 0))}</td><td>{report.esc(n.get("argued", 0))}</td>'
                   f'<td class="{"step" if flagged else ""}">{report.esc("; ".join(flagged[:6]) + (f" (+{len(flagged) - 6})" if len(flagged) > 6 else ""))}</td></tr>')
    out.append("</tbody></table></body></html>")
    return "".join(out)
