"""What a suite raises: Failed (a gate did not hold, with its failure kinds) or Invalid (the
harness could not measure)."""

from __future__ import annotations

from collections.abc import Sequence

Problem = tuple[str, str]  # (failure kind, what went wrong)


class Invalid(Exception):
    """The case measured something other than what it claims, or could not measure: invalid,
    never failed. Raise it only after every mismatch already found has been asserted."""


class Failed(AssertionError):
    """A gate did not hold. kinds: the failure kinds seen (its contract's failure_kinds), the
    first problem's kind first; details: what the report needs to tell one failure from
    another."""

    def __init__(self, kinds: Sequence[str], message: str, details: dict | None = None):
        super().__init__(message)
        self.kinds = tuple(dict.fromkeys(kinds))
        self.details = dict(details or {})


def check(problems: Sequence[Problem], shown: int = 3, more: bool = True, **details) -> None:
    """Fail on the problems found, (kind, text) each: the first `shown` texts (and, with more,
    how many were left out), their kinds."""
    if not problems:
        return
    more = f" (+{len(problems) - shown} more)" if more and len(problems) > shown else ""
    counts: dict[str, int] = {}
    for kind, _ in problems:
        counts[kind] = counts.get(kind, 0) + 1
    raise Failed(
        [k for k, _ in problems],
        "; ".join(t for _, t in problems[:shown]) + more,
        {"problems": len(problems), "per_kind": counts, **details},
    )


def give_up(why: str, problems: Sequence[Problem] = (), shown: int = 3) -> None:
    """Raise Invalid(why), but first fail on the mismatches already found: a check that could
    not finish never hides what it had already seen go wrong."""
    check(problems, shown)
    raise Invalid(why)
