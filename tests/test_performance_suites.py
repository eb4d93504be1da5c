"""The performance suites on the fake runtime: path proof in every timed row, a stock arm's
growing marginal cost fails, an arm whose L = 1 is 4 ms slower fails l1_parity, and
performance suites refuse to run under xdist.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from .conftest import FIXTURES, ROOT

MATRIX = FIXTURES / "fake-perf.yaml"


@pytest.fixture(scope="module")
def perf(tmp_path_factory):
    from .conftest import cli

    out = tmp_path_factory.mktemp("perf")
    cache = tmp_path_factory.mktemp("cache")
    proc = cli(
        "run",
        "--matrix",
        MATRIX,
        "--module",
        "fake/good",
        "--suite",
        "marginal_cost",
        "--suite",
        "l1_parity",
        "--out",
        out,
        "--allow-unfit",  # a shared machine: keep the verdicts, each result records the override
        cache=cache,
    )
    rows = {
        (r["suite"], r["arm"]): r
        for r in (json.loads(p.read_text()) for p in (out / "results").glob("*.json"))
    }
    return proc, rows, cache


def test_a_slower_l1_arm_fails_l1_parity(perf):
    _, rows, _ = perf
    slow = rows[("l1_parity", "fake-slow")]
    assert slow["verdict"] == "fail", slow["reason"]
    health = slow["health"]  # recorded in every performance result, the override with it
    assert health["fit"] or (health["override"] and "overridden" in slow["reason"]), health
    assert "L = 1 changed beyond the 2% tolerance: +" in slow["reason"]
    assert all(a["ci"][0] > 0.02 for a in slow["metrics"]["attempts"] if a["decided"] == "fail")


def test_a_materialising_arm_fails_the_marginal_cost_gate(perf):
    _, rows, _ = perf
    stock = rows[("marginal_cost", "fake-stock")]
    assert stock["verdict"] == "fail" and "decode steps" in stock["reason"]
    assert (
        stock["metrics"]["gate"]["relative_marginal"] > 1.5
        and stock["metrics"]["growth"]["ratio"] > 2
    )


def test_every_timed_row_carries_its_path_proof(perf):
    _, rows, _ = perf
    from mlagate.matrix import load

    samples = {s: load(MATRIX).suites[s].gates["samples"] for s in ("marginal_cost", "l1_parity")}
    for r in rows.values():
        timed = [o["timed"] for o in r["counters"] if "timed" in o]
        assert timed, r["case_id"]
        for series in timed:
            for row in series.values():
                assert (
                    row["path"] in ("absorbed", "materialised")
                    and len(row["seconds"]) == samples[r["suite"]]
                )
    stock = [o["timed"] for o in rows[("marginal_cost", "fake-stock")]["counters"] if "timed" in o][
        0
    ]
    assert (stock["L=1"]["path"], stock["L=2"]["path"]) == ("absorbed", "materialised")


def test_performance_suites_refuse_xdist(perf, tmp_path):
    _, _, cache = perf
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "-q",
            "-p",
            "no:cacheprovider",
            str(ROOT / "suites" / "performance" / "test_l1_parity.py"),
            "--mlagate-matrix",
            str(MATRIX),
            "--mlagate-out",
            str(out),
            "--mlagate-cache",
            str(cache),
            "--mlagate-module",
            "fake/good",
        ],
        capture_output=True,
        text=True,
    )
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    assert rows and all(
        r["verdict"] == "invalid" and "never run under xdist" in r["reason"] for r in rows
    ), proc.stdout[-2000:]


def test_short_steps_repeat_within_a_sample(perf):
    _, rows, _ = perf
    loops = {}
    for o in rows[("marginal_cost", "fake-stock")]["counters"]:
        for label, row in o.get("timed", {}).items():
            loops.setdefault(label, []).append(row["loops"])
    assert max(loops["L=1"]) > 1, "a decode step far shorter than sample_min_s is repeated"
    assert max(loops["L=1"]) >= max(loops["L=2"]), (
        "the slower materialised step needs fewer repeats"
    )


def test_calibrated_loops():
    from mlagate.harness.plugin import MAX_LOOPS, calibrated_loops

    assert calibrated_loops(0.0, 0.001) == 1
    assert calibrated_loops(0.02, 0.001) == 20
    assert calibrated_loops(0.02, 0.05) == 1
    assert calibrated_loops(10.0, 1e-9) == MAX_LOOPS


def test_timed_workers_run_pinned_to_one_cpu(perf):
    _, rows, _ = perf
    want = str(max(os.sched_getaffinity(0)))
    assert {r["fingerprint"]["cpus"] for r in rows.values()} == {want}, (
        "--cpu auto: every worker on the highest CPU allowed"
    )


def test_an_even_sample_count_is_refused_before_anything_runs(tmp_path, perf):
    from .conftest import cli

    _, _, cache = perf
    for name in ("fakemla-tree", "fake-fix.patch", "fake-slow.patch"):
        (shutil.copytree if (FIXTURES / name).is_dir() else shutil.copy)(
            FIXTURES / name, tmp_path / name
        )
    matrix = tmp_path / "fake-perf.yaml"
    text = MATRIX.read_text()
    assert "samples: 21, confidence" in text
    matrix.write_text(text.replace("samples: 21, confidence", "samples: 20, confidence"))
    proc = cli(
        "run",
        "--matrix",
        matrix,
        "--module",
        "fake/good",
        "--suite",
        "l1_parity",
        "--arm",
        "fake-patched",
        "--out",
        tmp_path / "out",
        cache=cache,
    )
    assert (
        proc.returncode == 2
        and "suites.l1_parity.gates.samples: expected an odd integer >= 9" in proc.stderr
    ), proc.stderr
    assert not (tmp_path / "out" / "results").exists()
