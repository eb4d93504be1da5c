"""Performance runs start with the health check: warn on an unfit machine, refuse with --strict
(exit 3)."""

import argparse

import pytest

from mlagate.commands import runopts as runcli
from mlagate.machine import health
from mlagate.matrix import load
from mlagate.plan import Selection
from tests.conftest import FIXTURES
from tests.test_health import PS, linux


def _linux(load):
    return linux(**{"/proc/loadavg": load})


def test_a_busy_machine_warns_and_strict_refuses(capsys):
    matrix = load(FIXTURES / "fake-perf.yaml")
    perf = Selection(suites=("l1_parity",))
    runcli.performance_health(
        argparse.Namespace(strict=False), matrix, perf, "cpu", _linux("loadavg-busy.txt")
    )
    assert "mlagate: warning: unfit for timings: load: 1-minute load" in capsys.readouterr().err
    with pytest.raises(
        runcli.Refused, match="--strict: this machine fails 1 performance health check"
    ):
        runcli.performance_health(
            argparse.Namespace(strict=True), matrix, perf, "cpu", _linux("loadavg-busy.txt")
        )
    runcli.performance_health(
        argparse.Namespace(strict=True), matrix, perf, "cpu", _linux("loadavg-idle.txt")
    )
    assert capsys.readouterr().err == ""


def test_correctness_runs_skip_the_performance_check(capsys):
    matrix = load(FIXTURES / "fake-perf.yaml")
    kinds = {s: matrix.suites[s].kind for s in matrix.suites}
    correctness = tuple(s for s, k in kinds.items() if k == "correctness")
    if not correctness:
        matrix = load(FIXTURES / "fake-matrix.yaml")
        correctness = tuple(matrix.suites)
    runcli.performance_health(
        argparse.Namespace(strict=True),
        matrix,
        Selection(suites=correctness),
        "cpu",
        _linux("loadavg-busy.txt"),
    )
    assert capsys.readouterr().err == ""


def test_tox_envs_call_mlagate_run():
    text = (FIXTURES.parents[1] / "tox.ini").read_text()
    assert (
        "commands = mlagate run --kind performance" in text
        and "commands = mlagate run --kind correctness" in text
    )


def test_the_report_knows_the_kind_of_every_bundled_suite():
    from mlagate.paths import bundled
    from mlagate.report.catalogue import Catalogue

    matrix = load(bundled("matrix.yaml"))
    shipped = Catalogue.shipped()
    assert {s: shipped.kind(s) for s in matrix.suites} == {
        s: matrix.suites[s].kind for s in matrix.suites
    }


def test_a_run_records_machine_facts_at_its_start_and_end(
    fake_matrix, fake_cache, tmp_path, run_cli
):
    import json

    out = tmp_path / "o"
    assert (
        run_cli(
            "run", "--matrix", fake_matrix, "--module", "fake/good", "--out", out, cache=fake_cache
        ).returncode
        == 0
    )
    facts = json.loads((out / "machine.json").read_text())
    assert (
        facts["schema"] == "mlagate.machine/1"
        and facts["cores"] >= 1
        and facts["memory_gib"] > 0
        and facts["cpu_model"]
    )
    assert facts["start"]["time"] <= facts["end"]["time"] and facts["start"]["load_1m"] >= 0
    fp = [json.loads(p.read_text())["fingerprint"] for p in (out / "results").glob("*.json")]
    assert any(
        f.get("cpu_model") == facts["cpu_model"] and f.get("cores") == facts["cores"] for f in fp
    )


def test_auto_workers_stop_at_the_runners_workers(fake_matrix, fake_cache, tmp_path, run_cli):
    """`-n auto` is one worker per CPU, at most the runner's `workers` (a GPU whose memory holds
    fewer workers than its machine has CPUs); `-n N` is taken as given."""
    text = fake_matrix.read_text()
    runner = "  linux-cpu:  # CPU\n    backend: cpu  # backend\n"
    assert runner in text
    fake_matrix.write_text(text.replace(runner, runner + "    workers: 1\n", 1))
    args = ("run", "--matrix", fake_matrix, "--suite", "probes", "--module", "fake/good")
    auto = run_cli(*args, "-n", "auto", "--out", tmp_path / "a", cache=fake_cache)
    assert auto.returncode == 0 and "correctness on 1 worker)" in auto.stdout + auto.stderr
    two = run_cli(*args, "-n", "2", "--out", tmp_path / "b", cache=fake_cache)
    assert two.returncode == 0 and "correctness on 2 workers)" in two.stdout + two.stderr
    fake_matrix.write_text(text.replace(runner, runner + "    workers: 0\n", 1))
    bad = run_cli(*args, "-n", "auto", "--out", tmp_path / "c", cache=fake_cache)
    assert bad.returncode == 2 and "runners.linux-cpu.workers" in bad.stderr
    assert "an integer 1 to 1024" in bad.stderr and "Traceback" not in bad.stderr


class _Decaying:
    """A recorded Linux machine whose 1-minute load reads busy for the first `busy` reads."""

    def __init__(self, busy: int, other: dict | None = None):
        self.busy = linux(**{**(other or {}), "/proc/loadavg": "loadavg-busy.txt"})
        self.idle = linux(**(other or {}))
        self.left = busy

    def __getattr__(self, name):
        return getattr(self.idle, name)

    def read(self, path):
        if path == "/proc/loadavg" and self.left > 0:
            self.left -= 1
            return self.busy.read(path)
        return self.idle.read(path)


class _Clock:
    def __init__(self):
        self.t, self.slept = 0.0, []

    def sleep(self, s):
        self.slept.append(s)
        self.t += s

    def __call__(self):
        return self.t


def test_a_load_that_decays_is_waited_for_not_called_unfit():
    clock, waits = _Clock(), []
    report = health.settled(
        _Decaying(3), "cpu", 120, on_wait=waits.append, sleep=clock.sleep, clock=clock
    )
    assert report.failed == [] and clock.slept == [5, 5, 5]
    assert len(waits) == 1 and "1-minute load 3.90" in waits[0].detail


def test_a_load_that_stays_is_unfit_after_the_wait():
    clock = _Clock()
    report = health.settled(_Decaying(10**6), "cpu", 12, sleep=clock.sleep, clock=clock)
    assert [c.name for c in report.failed] == ["load"] and clock.t == 12


def test_no_wait_when_another_check_fails_too():
    clock = _Clock()
    busy_and_mlx = _Decaying(10**6, {PS: "ps-busy.txt"})
    report = health.settled(busy_and_mlx, "cpu", 120, sleep=clock.sleep, clock=clock)
    assert {c.name for c in report.failed} >= {"load"} and len(report.failed) > 1
    assert clock.slept == []


def test_settle_is_a_number_of_seconds(run_cli):
    proc = run_cli("run", "--settle", "soon")
    assert proc.returncode == 2 and "--settle: expected a number, got 'soon'" in proc.stderr


def test_allow_unfit_does_not_wait_for_the_load(capsys):
    matrix = load(FIXTURES / "fake-perf.yaml")
    args = argparse.Namespace(strict=False, allow_unfit=True, settle=120.0)
    record = runcli.performance_health(
        args, matrix, Selection(suites=("l1_parity",)), "cpu", _linux("loadavg-busy.txt")
    )
    err = capsys.readouterr().err
    assert record["override"] and "unfit for timings: load" in err and "waiting" not in err
