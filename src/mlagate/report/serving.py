"""The serving grid: per serving suite, one line per module, arm and geometry, one cell per
configuration (equal, differs, cannot serve with the finding's name, raised), from each result's
`configurations` metric (mlagate.harness.configurations); and each finding once, with the
configurations it covers."""

from __future__ import annotations

from mlagate import results

SHORT = {"equal": "=", "differs": "≠", "cannot serve": "—", "raised": "!"}


def grid(rows: list[dict]) -> list[dict]:
    """[{suite, labels, lines: [{module, arm, geometry, cells}], findings: [{name, covers}],
    counts}] for each suite whose results hold configurations."""
    by_suite: dict[str, list[dict]] = {}
    for r in rows:
        configs = (r.get("metrics") or {}).get("configurations")
        if configs:
            by_suite.setdefault(r["suite"], []).append(r)
    out = []
    for suite, found in sorted(by_suite.items()):
        labels = list(dict.fromkeys(k for r in found for k in r["metrics"]["configurations"]))
        lines, findings = [], {}
        counts = dict.fromkeys(SHORT, 0)
        for r in sorted(found, key=lambda r: (r["module"], r["arm"], r["case_id"])):
            configs = r["metrics"]["configurations"]
            cells = []
            for label in labels:
                c = configs.get(label)
                if c is None:
                    cells.append(None)
                    continue
                counts[c["outcome"]] += 1
                if c["outcome"] == "cannot serve" and c.get("finding"):
                    findings.setdefault(c["finding"], []).append(
                        f"{r['module']} {r['arm']} {label}"
                    )
                cells.append(
                    {
                        "outcome": c["outcome"],
                        "short": SHORT[c["outcome"]],
                        "finding": c.get("finding", ""),
                        "title": c.get("where") or c.get("reason") or c["outcome"],
                    }
                )
            lines.append(
                {
                    "module": r["module"],
                    "arm": r["arm"],
                    "geometry": results.geometry_label(r),
                    "verdict": r["verdict"],
                    "cells": cells,
                }
            )
        out.append(
            {
                "suite": suite,
                "labels": labels,
                "lines": lines,
                "findings": [{"name": k, "covers": v} for k, v in sorted(findings.items())],
                "counts": counts,
            }
        )
    return out


def counts_line(g: dict) -> str:
    c = g["counts"]
    return (
        f"{sum(c.values())} configurations: {c['equal']} equal, {c['differs']} differ, "
        f"{c['cannot serve']} cannot be served, {c['raised']} raised"
    )
