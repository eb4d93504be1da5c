"""Gate outcomes: a result's verdict against its case's expectation.

- as expected: the verdict is the expected one (a control confirmed failing, a fix passing,
  an argued row argued);
- regression: expected pass, got fail;
- lost control: a control arm passed a suite that must fail on it (the suite lost its power);
- fixed: a known finding expected to fail now passes (the gate fails until the expectation is
  removed, as a strict xfail);
- invalid: the harness could not measure; missing: no result was written.

A head run (mlagate run --head) judges each case of head against the same case on base
(`relative`): fixed by this change (fail on base, pass on head), regression (pass on base, fail
on head), still failing as on base (fail on both, with the same failure kinds: red only when
asked, `is_red(.., strict)`), changed failure (fail on both, of other kinds: red);
a head case with no base counterpart is a *new case*, judged by its expectation as above.

Exit status: 0 when every case is as expected, 1 on any regression, lost control or fixed,
3 when only invalid or missing cases stand in the way.
"""

from __future__ import annotations

OUTCOMES = (
    "as expected",
    "fixed by this change",
    "changed failure",
    "regression",
    "still failing as on base",
    "flaky",
    "lost control",
    "fixed",
    "invalid",
    "missing",
)
RED = ("changed failure", "regression", "flaky", "lost control", "fixed")
FIXED_BY_CHANGE, STILL_FAILING = "fixed by this change", "still failing as on base"
RELATIVE = (FIXED_BY_CHANGE, STILL_FAILING)  # only a head run has them
NEW_CASE = "new case"  # a flag of a head case without base counterpart, not an outcome


def outcome(row: dict) -> str:
    verdict = row["verdict"]
    if verdict == "invalid":
        return "invalid"
    expected = row.get("expected")
    if expected is None:  # a result written before expectations existed: judged by its verdict
        return "regression" if verdict == "fail" else "as expected"
    if verdict == expected:
        return "as expected"
    if expected == "pass" and verdict == "fail":
        return "regression"
    if expected == "fail" and verdict == "pass":
        return "lost control" if row.get("control") else "fixed"
    return "regression"  # e.g. a row argued where a measurement was planned


def relative(head_row: dict, base_row: dict | None) -> str:
    """What the change did to one case: head's verdict against base's on the same case.

    Without a base verdict to compare with (a new case, or base invalid or missing) and where
    head's own outcome says more than a verdict can (invalid, flaky, changed failure), head's
    own outcome stands."""
    own = outcome(head_row)
    if base_row is None or own in ("invalid", "flaky", "changed failure"):
        return own
    head, base = head_row["verdict"], base_row["verdict"]
    if (head, base) == ("pass", "fail"):
        return FIXED_BY_CHANGE
    if (head, base) == ("fail", "pass"):
        return "regression"
    if (head, base) == ("fail", "fail"):
        same = not _kinds(head_row) or not _kinds(base_row) or _kinds(head_row) == _kinds(base_row)
        return STILL_FAILING if same else "changed failure"
    if head == base == "pass":
        return "as expected"
    return own  # base invalid or argued: nothing to compare with


def _kinds(row: dict) -> frozenset:
    """The failure kinds a fail names (none for a result that names none)."""
    failure = row.get("failure") or {}
    return frozenset(failure.get("kinds") or [failure.get("kind")]) - {None}


def is_red(name: str, strict: bool = False) -> bool:
    """Whether an outcome keeps the gate red; with strict a case still failing as on base too."""
    return name in RED or (strict and name == STILL_FAILING)


def counts(rows: list[dict], missing: int = 0) -> dict[str, int]:
    out = {o: 0 for o in OUTCOMES}
    for r in rows:
        out[outcome(r)] += 1
    out["missing"] += missing
    return out


def exit_code(tally: dict[str, int]) -> int:
    if any(tally.get(o, 0) for o in RED):
        return 1
    if tally.get("invalid", 0) or tally.get("missing", 0):
        return 3
    return 0


def controls_line(rows: list[dict]) -> str | None:
    """One line on the control arms: how many of their must-fail cases failed, per suite."""
    controls = [r for r in rows if r.get("control")]
    if not controls:
        return None
    confirmed = [r for r in controls if r["verdict"] == "fail"]
    suites = sorted({r["suite"] for r in controls})
    lost = len([r for r in controls if r["verdict"] == "pass"])
    line = (
        f"controls: {len(confirmed)} of {len(controls)} control cases confirmed failing "
        f"({', '.join(suites)})"
    )
    if len(confirmed) == len(controls):
        return line + ": every stock control fails as it must"
    return line + f"; {lost} lost control, {len(controls) - len(confirmed) - lost} not measured"
