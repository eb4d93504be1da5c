"""The one failure policy: how the way a case ended becomes its verdict.

- fail: a gate did not hold (Failed, with the suite's failure kinds; a bare assertion is kind
  `unclassified`, which no expectation names), or the runtime under test raised (kind
  `runtime_raised`; its traceback enters the arm's own folder: module, cache, rollback), with
  the exception and where.
- invalid: the harness could not measure: Invalid, a worker that crashed, hung, ran out of
  memory or broke the protocol, an error outside the runtime's code, a missing arm.
- pass: the test returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from mlagate.harness.errors import Failed, Invalid
from mlagate.harness.supervisor import RuntimeRaised, WorkerError

TRACEBACK_LINES = 12
RUNTIME_RAISED = "runtime_raised"  # a failure kind every suite can produce
UNCLASSIFIED = "unclassified"  # a bare assertion: a fail no expectation names


@dataclass(frozen=True)
class Ending:
    verdict: str
    reason: str
    stderr: str = ""
    exception: dict = field(default_factory=dict)
    failure: dict | None = None  # a fail's kind, every kind seen, and details


def _failure(kinds, details: dict | None = None) -> dict:
    kinds = list(kinds) or [UNCLASSIFIED]
    return {"kind": kinds[0], "kinds": kinds, "details": dict(details or {})}


def _first_line(text: str, fallback: str) -> str:
    text = text.strip()
    return text.splitlines()[0] if text else fallback


def _tail(text: str) -> str:
    return "\n".join(text.rstrip().splitlines()[-TRACEBACK_LINES:])


def ending(exc: BaseException | None) -> Ending:
    """The verdict and reason of a case that ended with exc (None: it returned)."""
    if exc is None:
        return Ending("pass", "all gates held")
    if isinstance(exc, RuntimeRaised):
        info = {
            "type": "runtime",
            "message": str(exc),
            "at": exc.at,
            "traceback": _tail(exc.traceback),
        }
        return Ending(
            "fail",
            f"the runtime raised: {_first_line(str(exc), 'an exception')}",
            exc.stderr,
            info,
            _failure([RUNTIME_RAISED], {"at": exc.at}),
        )
    if isinstance(exc, Failed):
        return Ending(
            "fail", _first_line(str(exc), "failed"), failure=_failure(exc.kinds, exc.details)
        )
    if isinstance(exc, (AssertionError, pytest.fail.Exception)):
        return Ending("fail", _first_line(str(exc), type(exc).__name__), failure=_failure([]))
    if isinstance(exc, Invalid):
        return Ending("invalid", f"Invalid: {_first_line(str(exc), 'could not measure')}")
    if isinstance(exc, WorkerError):
        info = {"type": "harness", "message": str(exc), "traceback": _tail(exc.traceback)}
        return Ending(
            "invalid", f"WorkerError: {_first_line(str(exc), 'worker failed')}", exc.stderr, info
        )
    if isinstance(exc, pytest.skip.Exception):
        return Ending("invalid", f"skipped: {exc}")
    where = exc.__traceback__
    while where is not None and where.tb_next is not None:
        where = where.tb_next
    at = (
        f" at {where.tb_frame.f_code.co_filename.rsplit('/', 1)[-1]}:{where.tb_lineno}"
        if where
        else ""
    )
    message = f"{type(exc).__name__}: {_first_line(str(exc), '')}"
    return Ending(
        "invalid",
        f"harness error (mlagate or the suite, not the runtime): {message}{at}",
        exception={"type": "harness", "message": message + at},
    )
