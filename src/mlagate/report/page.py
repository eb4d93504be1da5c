"""The commit page, rendered from a merged document only (mlagate.report.merged) through the
templates in templates/page, which escape every value. Outputs of `write_commit`:

    OUT/index.html     the commit page (self-contained: inline CSS and SVG, one small script)
    OUT/plots/*.svg    every chart of the page as a standalone file
    OUT/merged.json    the merged results (schema mlagate.merged/1)
    OUT/junit.xml      one testcase per case
    OUT/summary.md     a Markdown job summary (for $GITHUB_STEP_SUMMARY)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
from markupsafe import Markup, escape

from mlagate import results
from mlagate.report import junit, serving, summary
from mlagate.report.catalogue import Catalogue
from mlagate.report.merged import write_atomic
from mlagate.report.plots import Plot
from mlagate.verdict import outcomes

TEMPLATES = Path(__file__).resolve().parent / "templates" / "page"
VERDICT_ORDER = {"fail": 0, "invalid": 1, "argued": 2, "pass": 3}
# a verdict is told by its symbol and its word as well as its colour
VERDICT_SYMBOL = {
    "pass": "\u2713",
    "fail": "\u2717",
    "invalid": "?",
    "argued": "\u2234",
    # how a case looks by its outcome: an expected failure is not a regression
    "expected": "\u2298",
    "regression": "\u2717",
    "not-fixed": "\u2717",
    "lost-control": "!",
    "fixed": "!",
    "changed-failure": "\u2260",
    "flaky": "\u2248",
    "flaky-allowed": "\u2248",
}
VERDICT_WORD = {
    "pass": "pass",
    "fail": "fail",
    "invalid": "invalid",
    "argued": "argued-not-measured",
    "expected": "expected fail",
    "regression": "regression",
    "not-fixed": "not fixed (fails as its baseline arm does)",
    "lost-control": "lost control",
    "fixed": "fixed (a known finding passes)",
    "changed-failure": "changed failure (another kind than the expected one)",
    "flaky": "flaky (failed and passed in its attempts)",
    "flaky-allowed": "flaky, its suite may retry (not red)",
}
# the page leads with red outcomes, then what could not be measured, then expected failures
LOOK_ORDER = {
    **dict.fromkeys(
        ("regression", "not-fixed", "changed-failure", "flaky", "lost-control", "fixed"), 0
    ),
    "invalid": 1,
    **dict.fromkeys(("expected", "flaky-allowed"), 2),
}


def look(r: dict) -> str:
    """How a case is shown: by its outcome (mlagate.verdict.outcomes) where that is red or an
    expected failure, else by its verdict."""
    oc = outcomes.outcome(r)
    if oc == "flaky" and not outcomes.red(r):
        return "flaky-allowed"
    if oc in outcomes.RED:
        return oc.replace(" ", "-")
    if oc == "as expected" and r["verdict"] == "fail":
        return "expected"
    return r["verdict"]


ARM_KEYS = (
    "arm",
    "arm_dir",
    "arm_version",
    "arm_key",
    "arm_notes",
    "activation",
)  # per arm; the rest is the run's environment
CSS = (TEMPLATES / "page.css").read_text(encoding="utf-8")
COPY_SCRIPT = (TEMPLATES / "copy.html").read_text(encoding="utf-8")

ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(TEMPLATES)),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
    finalize=lambda v: "" if v is None else v,
)
ENV.globals.update(symbol=VERDICT_SYMBOL, word=VERDICT_WORD)


def esc(v) -> str:
    """Text for HTML as the templates escape it: None as empty, quotes too (safe in attributes)."""
    return str(escape("" if v is None else str(v)))


def case_anchor(case_id: str) -> str:
    return "case-" + re.sub(r"[^A-Za-z0-9_-]", "_", case_id)


def _chip(r: dict) -> dict:
    tip = (
        f"{VERDICT_WORD.get(look(r), r['verdict'])} · {r.get('evidence')} evidence · "
        f"{results.geometry_label(r)} · {r.get('dtype', '')}: {r.get('reason', '')}"
    )
    return {
        "verdict": r["verdict"],
        "look": look(r),
        "checkpoint": r.get("evidence") == "checkpoint",
        "anchor": case_anchor(r["case_id"]),
        "tip": tip[:300],
    }


def _box(env_rows: list[dict], kind: str, suites: list[str]) -> dict:
    cells: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for r in env_rows:
        if r["suite"] in suites:
            line = (r["module"], r["arm"] + (" (A/A)" if r.get("aa") else ""))
            cells.setdefault(line, {}).setdefault(r["suite"], []).append(r)
    order = lambda r: (VERDICT_ORDER[r["verdict"]], results.geometry_label(r), r.get("dtype", ""))  # noqa: E731
    lines = [
        {
            "module": module,
            "arm": arm,
            "cells": [[_chip(r) for r in sorted(by_suite.get(s, []), key=order)] for s in suites],
        }
        for (module, arm), by_suite in sorted(cells.items())
    ]
    return {"kind": kind, "suites": suites, "lines": lines}


def verdict_matrix(rows: list[dict], cat: Catalogue) -> list[dict]:
    """Per backend and runner, one table per suite kind. Rows: module x arm; columns: suites;
    one chip per case (colour and symbol: verdict; a dark ring: checkpoint evidence)."""
    by_env: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        by_env.setdefault((str(r.get("backend", "")), str(r.get("runner", ""))), []).append(r)
    out = []
    for (backend, runner), env_rows in sorted(by_env.items()):
        fps = [r.get("fingerprint") or {} for r in env_rows]
        out.append(
            {
                "backend": backend,
                "runner": runner,
                "devices": sorted({str(fp["device"]) for fp in fps if fp.get("device")}),
                "n": len(env_rows),
                "boxes": [_box(env_rows, kind, suites) for kind, suites in cat.kinds(env_rows)],
            }
        )
    return out


def _case(r: dict, anchor: bool) -> dict:
    return {
        "verdict": r["verdict"],
        "look": look(r),
        "suite": r["suite"],
        "module": r["module"],
        "arm": r["arm"],
        "geometry": results.geometry_label(r),
        "dtype": r.get("dtype"),
        "backend": r.get("backend"),
        "evidence": r.get("evidence"),
        "duration_s": r.get("duration_s"),
        "reason": f"{outcomes.outcome(r)}: {r.get('reason', '')}{results.signature(r)}",
        "replay": r.get("replay", ""),
        "measured_by": results.measured_by(r).removesuffix(", from the store"),
        "reused": bool(r.get("reused")),
        "stderr": (r.get("stderr") or "")[-4000:],
        "anchor": case_anchor(r["case_id"]) if anchor else "",
    }


def problems(rows: list[dict]) -> list[dict]:
    order = lambda r: (LOOK_ORDER.get(look(r), 3), r["suite"], r["module"], r["arm"], r["case_id"])  # noqa: E731
    return [
        _case(r, True)
        for r in sorted(
            (r for r in rows if r["verdict"] in ("fail", "invalid") or outcomes.red(r)), key=order
        )
    ]


def cases(rows: list[dict]) -> list[dict]:
    """Every case; a failing or invalid one is anchored in the problems table instead."""
    order = lambda r: (r["suite"], r["module"], r["arm"], r["case_id"])  # noqa: E731
    return [_case(r, r["verdict"] not in ("fail", "invalid")) for r in sorted(rows, key=order)]


def machines(merged: dict) -> list[dict]:
    """The machine of each run folder: CPU, cores, memory, and the load at its start and end."""

    def load(m: dict, when: str) -> list:
        return [(m.get(when) or {}).get(k) for k in ("load_1m", "load_5m", "load_15m")]

    return [
        dict(m, start=load(m, "start"), end=load(m, "end")) for m in merged.get("machines") or []
    ]


def environments(rows: list[dict]) -> tuple[list[dict], list[str], list[tuple]]:
    """The distinct run environments (fingerprints less the arm's keys), their keys, the arms."""
    envs: dict[str, dict] = {}
    arms: set[tuple] = set()
    for r in rows:
        fp = r.get("fingerprint") or {}
        if not fp:
            continue
        env = {k: v for k, v in fp.items() if k not in ARM_KEYS}
        envs.setdefault(json.dumps(env, sort_keys=True), env)
        arms.add(
            (fp.get("arm", r["arm"]), fp.get("arm_version"), fp.get("arm_key"), fp.get("backend"))
        )
    shown = [
        {
            k: json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v
            for k, v in e.items()
        }
        for e in envs.values()
    ]
    keys = sorted({k for e in shown for k in e})
    shown = [{k: e.get(k) for k in keys} for e in shown]
    return shown, keys, sorted(arms, key=lambda t: tuple(str(x) for x in t))


def _gaps(merged: dict) -> dict | None:
    gaps = merged.get("gaps") or {}
    if not any(gaps.values()):
        return None
    missing, shards, unplanned = (
        gaps.get(k, []) for k in ("missing", "missing_shards", "unplanned")
    )
    listed = (
        [f"missing {x}" for x in missing]
        + [f"missing shard {x}" for x in shards]
        + [f"unplanned {x}" for x in unplanned]
    )
    return {
        "missing": missing,
        "missing_shards": shards,
        "unplanned": unplanned,
        "listed": listed[:200],
    }


def page(merged: dict, plot_list: list[Plot] | None = None, history_link: str | None = None) -> str:
    """The commit page as one HTML string, from a merged document only."""
    rows = merged["results"]
    cat = Catalogue.of_merged(merged)
    plot_list = cat.plots(rows) if plot_list is None else plot_list
    sections = [
        (section, ps)
        for _, section in cat.sections({r["suite"] for r in rows})
        if (ps := [p for p in plot_list if p.kind == section.id])  # no empty plot boxes
    ]
    oc = merged.get("outcomes") or outcomes.counts(rows)
    mutation = ""
    if merged.get("mutation"):
        from mlagate.report import (
            mutation as killmatrix,
        )  # the kill-matrix section (mlagate mutate)

        mutation = Markup(killmatrix.section(merged["mutation"]))
    envs, env_keys, arms = environments(rows)
    return ENV.get_template("commit.html.j2").render(
        m=merged,
        rows=rows,
        sources=", ".join(f"{s['name']} ({s['results']})" for s in merged.get("sources", [])),
        history_link=history_link,
        red=(merged["head_run"]["exit_code"] if merged.get("head_run") else outcomes.exit_code(oc))
        != 0,
        gate=[
            (o, oc.get(o, 0)) for o in outcomes.OUTCOMES if o not in outcomes.RELATIVE or oc.get(o)
        ],
        controls=outcomes.controls_line(rows),
        notes=[
            n
            for n in (
                results.upgraded_line(rows),
                results.unfit_line(rows),
                results.reused_line(rows),
                results.measured_line(rows),
            )
            if n
        ],
        counts=merged["counts"],
        gaps=_gaps(merged),
        matrix=verdict_matrix(rows, cat),
        serving=serving.grid(rows),
        serving_line=serving.counts_line,
        problems=problems(rows),
        sections=sections,
        mutation=mutation,
        machines=machines(merged),
        environments=envs,
        env_keys=env_keys,
        arms=arms,
        cases=cases(rows),
    )


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
    missing = (merged.get("gaps") or {}).get("missing", [])
    write_atomic(
        out / "junit.xml", junit.render(merged["results"], missing, merged.get("head_run"))
    )
    write_atomic(out / "summary.md", summary.render(merged))
    write_atomic(out / "index.html", page(merged, plot_list, history_link))
    return plot_list
