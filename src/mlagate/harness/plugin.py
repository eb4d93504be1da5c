"""The pytest plugin: parametrises suites with the matrix's cases and records one result per case.

A suite is a pytest module `suites/<kind>/test_<suite>.py` whose tests take the `mla` fixture.
A test passes or fails with plain asserts; `Invalid` (or a worker crash) makes the case
invalid, never failed; an argued case is recorded without running anything.

This module holds the hooks and fixtures only. The case API the `mla` fixture returns is
mlagate.harness.case.CaseRun (its shapes in harness.shapes, its timing in harness.timing); what
the process knows about the run is mlagate.harness.context.Context.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlagate import lifeline, results
from mlagate.harness import Invalid, crashes, policy
from mlagate.harness.case import CaseRun
from mlagate.harness.context import Context
from mlagate.harness.crashes import pytest_handlecrashitem  # noqa: F401 - an xdist hook, found here by pytest
from mlagate.harness.timing import MAX_LOOPS, calibrated_loops  # noqa: F401 - importable here as before

RESULT_KEY = "mlagate_result"


def pytest_addoption(parser):
    """The hand-off, and where this process writes: everything else is in the hand-off."""
    g = parser.getgroup("mlagate")
    g.addoption(
        "--mlagate-handoff",
        default=None,
        help="OUT/plan.json written by mlagate run or mutate: the matrix, cases and arm installs",
    )
    g.addoption(
        "--mlagate-out",
        default="reports/latest",
        help="output directory; results go to OUT/results/",
    )
    g.addoption(
        "--mlagate-cache",
        default=None,
        help="arm cache directory (default: $MLAGATE_CACHE or ~/.cache/mlagate)",
    )
    g.addoption(
        "--mlagate-cpu",
        default="auto",
        help="pin every worker to this CPU: auto (Linux outside xdist: the highest CPU allowed), "
        "none, or a number",
    )


def pytest_configure(config):
    lifeline.watch_parent()  # under mlagate run: die with it (mlagate.lifeline)
    crashes.note_worker_pid(config)
    config.addinivalue_line(
        "markers", "mla_suite(name): the matrix suite this test module implements"
    )
    config.addinivalue_line(
        "markers",
        "mla_checkpoints: the suite loads checkpoints itself (every suite runs a held checkpoint "
        "through CaseRun.build)",
    )
    config._mlagate = None
    if config.getoption("--mlagate-handoff"):
        _context(config)  # the plan is read before collection: a bad one is a usage error


def _context(config) -> Context:
    if config._mlagate is None:
        config._mlagate = Context(config)
    return config._mlagate


def _suite_name(metafunc) -> str:
    marker = metafunc.definition.get_closest_marker("mla_suite")
    if marker:
        return marker.args[0]
    return Path(str(metafunc.definition.fspath)).stem.removeprefix("test_")


def pytest_generate_tests(metafunc):
    if "mla" not in metafunc.fixturenames:
        return
    ctx = _context(metafunc.config)
    cases = ctx.cases(_suite_name(metafunc))
    metafunc.parametrize("mla_case", cases, ids=[c.case_id.param for c in cases])


@pytest.fixture(scope="session")
def mla_context(request) -> Context:
    ctx = _context(request.config)
    yield ctx
    if ctx._pool is not None:
        ctx._pool.close()


@pytest.fixture
def mla(request, mla_context, mla_case):
    run = CaseRun(mla_context, mla_case)
    request.node._mla_run = run
    if mla_case.evidence == "argued":
        run.argue()
        pytest.skip(run.result.reason)
    if mla_context.matrix.suites[mla_case.suite].kind == "performance" and os.environ.get(
        "PYTEST_XDIST_WORKER"
    ):
        raise Invalid(
            "performance suites never run under xdist: run them serially (tox -e perf, or mlagate "
            "run without -n)"
        )
    yield run
    if mla_context._pool is not None:
        mla_context._pool.release()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    run: CaseRun | None = getattr(item, "_mla_run", None)
    if run is None:
        if (
            call.when == "setup"
            and call.excinfo is not None
            and "mla_case" in getattr(item, "fixturenames", ())
        ):
            case = item.callspec.params["mla_case"]
            run = CaseRun(_context(item.config), case)
            item._mla_run = run
        else:
            return
    if getattr(item, "_mla_written", False):
        return
    if call.when == "setup" and rep.skipped and run.result.verdict == "argued":
        path = run.finish("argued")
    elif call.when == "call" or (call.when == "setup" and call.excinfo is not None):
        end = policy.ending(call.excinfo.value if call.excinfo else None)
        if end.exception:
            run.result.metrics["exception"] = end.exception
        path = run.finish(end.verdict, end.reason, end.stderr, end.failure)
        if end.verdict == "invalid" and rep.outcome == "failed":
            rep.outcome = "skipped"
            rep.longrepr = (str(item.fspath), item.location[1] or 0, f"INVALID: {end.reason}")
    else:
        return
    item._mla_written = True
    rep.user_properties.append((RESULT_KEY, str(path)))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    paths = []
    for key in ("passed", "failed", "skipped"):
        for rep in terminalreporter.stats.get(key, []):
            paths.extend(v for k, v in getattr(rep, "user_properties", []) if k == RESULT_KEY)
    if not paths:
        return
    rows = [results.read(Path(p)) for p in sorted(set(paths)) if Path(p).exists()]
    terminalreporter.section("mlagate verdicts")
    terminalreporter.write_line(results.table(results.summarise(rows)))
