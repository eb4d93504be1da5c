"""Reports: merge result JSON from disk into one versioned document and render it.

Everything is rendered only from result JSON (mlagate.result/1) or a merged document
(mlagate.merged/1), so any old commit can be re-rendered. Outputs of `build`:

    OUT/index.html     the commit page (self-contained: inline CSS and SVG, no scripts)
    OUT/plots/*.svg    every chart of the page as a standalone file
    OUT/merged.json    the merged results (schema mlagate.merged/1)
    OUT/junit.xml      one testcase per case
    OUT/summary.md     a Markdown job summary (for $GITHUB_STEP_SUMMARY)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tarfile
import time
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from mlagate import documents, outcomes, results
from mlagate.report import junit, summary
from mlagate.report.catalogue import Catalogue
from mlagate.report.plots import Plot

MERGED_SCHEMA = "mlagate.merged/1"
VERDICT_ORDER = {"fail": 0, "invalid": 1, "argued": 2, "pass": 3}
EVIDENCE_MARK = {"synthetic": "S", "checkpoint": "C", "argued": "A"}
# a verdict is told by its symbol and its word as well as its colour
VERDICT_SYMBOL = {"pass": "\u2713", "fail": "\u2717", "invalid": "?", "argued": "\u2234"}
VERDICT_WORD = {"pass": "pass", "fail": "fail", "invalid": "invalid", "argued": "argued-not-measured"}


def badge(verdict: str) -> str:
    """A verdict as symbol + word on its colour."""
    return f'<span class="chip v-{esc(verdict)}" data-verdict="{esc(verdict)}">{VERDICT_SYMBOL.get(verdict, "")} {esc(VERDICT_WORD.get(verdict, verdict))}</span>'


# per-arm fingerprint keys: everything else is the environment of the run
ARM_KEYS = ("arm", "arm_dir", "arm_version", "arm_key")


class ReportError(ValueError):
    """Bad report input; one line naming the file or argument."""


# --- loading and merging ------------------------------------------------------------------


def _check(data, where: str) -> dict:
    try:
        return documents.validate(data, "result", where)
    except documents.DocumentError as exc:
        raise ReportError(str(exc)) from None


def _json(data: bytes | str, where: str):
    try:
        return documents.parse(data, where)
    except documents.DocumentError as exc:
        raise ReportError(str(exc)) from None


NOT_RESULTS = ("merged.json", "manifest.json", "merge.json", "shard-cases.json", "machine.json", "resume-cases.json", "plan.json")  # what run, merge and report write beside results


def load_source(path: Path) -> list[dict]:
    """Results from a run's output folder (OUT or OUT/results), a folder holding results/
    folders at any depth, a .tgz/.tar.gz of such folders, or a merged.json."""
    path = Path(path)
    if not path.exists():
        raise ReportError(f"{path}: no such file or directory")
    if path.is_dir():
        if (path / "results").is_dir():
            files = sorted((path / "results").glob("*.json"))
        elif (path / "merged.json").exists():
            return load_source(path / "merged.json")  # a report's or a history commit's folder
        else:
            files = [f for f in sorted(path.glob("*.json")) if f.name not in NOT_RESULTS] or sorted(path.glob("**/results/*.json"))
        if not files:
            raise ReportError(f"{path}: holds no result JSON (looked for *.json and **/results/*.json)")
        rows = []
        for f in files:
            try:
                rows.append(_check(_json(f.read_bytes(), str(f)), str(f)))
            except (OSError, json.JSONDecodeError) as exc:
                raise ReportError(f"{f}: not a readable result ({exc})") from None
        return rows
    if path.name.endswith((".tgz", ".tar.gz")):
        rows = []
        try:
            with tarfile.open(path, "r:gz") as tar:
                for m in sorted(tar.getmembers(), key=lambda m: m.name):
                    parts = m.name.split("/")
                    if m.isfile() and m.name.endswith(".json") and len(parts) >= 2 and parts[-2] == "results":
                        rows.append(_check(_json(tar.extractfile(m).read(documents.MAX_BYTES), f"{path}:{m.name}"), f"{path}:{m.name}"))
        except (OSError, tarfile.TarError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ReportError(f"{path}: not a readable results archive ({exc})") from None
        if not rows:
            raise ReportError(f"{path}: the archive holds no results/*.json")
        return rows
    try:
        data = documents.parse(documents.read_bytes(path), str(path))
    except documents.DocumentError as exc:
        raise ReportError(str(exc)) from None
    if isinstance(data, dict) and data.get("schema") == MERGED_SCHEMA:
        return [_check(r, f"{path}: result {i}") for i, r in enumerate(data.get("results", []))]
    return [_check(data, str(path))]


def load_merged(path: Path) -> dict:
    try:
        data = documents.load(path, "merged")
    except documents.DocumentError as exc:
        raise ReportError(str(exc)) from None
    if not isinstance(data, dict) or data.get("schema") != MERGED_SCHEMA:
        raise ReportError(f"{path}: schema is {data.get('schema') if isinstance(data, dict) else None!r}, expected {MERGED_SCHEMA}")
    for i, r in enumerate(data.get("results", [])):
        _check(r, f"{path}: result {i}")
    return data


def merge(sources: list[tuple[str, list[dict]]], commit: str, commit_time: str | None = None) -> dict:
    """One document from several sources. The same case_id in two sources: the result that
    started last is kept, the others are listed under `superseded` (case id, source, started)."""
    chosen: dict[tuple[str, str], tuple[dict, str]] = {}
    superseded = []
    for name, rows in sources:
        for r in rows:
            key = (r.get("runner") or "", r["case_id"])  # two runners of one backend share case ids
            old = chosen.get(key)
            if old is None or (r.get("started") or "") >= (old[0].get("started") or ""):
                if old is not None:
                    superseded.append({"case_id": r["case_id"], "source": old[1], "started": old[0].get("started")})
                chosen[key] = (r, name)
            else:
                superseded.append({"case_id": r["case_id"], "source": name, "started": r.get("started")})
    rows = sorted((r for r, _ in chosen.values()), key=lambda r: (r["suite"], r["module"], r["arm"], r["case_id"]))
    counts = {v: 0 for v in results.VERDICTS}
    for r in rows:
        counts[r["verdict"]] += 1
    started = [r["started"] for r in rows if r.get("started")]
    return {
        "schema": MERGED_SCHEMA,
        "commit": commit,
        "commit_time": commit_time or (max(started) if started else None),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "sources": [{"name": name, "results": len(rows_)} for name, rows_ in sources],
        "counts": counts,
        "outcomes": outcomes.counts(rows),
        "superseded": superseded,
        "results": rows,
    }


def git_commit(cwd: Path | None = None) -> tuple[str | None, str | None]:
    """(commit id, commit time) of the checkout at cwd, or (None, None) outside git."""
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%H %cI"], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    if out.returncode != 0 or not out.stdout.strip():
        return None, None
    sha, when = out.stdout.split()
    return sha, when


# --- figures from results -------------------------------------------------------------------


# --- the commit page -------------------------------------------------------------------------

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1500px;padding:0 18px 40px;color:#222;background:#fff}
h1{font-size:22px;margin:18px 0 4px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:16px 0 6px} .meta{color:#555;font-size:13px} code{background:#f3f3f3;padding:1px 4px;border-radius:3px;font-size:12px;overflow-wrap:anywhere}
table{border-collapse:collapse;font-size:12px} th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top} th{background:#f5f5f5}
.counts span{display:inline-block;margin-right:10px;padding:3px 8px;border-radius:4px;color:#fff;font-weight:bold;font-size:13px}
.v-pass{background:#1a6e3c}.v-fail{background:#b3261e}.v-invalid{background:#f0c24b;color:#1f1f1f!important}.v-argued{background:#e4e6e8;color:#1f1f1f!important}
.gaps{border:2px solid #d0312d;padding:.2em .8em;margin:.5em 0}
.chip{display:inline-block;min-width:16px;height:16px;line-height:16px;margin:1px;padding:0 2px;border-radius:3px;color:#fff;font-size:10px;font-weight:bold;text-align:center;text-decoration:none}
.chip.v-argued{border:1px dashed #555} .chip.ev-checkpoint{outline:2px solid #1f1f1f;outline-offset:1px}
.matrix-box{max-width:100%;overflow-x:auto;border:1px solid #e2e2e2;margin:4px 0 10px} .matrix-box table{margin:0} .matrix-box caption{text-align:left;font-weight:bold;padding:4px 6px}
.replay-box{display:flex;gap:6px;align-items:flex-start} code.replay{line-height:1.6;padding:2px 5px;white-space:pre-wrap;font-family:ui-monospace,Menlo,Consolas,monospace}
button.copy{font-size:11px;padding:1px 6px;cursor:pointer}
table#problems,table#cases,table#fingerprint{display:block;max-width:100%;overflow-x:auto} figure.plot svg{max-width:100%;height:auto}
td.cell{min-width:40px} td.empty{background:#fafafa}
.plots{display:flex;flex-wrap:wrap;gap:10px} figure.plot{margin:0;border:1px solid #e2e2e2;padding:4px;background:#fff} figcaption{font-size:11px;color:#555;max-width:540px}
tr.problem.fail td{background:#fdf3f3} tr.problem.invalid td{background:#fdf9ef} tr:target td{outline:2px solid #1f77b4}
nav{font-size:13px;margin:6px 0} nav a{margin-right:12px}
pre{white-space:pre-wrap;font-size:11px;background:#f7f7f7;padding:6px;max-height:240px;overflow:auto}
.legend .chip{vertical-align:middle} .legend{font-size:12px;margin:6px 0}
"""


def esc(v) -> str:
    """Text for HTML: None as empty, everything escaped (quotes too: safe in attributes)."""
    return escape("" if v is None else str(v), quote=True)


def case_anchor(case_id: str) -> str:
    return "case-" + re.sub(r"[^A-Za-z0-9_-]", "_", case_id)


def verdict_matrix(rows: list[dict], cat: Catalogue) -> str:
    """Per backend and runner, one table per suite kind, each in a box that scrolls on its own.
    Rows: module x arm; columns: suites; one chip per case (colour and symbol: verdict; a dark
    ring: checkpoint evidence), linking to the case's details."""
    out = ['<div id="verdict-matrix">']
    for (backend, runner), env_rows in sorted(_by_env(rows).items()):
        devices = sorted({str((r.get("fingerprint") or {}).get("device")) for r in env_rows if (r.get("fingerprint") or {}).get("device")})
        out.append(f'<h3>backend {esc(backend)} · runner {esc(runner)}{" · " + esc(", ".join(devices)) if devices else ""} ({len(env_rows)} cases)</h3>')
        for kind, suites in cat.kinds(env_rows):
            out.append(f'<div class="matrix-box" data-kind="{kind}"><table class="matrix"><caption>{kind} suites</caption>')
            out.append(_matrix_table(env_rows, suites))
            out.append("</table></div>")
    out.append("</div>")
    return "".join(out)


def _by_env(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    by_env: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        by_env.setdefault((str(r.get("backend", "")), str(r.get("runner", ""))), []).append(r)
    return by_env


def _chip(r: dict) -> str:
    ring = " ev-checkpoint" if r.get("evidence") == "checkpoint" else ""
    tip = f"{VERDICT_WORD.get(r['verdict'], r['verdict'])} · {r.get('evidence')} evidence · {results.geometry_label(r)} · {r.get('dtype', '')}: {r.get('reason', '')}"
    return (f'<a class="chip v-{esc(r["verdict"])}{ring}" href="#{esc(case_anchor(r["case_id"]))}" title="{esc(tip[:300])}" '
            f'aria-label="{esc(VERDICT_WORD.get(r["verdict"], r["verdict"]))}" data-verdict="{esc(r["verdict"])}">{VERDICT_SYMBOL.get(r["verdict"], "")}</a>')


def _matrix_table(env_rows: list[dict], suites: list[str]) -> str:
    cells: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for r in env_rows:
        if r["suite"] in suites:
            cells.setdefault((r["module"], r["arm"] + (" (A/A)" if r.get("aa") else "")), {}).setdefault(r["suite"], []).append(r)
    out = ["<thead><tr><th>module</th><th>arm</th>" + "".join(f"<th>{esc(s)}</th>" for s in suites) + "</tr></thead><tbody>"]
    for (module, arm), by_suite in sorted(cells.items()):
        out.append(f"<tr><th>{esc(module)}</th><td>{esc(arm)}</td>")
        for s in suites:
            rs = sorted(by_suite.get(s, []), key=lambda r: (VERDICT_ORDER[r["verdict"]], results.geometry_label(r), r.get("dtype", "")))
            out.append(f'<td class="cell">{"".join(_chip(r) for r in rs)}</td>' if rs else '<td class="cell empty"></td>')
        out.append("</tr>")
    out.append("</tbody>")
    return "".join(out)


LEGEND = (
    '<div class="legend" id="legend">verdict (symbol, word and colour): '
    '<span class="chip v-pass">\u2713</span> pass · <span class="chip v-fail">\u2717</span> fail · '
    '<span class="chip v-invalid">?</span> invalid (measured something other than the claim, or could not measure; never a pass or a fail) · '
    '<span class="chip v-argued">\u2234</span> argued-not-measured (formula only, nothing run). '
    '<span class="chip v-pass ev-checkpoint">\u2713</span> a dark ring: measured on a real checkpoint (else synthetic: real geometry, random weights). '
    "One chip per case (geometry x dtype x backend); hover for details, click for the case.</div>"
)


def machines_table(machines: list[dict]) -> str:
    """The machine of each run folder: CPU, cores, memory, and the load at the run's start and end."""
    if not machines:
        return ""
    out = ['<table id="machines"><thead><tr><th>run</th><th>CPU</th><th>cores</th><th>memory (GiB)</th>'
           "<th>load at start (1 / 5 / 15 min)</th><th>load at end</th></tr></thead><tbody>"]
    def load(m: dict, when: str) -> str:
        return " / ".join(esc((m.get(when) or {}).get(k)) for k in ("load_1m", "load_5m", "load_15m"))

    for m in machines:
        out.append(f"<tr><td>{esc(m.get('source'))}</td><td>{esc(m.get('cpu_model'))}</td><td>{esc(m.get('cores'))}</td>"
                   f"<td>{esc(m.get('memory_gib'))}</td><td>{load(m, 'start')}</td><td>{load(m, 'end')}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def environments(rows: list[dict]) -> str:
    envs: dict[str, dict] = {}
    arms: dict[tuple, dict] = {}
    for r in rows:
        fp = r.get("fingerprint") or {}
        if not fp:
            continue
        env = {k: v for k, v in fp.items() if k not in ARM_KEYS}
        envs.setdefault(json.dumps(env, sort_keys=True), env)
        arms.setdefault((fp.get("arm", r["arm"]), fp.get("arm_version"), fp.get("arm_key"), fp.get("backend")), {})
    out = []
    keys = sorted({k for e in envs.values() for k in e})
    if envs:
        out.append('<table id="fingerprint"><thead><tr><th>key</th>' + "".join(f"<th>environment {i + 1}</th>" for i in range(len(envs))) + "</tr></thead><tbody>")
        for k in keys:
            vals = []
            for e in envs.values():
                v = e.get(k)
                vals.append(f"<td>{esc(json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v)}</td>")
            out.append(f"<tr><th>{esc(k)}</th>{''.join(vals)}</tr>")
        out.append("</tbody></table>")
    else:
        out.append("<p>No result holds a fingerprint (argued rows run nothing).</p>")
    if arms:
        out.append("<h3>Arms</h3><table><thead><tr><th>arm</th><th>version</th><th>cache key</th><th>backend</th></tr></thead><tbody>")
        for (arm, ver, key, backend) in sorted(arms, key=lambda t: tuple(str(x) for x in t)):
            out.append(f"<tr><td>{esc(arm)}</td><td>{esc(ver)}</td><td><code>{esc(key)}</code></td><td>{esc(backend)}</td></tr>")
        out.append("</tbody></table>")
    return "".join(out)


def replay_box(command: str) -> str:
    """The replay command verbatim (escaped, never reformatted) with a copy button."""
    return (f'<div class="replay-box"><code class="replay">{esc(command)}</code>'
            f'<button type="button" class="copy" data-copy="{esc(command)}" title="copy the command">copy</button></div>')


COPY_SCRIPT = (
    '<script id="copy-script">document.addEventListener("click",function(e){var b=e.target.closest("button.copy");'
    'if(!b)return;var t=b.getAttribute("data-copy");var done=function(){b.textContent="copied"};'
    'if(navigator.clipboard){navigator.clipboard.writeText(t).then(done,function(){})}});</script>'
)


def problems(rows: list[dict]) -> str:
    bad = sorted((r for r in rows if r["verdict"] in ("fail", "invalid")), key=lambda r: (VERDICT_ORDER[r["verdict"]], r["suite"], r["module"], r["arm"], r["case_id"]))
    if not bad:
        return '<p id="problems">No failing or invalid case.</p>'
    out = ['<table id="problems"><thead><tr><th>verdict</th><th>suite</th><th>module</th><th>arm</th><th>geometry</th><th>dtype · backend</th><th>reason</th><th>replay</th></tr></thead><tbody>']
    for r in bad:
        stderr = f"<details><summary>worker output</summary><pre>{esc(r['stderr'][-4000:])}</pre></details>" if r.get("stderr") else ""
        out.append(f'<tr class="problem {esc(r["verdict"])}" id="{esc(case_anchor(r["case_id"]))}"><td>{badge(r["verdict"])}</td>'
                   f'<td>{esc(r["suite"])}</td><td>{esc(r["module"])}</td><td>{esc(r["arm"])}</td><td>{esc(results.geometry_label(r))}</td><td>{esc(r.get("dtype"))} · {esc(r.get("backend"))}</td>'
                   f'<td class="reason">{esc(r.get("reason", ""))}{stderr}</td><td>{replay_box(r.get("replay", ""))}</td></tr>')
    out.append("</tbody></table>")
    return "".join(out)


def case_table(rows: list[dict]) -> str:
    out = ['<table id="cases"><thead><tr><th>verdict</th><th>evidence</th><th>suite</th><th>module</th><th>arm</th><th>geometry</th><th>dtype</th><th>backend</th><th>s</th><th>reason</th></tr></thead><tbody>']
    listed = {r["case_id"] for r in rows if r["verdict"] in ("fail", "invalid")}
    for r in sorted(rows, key=lambda r: (r["suite"], r["module"], r["arm"], r["case_id"])):
        anchor = "" if r["case_id"] in listed else f' id="{esc(case_anchor(r["case_id"]))}"'
        out.append(f'<tr{anchor}><td>{badge(r["verdict"])}</td><td>{esc(r.get("evidence"))}</td><td>{esc(r["suite"])}</td>'
                   f'<td>{esc(r["module"])}</td><td>{esc(r["arm"])}</td><td>{esc(results.geometry_label(r))}</td><td>{esc(r.get("dtype"))}</td><td>{esc(r.get("backend"))}</td>'
                   f'<td>{esc(r.get("duration_s"))}</td><td>{esc(r.get("reason", ""))}</td></tr>')
    out.append("</tbody></table>")
    return "".join(out)


def page(merged: dict, plot_list: list[Plot] | None = None, history_link: str | None = None) -> str:
    """The commit page as one HTML string, from a merged document only."""
    rows = merged["results"]
    cat = Catalogue.of_merged(merged)
    plot_list = cat.plots(rows) if plot_list is None else plot_list
    c = merged["counts"]
    head = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">'
            f'<link rel="icon" href="data:,"><title>mlagate report {esc(merged["commit"][:12])}</title><style>{CSS}</style></head><body>')
    out = [head, f'<h1>mlagate report · commit <code id="commit">{esc(merged["commit"])}</code></h1>']
    srcs = ", ".join(f"{s['name']} ({s['results']})" for s in merged.get("sources", []))
    out.append(f'<p class="meta">commit time {esc(merged.get("commit_time"))} · rendered {esc(merged.get("created"))} from {len(rows)} results: {esc(srcs)}'
               + (f' · <a href="{esc(history_link)}">history</a>' if history_link else "")
               + (f' · {len(merged.get("superseded", []))} superseded by later runs of the same case' if merged.get("superseded") else "") + "</p>")
    oc = merged.get("outcomes") or outcomes.counts(rows)
    red = outcomes.exit_code(oc) != 0
    out.append(f'<p class="gate" id="gate"><strong>gate {"red" if red else "green"}</strong>: '
               + ", ".join(f"{oc.get(o, 0)} {esc(o)}" for o in outcomes.OUTCOMES) + "</p>")
    controls = outcomes.controls_line(rows)
    if controls:
        out.append(f'<p class="meta" id="controls">{esc(controls)}</p>')
    out.append('<p class="counts">' + "".join(f'<span class="v-{v}">{VERDICT_SYMBOL[v]} {c.get(v, 0)} {VERDICT_WORD[v]}</span>' for v in ("pass", "fail", "invalid", "argued")) + "</p>")
    gaps = merged.get("gaps") or {}
    if any(gaps.values()):
        listed = [f"missing {x}" for x in gaps.get("missing", [])] + [f"missing shard {x}" for x in gaps.get("missing_shards", [])] + [f"unplanned {x}" for x in gaps.get("unplanned", [])]
        out.append(f'<div class="gaps" id="gaps"><p><strong>Not a complete run:</strong> {len(gaps.get("missing", []))} planned cases have no result, '
                   f'{len(gaps.get("missing_shards", []))} shards are missing, {len(gaps.get("unplanned", []))} results were not planned.</p><ul>'
                   + "".join(f"<li><code>{esc(x)}</code></li>" for x in listed[:200]) + "</ul></div>")
    out.append('<nav><a href="#s-matrix">verdict matrix</a><a href="#s-problems">failing and invalid</a><a href="#s-plots">plots</a>'
               '<a href="#s-env">environment</a><a href="#s-cases">all cases</a></nav>')
    out.append('<h2 id="s-matrix">Verdict matrix</h2>')
    out.append(LEGEND)
    out.append(verdict_matrix(rows, cat))
    out.append(f'<h2 id="s-problems">Failing and invalid cases ({c.get("fail", 0) + c.get("invalid", 0)})</h2>')
    out.append(problems(rows))
    out.append('<h2 id="s-plots">Plots</h2>')
    if not plot_list:
        out.append('<p class="meta" id="no-plots">No result in this report holds timings or error histograms, so there is nothing to plot.</p>')
    for _, section in cat.sections({r["suite"] for r in rows}):
        ps = [p for p in plot_list if p.kind == section.id]
        if not ps:
            continue  # no empty plot boxes
        out.append(f'<h3>{esc(section.heading)}</h3><p class="meta">{esc(section.blurb)}</p><div class="plots" id="plots-{esc(section.id)}">')
        for p in ps:
            out.append(f'<figure class="plot" data-plot="{esc(p.kind)}" id="plot-{esc(p.slug)}">{p.svg}'
                       + (f"<figcaption>{esc(p.caption)}</figcaption>" if p.caption else "") + "</figure>")
        out.append("</div>")
    if merged.get("mutation"):
        from mlagate.report import mutation as killmatrix  # the kill-matrix section (mlagate mutate)

        out.append(killmatrix.section(merged["mutation"]))
    out.append('<h2 id="s-env">Environment</h2>')
    out.append(machines_table(merged.get("machines") or []))
    out.append(environments(rows))
    out.append('<h2 id="s-cases">All cases</h2>')
    out.append(case_table(rows))
    out.append('<p class="meta">Rendered by mlagate from result JSON only (merged.json beside this page). Machine-readable: '
               '<a href="merged.json">merged.json</a> · <a href="junit.xml">junit.xml</a> · <a href="summary.md">summary.md</a></p>')
    out.append(COPY_SCRIPT + "</body></html>")
    return "".join(out)


# --- orchestration ----------------------------------------------------------------------------


@dataclass
class Outcome:
    out: Path
    merged: dict
    plots: list[Plot] = field(default_factory=list)
    history: Path | None = None


def write_commit(merged: dict, out: Path, history_link: str | None = None) -> list[Plot]:
    """Write the commit page, its plots, merged.json, junit.xml and summary.md into out."""
    out.mkdir(parents=True, exist_ok=True)
    plot_list = Catalogue.of_merged(merged).plots(merged["results"])
    (out / "plots").mkdir(exist_ok=True)
    for p in plot_list:
        (out / "plots" / f"{p.slug}.svg").write_text(p.svg, encoding="utf-8")
    write_atomic(out / "merged.json", json.dumps(merged, indent=1))
    write_atomic(out / "junit.xml", junit.render(merged["results"], (merged.get("gaps") or {}).get("missing", [])))
    write_atomic(out / "summary.md", summary.render(merged))
    write_atomic(out / "index.html", page(merged, plot_list, history_link))
    return plot_list


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def merge_gaps(sources: list[Path]) -> dict[str, list[str]]:
    """What `mlagate merge` found missing (cases, shards) or unplanned, from a merge.json beside a source."""
    gaps: dict[str, list[str]] = {"missing": [], "missing_shards": [], "unplanned": []}
    for src in sources:
        path = Path(src) / "merge.json"
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ReportError(f"{path}: not a readable merge record ({exc})") from None
        for key in gaps:
            gaps[key] += [str(x) for x in data.get(key) or []]
    return gaps
