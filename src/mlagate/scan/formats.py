"""Renderings of a scan report: text, JSON, SARIF 2.1.0 and GitHub workflow annotations; every
finding points at a file and a line."""

from __future__ import annotations

import json

from mlagate import __version__
from mlagate.scan import fixes as scanfix
from mlagate.scan.guards import FAILING, NOTHING_SCANNED, RULES, ScanReport

LEVEL = {
    "MLA001": "error",
    "MLA002": "error",
    "MLA003": "error",
    "MLA004": "error",
    "MLA005": "warning",
    "MLA006": "warning",
    "MLA007": "error",
    "MLA008": "error",
}
HELP = {
    "MLA001": "A branch on one query (`L == 1`) picks the absorbed path; a speculative verify "
    "step (L >= 2) then re-expands the whole cache. The cache-aware decision: {formula}.",
    "MLA002": "The indexer reuses its cached pool only for one new token; a wide step re-pools "
    "the whole cache. Pool the new tokens of a step of any width and reuse the cached pool.",
    "MLA003": "The query fold and the output unfold branch on different width conditions, so "
    "they can disagree. Bind one decision after the cache update and branch on it at both.",
    "MLA004": "A class whose own code calls both embed_q and unembed_out that the matrix does "
    "not register: the gate does not test it. Register it (modules:) or allowlist its guards.",
    "MLA005": "An allowlist entry of the matrix matches no guard of the module it names any "
    "more. Remove it.",
    "MLA006": "A file that could not be read (a FIFO, a device, a file over the size cap, an "
    "unreadable file) or parsed; the scan says nothing about it.",
    "MLA007": "A constant width (`L <= 8`) picks the absorbed path: where absorbing pays "
    "depends on the cache length and the head dimensions, so a constant is wrong for every "
    "geometry but one. The cache-aware decision: {formula}.",
    "MLA008": "A constant cache length (`T < 1024`: materialise) decides the absorbed path "
    "before an otherwise exact formula: every step on a short cache, a verify step included, "
    "materialises where the formula says absorb. The cache-aware decision: {formula}.",
}


def text(report: ScanReport) -> str:
    lines = []
    for f in report.findings:
        note = f"  (allowlisted: {f.allowed})" if f.allowed else ""
        lines.append(f"{f.path}:{f.line}:{f.column}: {f.rule} {f.message}{note}")
        if f.suggestion and not f.allowed:
            lines.append(f"    fix: {f.suggestion}")
    failing = sum(f.failing for f in report.findings)
    allowed = sum(bool(f.allowed) for f in report.findings)
    if any(f.rule == "MLA001" and not f.allowed for f in report.findings):
        lines.append(f"the cache-aware decision: {scanfix.FORMULA}")
    lines.append(
        f"{report.files} files, {len(report.modules)} MLA modules, {len(report.guards)} "
        f"single-query guards; {failing} findings, {allowed} allowlisted"
    )
    if not report.parsed:
        lines.append(f"nothing scanned: no file could be parsed (exit {NOTHING_SCANNED})")
    return "\n".join(lines)


def as_json(report: ScanReport) -> str:
    return json.dumps(report.to_json(), indent=1)


def sarif(report: ScanReport) -> str:
    rules = [
        {
            "id": rid,
            "name": rid,
            "shortDescription": {"text": desc},
            "defaultConfiguration": {"level": LEVEL[rid]},
            "help": {"text": HELP[rid].format(formula=scanfix.FORMULA)},
        }
        for rid, desc in RULES.items()
    ]
    results = []
    for f in report.findings:
        result = {
            "ruleId": f.rule,
            "level": LEVEL[f.rule] if f.rule in FAILING or f.rule not in LEVEL else LEVEL[f.rule],
            "message": {
                "text": f.message + (f". Suggested change: {f.suggestion}" if f.suggestion else "")
            },
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": scanfix.uri(f.path)},
                        "region": {"startLine": f.line, "startColumn": f.column},
                    }
                }
            ],
        }
        fix = scanfix.sarif_fix(f)
        if fix:
            result["fixes"] = [fix]
        if f.allowed:
            result["suppressions"] = [{"kind": "external", "justification": f.allowed}]
        results.append(result)
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "mlagate", "version": __version__, "rules": rules}},
                "results": results,
            }
        ],
    }
    return json.dumps(doc, indent=1)


def github(report: ScanReport) -> str:
    def esc(value: str) -> str:
        return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

    def prop(value: str) -> str:
        return esc(value).replace(":", "%3A").replace(",", "%2C")

    lines = []
    for f in report.findings:
        kind = "error" if f.failing else ("notice" if f.allowed else "warning")
        message = (
            f.message
            + (f" (allowlisted: {f.allowed})" if f.allowed else "")
            + (f"\nSuggested change: {f.suggestion}" if f.suggestion else "")
        )
        where = f"file={prop(f.path)},line={f.line},col={f.column},title={f.rule}"
        lines.append(f"::{kind} {where}::{esc(message)}")
    return "\n".join(lines)


FORMATS = {"text": text, "json": as_json, "sarif": sarif, "github": github}
