"""An xdist worker that dies while running a case: the case is recorded invalid, with the
worker's crash report, the tails of its arm workers' logs and the replay line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlagate import results

PID_FILE = "xdist-{worker}.pid"


def note_worker_pid(config) -> None:
    """In an xdist worker of a matrix run: record its pid, which names its arm workers' logs
    (OUT/logs/worker-ARM-PID-*.log)."""
    from mlagate import lifeline

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and (config.getoption("--mlagate-handoff") or os.environ.get(lifeline.RUN_ENV)):
        out = Path(config.getoption("--mlagate-out"))
        (out / "logs").mkdir(parents=True, exist_ok=True)
        (out / "logs" / PID_FILE.format(worker=worker)).write_text(str(os.getpid()))


def _log_tails(out: Path, worker: str, limit: int = 4000) -> str:
    try:
        pid = (out / "logs" / PID_FILE.format(worker=worker)).read_text().strip()
    except OSError:
        return ""
    tails = []
    for log in sorted((out / "logs").glob(f"worker-*-{pid}-*.log")):
        text = log.read_text(errors="replace")[-limit:]
        tails.append(f"--- {log.name} (last {len(text)} chars)\n{text}")
    return "\n".join(tails)


def record_crash(ctx, nodeid: str, report) -> Path | None:
    """Write an invalid result for the crashed case; None when the node is not a matrix case."""
    path, _, param = nodeid.partition("::")
    suite = Path(path).stem.removeprefix("test_")
    if "[" not in param or suite not in ctx.matrix.suites:
        return None
    param = param.split("[", 1)[1].rstrip("]")
    case = next((c for c in ctx.cases(suite) if c.case_id.param == param), None)
    if case is None:
        return None
    worker = getattr(getattr(report, "node", None), "workerinfo", {}).get("id", "?")
    replay = case.replay() + f" --matrix {ctx.matrix.path}"
    stderr = f"{report.longreprtext}\n{_log_tails(ctx.out, worker)}".strip()
    result = results.Result(
        case=case.to_json(),
        verdict="invalid",
        evidence=case.evidence,
        replay=replay,
        reason=f"the pytest-xdist worker {worker} crashed running this case",
        stderr=stderr,
    )
    return results.write(result, ctx.out / "results", case.file_stem)


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    config = sched.config
    ctx = getattr(
        config, "_mlagate", None
    )  # the plugin's context, made at configure under mlagate run
    if ctx is None:
        return
    try:
        path = record_crash(ctx, crashitem, report)
    except Exception as exc:  # noqa: BLE001 - recording the crash must never stop the session
        print(
            f"mlagate: warning: could not record the crash of {crashitem}:"
            f" {type(exc).__name__}: {exc}"
        )
        return
    if path is not None:
        first = report.longreprtext.splitlines()[0] if report.longreprtext else ""
        report.longrepr = f"INVALID (worker crashed): {first}"
        report.user_properties.append(("mlagate_result", str(path)))
