"""Performance runs start with the health check: warn on an unfit machine, refuse with --strict (exit 3)."""

import argparse

import pytest

from mlagate import runcli
from mlagate.matrix import load
from mlagate.plan import Selection
from tests.conftest import FIXTURES
from tests.test_health import linux


def _linux(load):
    return linux(**{"/proc/loadavg": load})


def test_a_busy_machine_warns_and_strict_refuses(capsys):
    matrix = load(FIXTURES / "fake-perf.yaml")
    perf = Selection(suites=("l1_parity",))
    runcli.performance_health(argparse.Namespace(strict=False), matrix, perf, "cpu", _linux("loadavg-busy.txt"))
    assert "mlagate: warning: unfit for timings: load: 1-minute load" in capsys.readouterr().err
    with pytest.raises(runcli.Refused, match="--strict: this machine fails 1 performance health check"):
        runcli.performance_health(argparse.Namespace(strict=True), matrix, perf, "cpu", _linux("loadavg-busy.txt"))
    runcli.performance_health(argparse.Namespace(strict=True), matrix, perf, "cpu", _linux("loadavg-idle.txt"))
    assert capsys.readouterr().err == ""


def test_correctness_runs_skip_the_performance_check(capsys):
    matrix = load(FIXTURES / "fake-perf.yaml")
    kinds = {s: matrix.suites[s].kind for s in matrix.suites}
    correctness = tuple(s for s, k in kinds.items() if k == "correctness")
    if not correctness:
        matrix = load(FIXTURES / "fake-matrix.yaml")
        correctness = tuple(matrix.suites)
    runcli.performance_health(argparse.Namespace(strict=True), matrix, Selection(suites=correctness), "cpu", _linux("loadavg-busy.txt"))
    assert capsys.readouterr().err == ""


def test_tox_envs_call_mlagate_run():
    text = (FIXTURES.parents[1] / "tox.ini").read_text()
    assert "commands = mlagate run --kind performance" in text and "commands = mlagate run --kind correctness" in text
