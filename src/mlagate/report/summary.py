"""A Markdown job summary of a merged report (for $GITHUB_STEP_SUMMARY).

Every string that came from a result is HTML-escaped (GitHub renders inline HTML in
summaries) and table pipes are escaped, so a module name cannot inject markup.
"""

from __future__ import annotations

from html import escape

from mlagate import headrun, results
from mlagate.report import serving
from mlagate.verdict import outcomes


def _md(s, limit: int = 300) -> str:
    s = "" if s is None else str(s)
    s = " ".join(s.split())[:limit]
    return escape(s, quote=False).replace("|", "\\|").replace("`", "'")


def _code(s) -> str:
    """A command verbatim: a code span (no emphasis inside, so underscores stay), pipes escaped
    for the table; < > & escaped too, so a planted name stays inert text."""
    s = " ".join(("" if s is None else str(s)).split())
    return "`" + escape(s, quote=False).replace("`", "'").replace("|", "\\|") + "`"


def render(merged: dict, max_problems: int = 50) -> str:
    if merged.get("head_run"):
        return render_head(merged, max_problems)
    rows = merged["results"]
    c = merged["counts"]
    oc = merged.get("outcomes") or outcomes.counts(rows)
    red = outcomes.exit_code(oc) != 0
    controls = outcomes.controls_line(rows)
    out = [
        f"## mlagate: commit `{_md(merged['commit'])}`",
        "",
        f"**gate {'red' if red else 'green'}: "
        + ", ".join(
            f"{oc.get(o, 0)} {o}"
            for o in outcomes.OUTCOMES
            if o not in outcomes.RELATIVE or oc.get(o)
        )
        + "**",
        "",
        *([_md(controls), ""] if controls else []),
        *([_md(upgraded), ""] if (upgraded := results.upgraded_line(rows)) else []),
        *([_md(unfit), ""] if (unfit := results.unfit_line(rows)) else []),
        *([_md(reused), ""] if (reused := results.reused_line(rows)) else []),
        *([_md(hosts), ""] if (hosts := results.measured_line(rows)) else []),
        f"Verdicts underneath: {c.get('pass', 0)} passed, {c.get('fail', 0)} failed, "
        f"{c.get('invalid', 0)} invalid, {c.get('argued', 0)} argued-not-measured "
        f"({len(rows)} cases)",
        "",
        "| suite | pass | fail | invalid | argued |",
        "|---|---:|---:|---:|---:|",
    ]
    gaps = merged.get("gaps") or {}
    if any(gaps.values()):
        out[2:2] = [
            f"**Not a complete run: {len(gaps.get('missing', []))} planned cases without a "
            f"result, {len(gaps.get('missing_shards', []))} missing shards, "
            f"{len(gaps.get('unplanned', []))} unplanned results** (merge.json)",
            "",
        ]
    by_suite: dict[str, dict[str, int]] = {}
    for r in rows:
        by_suite.setdefault(r["suite"], {v: 0 for v in results.VERDICTS})[r["verdict"]] += 1
    for s in sorted(by_suite):
        n = by_suite[s]
        out.append(f"| {_md(s)} | {n['pass']} | {n['fail']} | {n['invalid']} | {n['argued']} |")
    out += _serving(rows)
    bad = [r for r in rows if outcomes.outcome(r) != "as expected"]
    bad.sort(
        key=lambda r: (not outcomes.red(r), outcomes.outcome(r), r["suite"], r["module"], r["arm"])
    )
    if bad:
        out += [
            "",
            "### Cases that keep the gate red",
            "",
            "| outcome | verdict | suite | module | arm | geometry · dtype · backend | reason | "
            "measured by | replay |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in bad[:max_problems]:
            geo = results.geometry_label(r)
            where = f"{geo} · {r.get('dtype', '')} · {r.get('backend', '')}"
            out.append(
                f"| {outcomes.outcome(r)} | {r['verdict']} | {_md(r['suite'])} | "
                f"{_md(r['module'])} | {_md(r['arm'])} | {_md(where)} | "
                f"{_md((r.get('reason') or '') + results.signature(r))} | "
                f"{_md(results.measured_by(r))} | {_code(r.get('replay'))} |"
            )
        if len(bad) > max_problems:
            out.append(f"\n{len(bad) - max_problems} more in junit.xml and the HTML report.")
    return "\n".join(out) + "\n"


def render_head(merged: dict, max_problems: int = 50) -> str:
    """A head run's summary: what the change did (fixed first, then what keeps the gate red, then
    what still fails as on base), each case with head's and base's verdicts."""
    hr = merged["head_run"]
    oc = hr["outcomes"]
    shown = ", ".join(f"{oc[o]} {o}" for o in outcomes.OUTCOMES if oc.get(o))
    out = [
        f"## mlagate: head `{_md(hr['head']['commit'][:12])}` against base "
        f"`{_md(hr['base']['commit'][:12])}` ({_md(hr['base']['label'])})",
        "",
        f"**gate {'red' if hr['exit_code'] else 'green'}: {_md(hr['line'])}**",
        "",
        f"Outcomes of head's {len(hr['cases'])} cases: {_md(shown)}"
        + (" (--strict: a case still failing as on base is red)" if hr["strict"] else ""),
    ]
    reused = results.reused_line(merged["results"])
    out += ["", _md(reused)] if reused else []
    rows = [r for r in merged["results"] if r["case_id"] in hr["cases"]]
    told = [r for r in rows if hr["cases"][r["case_id"]]["outcome"] != "as expected"]
    order = headrun.ORDER
    told.sort(key=lambda r: (order.index(hr["cases"][r["case_id"]]["outcome"]), r["case_id"]))
    if told:
        out += [
            "",
            "### What this change did",
            "",
            "| outcome | head | base | suite | module | geometry · dtype · backend | reason "
            "| measured by | replay |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
    for r in told[:max_problems]:
        case = hr["cases"][r["case_id"]]
        base = "new case" if case["new_case"] else (case["base"] or "missing")
        where = f"{results.geometry_label(r)} · {r.get('dtype', '')} · {r.get('backend', '')}"
        replay = "" if case["outcome"] == outcomes.FIXED_BY_CHANGE else _code(r.get("replay"))
        out.append(
            f"| {case['outcome']} | {r['verdict']} | {base} | {_md(r['suite'])} | "
            f"{_md(r['module'])} | {_md(where)} | {_md(r.get('reason'))} | "
            f"{_md(results.measured_by(r))} | {replay} |"
        )
    if len(told) > max_problems:
        out.append(f"\n{len(told) - max_problems} more in junit.xml and the HTML report.")
    for cid in hr.get("missing", []):
        out.append(f"\nmissing: {_md(cid)} (no result was written)")
    return "\n".join(out) + "\n"


def _serving(rows: list[dict]) -> list[str]:
    """Per serving suite, its configurations' outcomes per module and arm, and each finding once
    with how many configurations it covers."""
    out = []
    for g in serving.grid(rows):
        out += ["", f"### {_md(g['suite'])}: {_md(serving.counts_line(g))}", ""]
        out += ["| module | arm | geometry | equal | differs | cannot serve | raised |"]
        out += ["|---|---|---|---:|---:|---:|---:|"]
        for line in g["lines"]:
            n = dict.fromkeys(serving.SHORT, 0)
            for c in line["cells"]:
                if c:
                    n[c["outcome"]] += 1
            out.append(
                f"| {_md(line['module'])} | {_md(line['arm'])} | {_md(line['geometry'])} | "
                f"{n['equal']} | {n['differs']} | {n['cannot serve']} | {n['raised']} |"
            )
        for f in g["findings"]:
            out.append(f"\n- finding **{_md(f['name'])}**: {len(f['covers'])} configurations")
    return out
