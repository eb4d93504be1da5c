"""JUnit XML from results, for CI test views.

Mapping: one <testcase> per case, classname "<suite>.<module>", name "<arm>/<geometry or
checkpoint>/<dtype>/<backend>"; pass: no child; fail: <failure>; invalid: <error> (the case
measured something other than its claim or could not measure: neither a pass nor a
failure of the code under test); argued: <skipped message="argued-not-measured: ...">.
A head run's report (mlagate.headrun) holds head's cases only, each judged relative to base:
a failure when that outcome is red, base's verdict in the details.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from mlagate import headrun, results
from mlagate.verdict import outcomes

# characters XML 1.0 cannot hold, even escaped
_BAD_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(s) -> str:
    return _BAD_XML.sub("?", "" if s is None else str(s))


def testcase_name(r: dict) -> tuple[str, str]:
    geo = results.geometry_label(r)
    return (
        f"{r['suite']}.{r['module']}",
        f"{r['arm']}/{geo}/{r.get('dtype', '')}/{r.get('backend', '')}",
    )


def render(rows: list[dict], missing: list[str] = (), head_run: dict | None = None) -> str:
    """JUnit XML: fail -> failure, invalid -> error, argued -> skipped; a planned case with no
    result (from `mlagate merge`) -> an error in the testsuite "missing". head_run: the merged
    document's, when it is a head run's."""
    if head_run:
        rows = [r for r in rows if r["case_id"] in head_run["cases"]]
        missing = [*missing, *head_run.get("missing", [])]
    root = ET.Element("testsuites", name="mlagate")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    by_suite: dict[str, list[dict]] = {}
    for r in rows:
        by_suite.setdefault(r["suite"], []).append(r)
    time_total = 0.0
    for suite in sorted(by_suite):
        counts, t = _testsuite(
            root, suite, sorted(by_suite[suite], key=lambda r: r["case_id"]), head_run
        )
        time_total += t
        for k in totals:
            totals[k] += counts[k]
    if missing:
        _missing_testsuite(root, missing)
        totals["tests"] += len(missing)
        totals["errors"] += len(missing)
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("time", f"{time_total:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _testsuite(
    root: ET.Element, suite: str, rs: list[dict], head_run: dict | None = None
) -> tuple[dict[str, int], float]:
    """One <testsuite> of a suite's results (sorted by case id); its counts and its time."""
    counts = {
        "tests": len(rs),
        "failures": sum(_red(r, head_run) for r in rs),
        "errors": sum(r["verdict"] == "invalid" for r in rs),
        "skipped": sum(r["verdict"] == "argued" for r in rs),
    }
    t = sum(float(r.get("duration_s") or 0) for r in rs)
    ts = ET.SubElement(
        root,
        "testsuite",
        name=_clean(suite),
        time=f"{t:.3f}",
        **{k: str(v) for k, v in counts.items()},
    )
    for r in rs:
        _testcase(ts, r, head_run)
    return counts, t


def _testcase(ts: ET.Element, r: dict, head_run: dict | None = None) -> None:
    """One <testcase> of a result: a failure when its outcome is red, the expectation as output
    for an expected fail, an error when invalid, skipped when argued; a flaky case's failed
    attempts as <flakyFailure> (Maven Surefire's element); its stderr's tail."""
    classname, name = testcase_name(r)
    tc = ET.SubElement(
        ts,
        "testcase",
        classname=_clean(classname),
        name=_clean(name),
        time=f"{float(r.get('duration_s') or 0):.3f}",
    )
    reason = _clean(r.get("reason", ""))
    outcome = headrun.outcome_in(head_run, r)
    case = (head_run or {}).get("cases", {}).get(r["case_id"])
    on_base = ""
    if case:
        on_base = "base: new case (no base counterpart)\n" if case["new_case"] else ""
        on_base = on_base or f"base: {case['base'] or 'missing'} at {head_run['base']['commit']}\n"
    failure = r.get("failure") or {}
    tries = results.history(r)
    reused = (
        f"reused: from {results.reused_from(r)} (result store {r['reused']['store']})\n"
        if r.get("reused")
        else ""
    )
    detail = _clean(
        f"{r.get('reason', '')}\ncase: {r['case_id']}\nevidence: {r.get('evidence')}\n"
        f"verdict: {r['verdict']} (expected {r.get('expected')}: "
        f"{r.get('expectation', '')})\n"
        + (f"failure kind: {', '.join(failure.get('kinds') or [])}\n" if failure else "")
        + (
            "attempts: " + ", ".join(f"{a['verdict']} ({a.get('run_id')})" for a in tries) + "\n"
            if len(tries) > 1
            else ""
        )
        + f"{on_base}{reused}replay: {r.get('replay', '')}"
    )
    if outcome == "flaky":
        for a in tries[:-1]:
            if a["verdict"] != r["verdict"]:
                ET.SubElement(
                    tc,
                    "flakyFailure",
                    message=_clean(f"attempt {a.get('run_id')}: {a.get('reason', '')}"),
                    type=a["verdict"],
                )
    if _red(r, head_run):
        ET.SubElement(
            tc,
            "failure",
            message=_clean(f"{outcome}: {r.get('reason', '')}"),
            type=outcome.replace(" ", "-"),
        ).text = detail
    elif r["verdict"] == "fail" or outcome in ("flaky", outcomes.FIXED_BY_CHANGE):
        ET.SubElement(tc, "system-out").text = _clean(
            f"{outcome}"
            + (" (its suite may retry)" if outcome == "flaky" else "")
            + f": {r.get('expectation', '')}\n{detail}"
        )
    elif r["verdict"] == "invalid":
        ET.SubElement(tc, "error", message=f"invalid: {reason}", type="invalid").text = detail
    elif r["verdict"] == "argued":
        ET.SubElement(tc, "skipped", message=f"argued-not-measured: {reason}")
    elif reused:
        ET.SubElement(tc, "system-out").text = _clean(reused.strip())
    if r.get("stderr"):
        ET.SubElement(tc, "system-err").text = _clean(r["stderr"][-8000:])


def _red(r: dict, head_run: dict | None) -> bool:
    """A red outcome: relative to base for a head case of a head run, else the row's own."""
    if head_run and r["case_id"] in head_run["cases"]:
        return outcomes.is_red(headrun.outcome_in(head_run, r), bool(head_run.get("strict")))
    return outcomes.red(r)


def _missing_testsuite(root: ET.Element, missing: list[str]) -> None:
    """The testsuite "missing": one error per planned case with no result."""
    ts = ET.SubElement(
        root,
        "testsuite",
        name="missing",
        time="0.000",
        tests=str(len(missing)),
        failures="0",
        errors=str(len(missing)),
        skipped="0",
    )
    for cid in missing:
        tc = ET.SubElement(ts, "testcase", classname="missing", name=_clean(cid), time="0.000")
        ET.SubElement(
            tc,
            "error",
            message="missing: the plan holds this case and no result was written",
            type="missing",
        )
