"""Older documents brought to the current schema, one version at a time (as asv's
`update_to_N`): mlagate.documents validates a document against the schema it was written in,
then runs these in order and validates the result against the current schema. A step keyed
None upgrades a document written before its kind had a `schema` field."""

from __future__ import annotations

import re

UNRECORDED = "unrecorded"  # the failure kind of a fail written before kinds were recorded


def result_to_2(doc: dict) -> dict:
    """mlagate.result/1 -> /2. The expectation a /1 result lacked is what its verdict was judged
    by (a fail: regression, anything else: as expected), so no verdict or outcome changes; a
    fail's kind was not recorded (`unrecorded`, confirming any expected kind); it has no earlier
    attempts and no health record."""
    out = dict(doc)
    verdict = doc["verdict"]
    expected = doc.get("expected")
    if expected not in ("pass", "fail", "argued"):
        expected = "argued" if verdict == "argued" else "pass"
    out.update(
        schema="mlagate.result/2",
        upgraded_from=doc["schema"],
        expected=expected,
        control=bool(doc.get("control")),
        expected_kinds=[],
        retry=False,
        failure=(
            {"kind": UNRECORDED, "kinds": [UNRECORDED], "details": {}}
            if verdict == "fail"
            else None
        ),
        attempts=[],
        health=None,
    )
    return out


_NAMED_BASELINE = re.compile(r"\(baseline ([^)\s]+)\)$")


def result_to_3(doc: dict) -> dict:
    """mlagate.result/2 -> /3. A /2 result named a patched arm's baseline only at the end of its
    expectation, `patched arm (baseline ARM)` (written so since the baseline pairing began), the
    one place that text is read: /3 carries it as `baseline` (null for every other case)."""
    named = _NAMED_BASELINE.search(str(doc.get("expectation", "")))
    baseline = named.group(1) if named and doc.get("expected") == "pass" else None
    written = doc.get("upgraded_from", doc["schema"])
    return {**doc, "schema": "mlagate.result/3", "upgraded_from": written, "baseline": baseline}


def arm_to_1(doc: dict) -> dict:
    """An arm.json written before it had a schema field -> mlagate.arm/1. Such a manifest was
    written by the same install with fewer keys: no notes, nothing activate installed."""
    return {
        "schema": "mlagate.arm/1",
        **doc,
        "activate_install": doc.get("activate_install", []),
        "notes": doc.get("notes", []),
    }


# kind -> {older schema: (the schema file it validates against, the step to the next version)}
STEPS = {
    "result": {
        "mlagate.result/1": ("result-1", result_to_2),
        "mlagate.result/2": ("result-2", result_to_3),
    },
    "arm": {None: ("arm-0", arm_to_1)},
}
