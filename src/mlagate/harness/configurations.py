"""A serving case's verdict per configuration (row layout, path, step, bit width, window, reuse
route): each configuration it covers is judged on its own and recorded in the result's metrics
(`configurations`), one outcome each:

- equal: served, and every row and step within its budgets;
- differs: a row, step or check over its budget (where: the first problem);
- cannot serve: the runtime raised (`how: raises`) or its own API says it has no way
  (`how: probe`: the worker's not_servable or not_expressible) where matrix.yaml's
  `unservable` declares it against a named finding: listed with the runtime's own reason,
  never failed;
- raised: the runtime raised where nothing declares the configuration unservable: a failure
  with its location (kind runtime_raised), as a probe's refusal nothing declares is one of its
  kind (not_servable, not_expressible).

A case passes when every configuration is equal or cannot serve; a configuration that a
declaration naming its modules says is unservable, but served and equal after all, fails the
case (kind finding_fixed: the finding no longer holds there, as a known fail that passes is red
until its expectation goes).
"""

from __future__ import annotations

from mlagate.matrix import Unservable
from mlagate.matrix.findings import FINDING_FIXED

EQUAL, DIFFERS, CANNOT, RAISED = "equal", "differs", "cannot serve", "raised"
OUTCOMES = (EQUAL, DIFFERS, CANNOT, RAISED)
HOW = {"runtime_raised": "raises", "not_servable": "probe", "not_expressible": "probe"}


class Configurations:
    """The configurations of one case, judged as they are served; `problems` what fails it."""

    def __init__(self, mla):
        c = mla.case
        self.declared: list[Unservable] = [
            u for u in mla.ctx.matrix.unservable if u.holds_for(c.suite, c.module, c.arm, c.backend)
        ]
        self.table: dict[str, dict] = {}
        self.problems: list[tuple[str, str]] = []

    def judge(self, label: str, found: list[tuple[str, str]]) -> dict:
        """Record the configuration `label` from the problems its checks found; the problems that
        fail the case go to self.problems."""
        cannot, rest = [], []
        for kind, text in found:
            finding = self._finding(label, kind, text)
            (cannot if finding else rest).append((kind, text, finding))
        entry: dict = {}
        if rest:
            raised = [t for k, t, _ in rest if k == "runtime_raised"]
            differs = [t for k, t, _ in rest if k not in HOW]
            entry["outcome"] = DIFFERS if differs else RAISED if raised else CANNOT
            entry["where"] = (differs or raised or [rest[0][1]])[0]
            self.problems += [(k, t) for k, t, _ in rest]
        elif cannot:
            kind, text, finding = cannot[0]
            entry = {"outcome": CANNOT, "finding": finding.finding, "reason": text}
        else:
            entry["outcome"] = EQUAL
            stale = next((u for u in self.declared if u.modules and u.covers(label)), None)
            if stale is not None:
                entry["finding"] = stale.finding
                self.problems.append(
                    (
                        FINDING_FIXED,
                        f"{label}: served and equal, but matrix.yaml's unservable declares it "
                        f"(finding {stale.finding}): the finding no longer holds here",
                    )
                )
        if cannot and rest:
            entry["finding"] = cannot[0][2].finding
        self.table[label] = entry
        return entry

    def _finding(self, label: str, kind: str, text: str) -> Unservable | None:
        how = HOW.get(kind)
        return next(
            (u for u in self.declared if u.how == how and u.covers(label) and u.match in text),
            None,
        )

    def record(self, mla) -> None:
        mla.metric("configurations", self.table)
        findings = {}
        for label, e in self.table.items():
            if e["outcome"] == CANNOT and "finding" in e:
                findings.setdefault(e["finding"], []).append(label)
        mla.metric("findings", findings)


def counts(table: dict) -> dict[str, int]:
    """How many configurations of a `configurations` metric had each outcome."""
    out = dict.fromkeys(OUTCOMES, 0)
    for e in table.values():
        out[e["outcome"]] += 1
    return out
