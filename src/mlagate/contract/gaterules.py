"""Rules between a suite's gates (a contract's `gate_check`), checked when the matrix is read:
each gives the gate key at fault and why, or None."""

from __future__ import annotations

from collections.abc import Callable, Mapping


def _batch_rows(rule: Mapping, g: Mapping) -> tuple[str, str] | None:
    """The rows that leave name rows of the batch (and of the cold batch) and leave one at
    least; each per-row count is below the widest width (a verify keeps its first token) and
    there are no more counts than rows they are cycled over (the rest would never be used)."""
    rows, leave = len(g[rule["rows"]]), list(g.get(rule["leave"]) or [])
    cold = len(g.get(rule["cold_rows"]) or [])
    if len(set(leave)) != len(leave):
        return rule["leave"], f"{leave} names a row twice"
    for n, what in ((rows, rule["rows"]), (cold, rule["cold_rows"])):
        if leave and n and max(leave) >= n:
            return rule["leave"], f"row {max(leave)} is not a row of {what} ({n} rows)"
        if leave and n and len(leave) >= n:
            return rule["leave"], f"every row of {what} leaves: at least one must stay"
    w = max(g[rule["widths"]])
    for key, over in [(k, rows) for k in rule["counts"]] + [
        (k, rows - len(leave)) for k in rule["kept_counts"]
    ]:
        counts = list(g.get(key) or [])
        if any(n >= w for n in counts):
            return key, f"{max(counts)} is not below the widest width {w} (a verify keeps one)"
        if len(counts) > over:
            return key, f"{len(counts)} counts for {over} rows: the last would never be used"
    return None


GATE_RULES: dict[str, Callable[[Mapping, Mapping], tuple[str, str] | None]] = {
    "batch_rows": _batch_rows,
}
