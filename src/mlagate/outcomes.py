"""Gate outcomes: a result's verdict against its case's expectation.

- as expected: the verdict is the expected one (a control confirmed failing, a fix passing,
  an argued row argued);
- regression: expected pass, got fail;
- lost control: a control arm passed a suite that must fail on it (the suite lost its power);
- fixed: a known finding expected to fail now passes (the gate fails until the expectation is
  removed, as a strict xfail);
- invalid: the harness could not measure; missing: no result was written.

Exit status: 0 when every case is as expected, 1 on any regression, lost control or fixed,
3 when only invalid or missing cases stand in the way.
"""

from __future__ import annotations

OUTCOMES = ("as expected", "regression", "lost control", "fixed", "invalid", "missing")
RED = ("regression", "lost control", "fixed")


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
