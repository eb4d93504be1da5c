"""Gate outcomes: a result's verdict (and failure kind, and earlier attempts) against its case's
expectation.

- as expected: the verdict is the expected one (a control failing with a kind its defect
  produces, a fix passing, an argued row argued);
- changed failure: expected to fail, and failed, but with a failure kind the expectation does
  not name (a control failing for another reason than its defect, a known finding failing in
  a new way);
- regression: expected pass, got fail;
- not fixed: a patched arm expected to pass failed exactly as its baseline arm did on the same
  case (the same failure kinds, in the same run): its patch leaves the case as it was; red;
- flaky: as expected at the end, but an earlier attempt of the case (a retry, --resume,
  --failed) measured the other verdict; red unless the matrix lets its suite retry
  (`suites.<id>.retry: true`);
- lost control: a control arm passed a suite that must fail on it (the suite lost its power);
- fixed: a known finding expected to fail now passes (the gate fails until the expectation is
  removed, as a strict xfail);
- invalid: the harness could not measure; missing: no result was written;
- cannot import: the case's build raised on importing a package other than the one of the file
  that imported it (a module that cannot be imported where it was found: a file meant to be
  copied over another runtime's); nothing was measured;
- cannot build (head runs): head and base both raised while building: a build the harness
  cannot do, nothing measured on either side.
A known finding that expects the case to fail (matrix.yaml's expectations) keeps the usual
outcomes: the matrix argues that failure.

A head run (mlagate run --head) judges each case of head against the same case on base
(`relative`): fixed by this change (fail on base, pass on head), regression (pass on base, fail
on head), still failing as on base (fail on both, with the same failure kinds: red only when
asked, `is_red(.., strict)`; never when both failed to build: cannot import or cannot build),
changed failure (fail on both, of other kinds: red); changed configuration (a serving case whose
configuration went worse than on base: equal there, not served or differing here; one that
base served and head no longer covers: red, whatever the two verdicts);
a head case with no base counterpart is a *new case*, judged by its expectation as above.


Exit status (the table below, docs/gate.md): 0 when every case is as expected (or flaky where
its suite may retry), 1 on any red outcome, 3 when only invalid or missing cases stand in the
way (or a case that cannot import or cannot build).
"""

from __future__ import annotations

import re

from mlagate.caseid import CaseId
from mlagate.matrix.findings import FINDING_FIXED

OUTCOMES = (
    "as expected",
    "fixed by this change",
    "changed failure",
    "regression",
    "not fixed",
    "still failing as on base",
    "changed configuration",
    "flaky",
    "lost control",
    "fixed",
    "invalid",
    "cannot import",
    "cannot build",
    "missing",
)
CHANGED_CONFIGURATION = "changed configuration"
RED = (
    "changed failure",
    "regression",
    "not fixed",
    "flaky",
    "lost control",
    "fixed",
    CHANGED_CONFIGURATION,
)
FIXED_BY_CHANGE, STILL_FAILING = "fixed by this change", "still failing as on base"
RELATIVE = (FIXED_BY_CHANGE, STILL_FAILING, CHANGED_CONFIGURATION)  # only a head run has them
# a serving configuration's outcomes from best to worst (mlagate.harness.configurations)
CONFIGURATION_RANK = {"equal": 0, "cannot serve": 1, "differs": 2, "raised": 2}
CANNOT_IMPORT, CANNOT_BUILD = "cannot import", "cannot build"
NOT_MEASURED_OUTCOMES = ("invalid", CANNOT_IMPORT, CANNOT_BUILD, "missing")  # exit 3
NEW_CASE = "new case"  # a flag of a head case without base counterpart, not an outcome
FLAKY_ALLOWED = "flaky, suite may retry"  # a counts() key: the flaky cases that are not red

# the one exit-code table of every verb (docs/gate.md)
GREEN, RED_EXIT, BAD_INPUT, NOT_MEASURED, INTERRUPTED = 0, 1, 2, 3, 130


def kinds_match(row: dict) -> bool:
    """A fail's kinds are all among those its expectation names (none named: any kind)."""
    wanted = set(row.get("expected_kinds") or ())
    failure = row.get("failure") or {}
    return not wanted or set(failure.get("kinds") or [failure.get("kind")]) <= wanted


def flaky(row: dict) -> bool:
    """An earlier attempt measured the other verdict (pass against fail; invalid ones never
    count: they measured nothing)."""
    measured = {a["verdict"] for a in row.get("attempts") or ()} | {row["verdict"]}
    return {"pass", "fail"} <= measured


def _argued_fail(row: dict) -> bool:
    """A known finding of the matrix expects this case to fail."""
    return row.get("expected") == "fail" and str(row.get("expectation", "")).startswith(
        "known finding"
    )


def build_failure(row: dict) -> str | None:
    """How a case's build raised: "import" for a ModuleNotFoundError naming a package other
    than the one of the file that imported it (`failure.details.at`), "build" for any other
    exception of the build; None when the build went through (or the matrix argues the fail)."""
    if row.get("verdict") != "fail" or "runtime_raised" not in _kinds(row) or _argued_fail(row):
        return None
    reason = row.get("reason", "")
    raised = re.match(r"the runtime raised: build failed in \S+: (\w+): (.*)", reason)
    if raised is None:
        return None
    missing = re.match(r"No module named '([\w.]+)'", raised.group(2))
    at = ((row.get("failure") or {}).get("details") or {}).get("at") or ""
    if (
        raised.group(1) == "ModuleNotFoundError"
        and missing
        and at
        and missing.group(1).split(".")[0] != at.split("/")[0]
    ):
        return "import"
    return "build"


def outcome(row: dict) -> str:
    verdict = row["verdict"]
    if verdict == "invalid":
        return "invalid"
    if build_failure(row) == "import":
        return CANNOT_IMPORT
    expected = row.get("expected") or ("argued" if verdict == "argued" else "pass")
    if verdict == expected:
        if verdict == "fail" and not kinds_match(row):
            return "changed failure"
        return "flaky" if flaky(row) else "as expected"
    if expected == "pass" and verdict == "fail":
        return "not fixed" if row.get("as_baseline") else "regression"
    if expected == "fail" and verdict == "pass":
        return "lost control" if row.get("control") else "fixed"
    return "regression"  # e.g. a row argued where a measurement was planned


def relative(head_row: dict, base_row: dict | None) -> str:
    """What the change did to one case: head's verdict against base's on the same case.

    Without a base verdict to compare with (a new case, or base invalid or missing) and where
    head's own outcome says more than a verdict can (invalid, flaky, changed failure), head's
    own outcome stands."""
    own = outcome(head_row)
    if base_row is not None and build_failure(head_row) and build_failure(base_row):
        both = (build_failure(head_row), build_failure(base_row))
        return CANNOT_IMPORT if "import" in both else CANNOT_BUILD
    if (
        base_row is None
        or own in ("invalid", "changed failure", CANNOT_IMPORT)
        or (own == "flaky" and red(head_row))
    ):
        return own
    head, base = head_row["verdict"], base_row["verdict"]
    if head != "invalid" and base != "invalid" and worse_configurations(head_row, base_row):
        return CHANGED_CONFIGURATION
    if (head, base) == ("pass", "fail"):
        return FIXED_BY_CHANGE
    if (head, base) == ("fail", "pass") and _kinds(head_row) == {FINDING_FIXED}:
        return FIXED_BY_CHANGE  # what base cannot serve, head serves and equal
    if (head, base) == ("fail", "pass"):
        return "regression"
    if (head, base) == ("fail", "fail"):
        same = not _kinds(head_row) or not _kinds(base_row) or _kinds(head_row) == _kinds(base_row)
        return STILL_FAILING if same else "changed failure"
    if head == base == "pass":
        return "as expected"
    return own  # base invalid or argued: nothing to compare with


def worse_configurations(head_row: dict, base_row: dict) -> list[str]:
    """The serving configurations (metrics.configurations) whose outcome on head is worse than
    on base, or that base covered and head does not: "LABEL: equal -> cannot serve"."""
    theirs = ((base_row.get("metrics") or {}).get("configurations")) or {}
    ours = ((head_row.get("metrics") or {}).get("configurations")) or {}
    out = []
    for label, b in theirs.items():
        h = ours.get(label, {"outcome": "not covered"})
        rank = CONFIGURATION_RANK.get(h["outcome"], 3)
        if rank > CONFIGURATION_RANK.get(b["outcome"], 3) or (
            rank == CONFIGURATION_RANK["differs"] and b["outcome"] != h["outcome"]
        ):
            out.append(f"{label}: {b['outcome']} -> {h['outcome']}")
    return out


def mark_as_baseline(rows: list[dict]) -> list[dict]:
    """Mark (`as_baseline`: the baseline arm) each failing row of a patched arm whose baseline's
    row of the same case (its `baseline` field), among rows, failed with the same failure kinds
    (in place)."""
    by_id = {r["case_id"]: r for r in rows}
    for r in rows:
        baseline = r.get("baseline")
        if r["verdict"] != "fail" or r.get("expected") != "pass" or not baseline:
            continue
        other = by_id.get(str(CaseId.parse(r["case_id"]).on_arm(baseline)))
        if other and other["verdict"] == "fail" and _kinds(other) == _kinds(r):
            r["as_baseline"] = baseline
    return rows


def _kinds(row: dict) -> frozenset:
    """The failure kinds a fail names (none for a result that names none)."""
    failure = row.get("failure") or {}
    return frozenset(failure.get("kinds") or [failure.get("kind")]) - {None}


def is_red(name: str, strict: bool = False) -> bool:
    """Whether an outcome keeps the gate red; with strict a case still failing as on base too."""
    return name in RED or (strict and name == STILL_FAILING)


def red(row: dict) -> bool:
    o = outcome(row)
    return o in RED and not (o == "flaky" and row.get("retry"))


def counts(rows: list[dict], missing: int = 0) -> dict[str, int]:
    out = {o: 0 for o in OUTCOMES}
    out[FLAKY_ALLOWED] = 0
    for r in rows:
        o = outcome(r)
        out[o] += 1
        out[FLAKY_ALLOWED] += o == "flaky" and bool(r.get("retry"))
    out["missing"] += missing
    return out


def exit_code(tally: dict[str, int]) -> int:
    flaky_red = tally.get("flaky", 0) - tally.get(FLAKY_ALLOWED, 0)
    if flaky_red > 0 or any(tally.get(o, 0) for o in RED if o != "flaky"):
        return RED_EXIT
    if any(tally.get(o, 0) for o in NOT_MEASURED_OUTCOMES):
        return NOT_MEASURED
    return GREEN


def controls_line(rows: list[dict]) -> str | None:
    """One line on the control arms: how many of their must-fail cases failed with a kind their
    defect produces, per suite."""
    controls = [r for r in rows if r.get("control")]
    if not controls:
        return None
    confirmed = [r for r in controls if r["verdict"] == "fail" and kinds_match(r)]
    changed = [r for r in controls if r["verdict"] == "fail" and not kinds_match(r)]
    lost = [r for r in controls if r["verdict"] == "pass"]
    suites = sorted({r["suite"] for r in controls})
    line = (
        f"controls: {len(confirmed)} of {len(controls)} control cases confirmed failing by "
        f"their failure kind ({', '.join(suites)})"
    )
    if len(confirmed) == len(controls):
        return line + ": every stock control fails as it must"
    rest = len(controls) - len(confirmed) - len(changed) - len(lost)
    return line + f"; {len(changed)} changed failure, {len(lost)} lost control, {rest} not measured"
