"""Performance runs start with the health check: warn on an unfit machine, refuse with --strict
(exit 3)."""

import argparse

import pytest

from mlagate.commands import runopts as runcli
from mlagate.matrix import load
from mlagate.plan import Selection
from tests.conftest import FIXTURES
from tests.test_health import linux


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
    from mlagate.matrix import bundled
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
