"""The performance suites on the fake runtime, two-sided: the fixed arm passes every one (exit
0), an arm whose L = 1 is 4 ms slower fails l1_parity and one whose absorbed path is 20 ms
slower fails crossover (exit 1), an arm whose L = 1 is 4 ms faster than its baseline passes
l1_parity with the speed-up in its reason and the report, a stock arm's growing marginal cost
fails marginal_cost; path proof in every timed row, and performance suites refuse to run under
xdist.

The fixture's tolerances (tests/fixtures/fake-perf.yaml) are wide, so that the verdicts hold on
a loaded 2-core machine: under a load of 10 the fixed arm's intervals reached +-35 %, the
planted slowdowns sit at +300 % or more.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from . import runplans
from .conftest import FIXTURES, ROOT

MATRIX = FIXTURES / "fake-perf.yaml"


SUITES = ("marginal_cost", "crossover", "l1_parity")


def _run(out, cache, arm: str, *suites: str):
    """`mlagate run` over the fake runtime for one arm: (process, {(suite, arm): result})."""
    from .conftest import cli

    args = ["run", "--matrix", MATRIX, "--module", "fake/good", "--arm", arm]
    for s in suites:
        args += ["--suite", s]
    # a shared machine: keep the verdicts, each result records the override
    proc = cli(*args, "--out", out, "--allow-unfit", cache=cache)
    rows = {
        (r["suite"], r["arm"]): r
        for r in (json.loads(p.read_text()) for p in (out / "results").glob("*.json"))
    }
    return proc, rows, out


def _why(row: dict, run) -> str:
    """A wrong verdict explained: the case's reason, its gate metrics and the run's pytest log."""
    proc, _, out = run
    log = out / "logs" / "pytest-performance.log"
    tail = log.read_text()[-3000:] if log.exists() else proc.stdout[-3000:]
    metrics = {k: row["metrics"].get(k) for k in ("gate", "sequential", "crossover")}
    return f"{row['suite']} {row['arm']}: {row['verdict']}: {row['reason']}\n{metrics}\n{tail}"


@pytest.fixture(scope="module")
def perf(tmp_path_factory):
    """The fixed arm through every performance suite that judges it, then each planted
    slowdown through the suite it must fail, and the stock arm (a control) through
    marginal_cost."""
    cache = tmp_path_factory.mktemp("cache")
    runs = {
        "fixed": _run(tmp_path_factory.mktemp("fixed"), cache, "fake-patched", *SUITES),
        "slow_l1": _run(tmp_path_factory.mktemp("slow"), cache, "fake-slow", "l1_parity"),
        "fast_l1": _run(tmp_path_factory.mktemp("fast"), cache, "fake-faster", "l1_parity"),
        "slow_absorbed": _run(
            tmp_path_factory.mktemp("absorbed"), cache, "fake-slow-absorbed", "crossover"
        ),
        "stock": _run(tmp_path_factory.mktemp("stock"), cache, "fake-stock", "marginal_cost"),
    }
    rows = {k: v for _, r, _ in runs.values() for k, v in r.items()}
    return runs, rows, cache


def test_the_fixed_arm_passes_every_performance_suite_and_the_run_exits_0(perf):
    from mlagate.report.catalogue import Catalogue

    runs, rows, _ = perf
    proc, fixed, _ = runs["fixed"]
    assert {s for s, _ in fixed} == set(SUITES), sorted(fixed)
    for (suite, _), r in fixed.items():
        assert r["verdict"] == "pass", _why(r, runs["fixed"])
        seq = r["metrics"]["sequential"]  # the budget and the samples used, in every result
        assert seq["stopped"] == "decided" and 0 < seq["used_s"] <= r["duration_s"] + 1
        assert seq["budget_s"] > 0 and seq["samples"] > 0
        assert Catalogue.shipped().entries[suite].contract.typed(r), suite  # metrics schema
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_a_slower_l1_arm_fails_l1_parity_and_the_run_exits_1(perf):
    runs, rows, _ = perf
    proc, _, _ = runs["slow_l1"]
    slow = rows[("l1_parity", "fake-slow")]
    assert slow["verdict"] == "fail", _why(slow, runs["slow_l1"])
    health = slow["health"]  # recorded in every performance result, the override with it
    assert health["fit"] or (health["override"] and "overridden" in slow["reason"]), health
    assert "L = 1 slower beyond the 100% tolerance: +" in slow["reason"]
    failed = [r for r in slow["metrics"]["l1"].values() if r["decided"] == "fail"]
    assert failed and all(r["ci"][0] > 1.0 and r["pairs"] >= 4 for r in failed)
    assert proc.returncode == 1, proc.stdout[-3000:]


def test_a_faster_l1_arm_passes_l1_parity_and_says_by_how_much_in_the_report(perf, tmp_path):
    from .conftest import cli

    runs, rows, _ = perf
    proc, _, out = runs["fast_l1"]
    fast = rows[("l1_parity", "fake-faster")]
    assert fast["verdict"] == "pass", _why(fast, runs["fast_l1"])
    assert all(r["ci"][1] < 0 for r in fast["metrics"]["l1"].values())  # wholly faster
    assert "not slower beyond the 100% tolerance" in fast["reason"]
    said = re.search(r"faster by [0-9.]+% at T=\d+ \(interval -[^)]*\)", fast["reason"])
    assert said, fast["reason"]
    assert proc.returncode == 0, proc.stdout[-3000:]
    report = cli("report", out, "--out", tmp_path / "html")
    assert report.returncode == 0, report.stderr[-2000:]
    page = "".join(p.read_text() for p in (tmp_path / "html").rglob("*.html"))
    assert said.group(0) in page


def test_a_slower_absorbed_path_fails_crossover_and_the_run_exits_1(perf):
    runs, rows, _ = perf
    proc, _, _ = runs["slow_absorbed"]
    r = rows[("crossover", "fake-slow-absorbed")]
    assert r["verdict"] == "fail" and "slower than materialising" in r["reason"], _why(
        r, runs["slow_absorbed"]
    )
    assert r["metrics"]["crossover"]["ci"][0] > 1.0
    assert proc.returncode == 1, proc.stdout[-3000:]


def test_l1_parity_replicates_over_fresh_process_pairs_in_balanced_order(perf):
    runs, rows, _ = perf
    r = rows[("l1_parity", "fake-patched")]
    pairs = r["metrics"]["pairs"]
    firsts = {}
    for p in pairs:
        firsts.setdefault(p["pair"], p["first"])
    n = r["metrics"]["sequential"]["process_pairs"]
    assert n >= 4 and n % 2 == 0 and sorted(firsts) == list(range(n))
    assert [firsts[i] for i in range(n)] == ["arm", "baseline"] * (n // 2)
    assert all(v["pairs"] <= n and v["decided"] for v in r["metrics"]["l1"].values())
    started = list((runs["fixed"][2] / "logs").glob("worker-fake-stock-*.log"))
    assert len(started) >= n, "every process pair starts the baseline's worker afresh"
    # the fake runtime's cache has no state setter: every round prefills (real arms load the
    # caches primed once: tests/test_l1_parity_arms.py)
    assert r["metrics"]["primed_once"]["loaded"] is False
    assert not list((runs["fixed"][2] / "tmp").glob("*.safetensors")), "primed files removed"


def test_a_materialising_arm_fails_the_marginal_cost_gate(perf):
    runs, rows, _ = perf
    proc, _, _ = runs["stock"]
    stock = rows[("marginal_cost", "fake-stock")]
    assert stock["verdict"] == "fail" and "decode steps" in stock["reason"], _why(
        stock, runs["stock"]
    )
    gate = stock["metrics"]["gate"]  # the interval of the paired ratio, above the bound
    assert gate["ci"][0] > gate["bound"] == 1.0, gate
    assert stock["metrics"]["sequential"]["stopped"] == "decided"
    assert proc.returncode == 0, proc.stdout[-3000:]  # a control failing as it must: green


def test_every_timed_row_carries_its_path_proof(perf):
    _, rows, _ = perf
    from mlagate.matrix import load

    gates = {s: load(MATRIX).suites[s].gates for s in SUITES}
    for r in rows.values():
        timed = [o["timed"] for o in r["counters"] if "timed" in o]
        assert timed, r["case_id"]
        for series in timed:
            for row in series.values():
                n = len(row["seconds"])
                assert row["path"] in ("absorbed", "materialised") and n % 2 == 1
                if r["suite"] == "l1_parity":
                    assert n == gates["l1_parity"]["samples"]
                else:
                    assert n <= gates[r["suite"]]["max_samples"]
    stock = [o["timed"] for o in rows[("marginal_cost", "fake-stock")]["counters"] if "timed" in o][
        0
    ]
    assert (stock["L=1"]["path"], stock["L=2"]["path"]) == ("absorbed", "materialised")


def test_performance_suites_refuse_xdist(perf, tmp_path):
    _, _, cache = perf
    out = tmp_path / "out"
    plan = runplans.write(MATRIX, out, cache, suites=("l1_parity",), modules=("fake/good",))
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
            *runplans.options(plan, out, cache),
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
    longest = []  # the series timed at the longest cache: the stock arm's L = 2 materialises there
    for o in rows[("marginal_cost", "fake-stock")]["counters"]:
        if "timed" in o:
            longest = o["timed"]
    short = [
        row["loops"]
        for o in rows[("l1_parity", "fake-patched")]["counters"]
        for row in o.get("timed", {}).values()
    ]
    assert max(short) > 1, "a decode step far shorter than sample_min_s is repeated"
    assert longest["L=1"]["loops"] >= longest["L=2"]["loops"], (
        "the slower materialised step needs fewer repeats"
    )


def test_timed_workers_run_pinned_to_one_cpu(perf):
    _, rows, _ = perf
    want = str(max(os.sched_getaffinity(0)))
    assert {r["fingerprint"]["cpus"] for r in rows.values()} == {want}, (
        "--cpu auto: every worker on the highest CPU allowed"
    )


def test_an_even_sample_count_is_refused_before_anything_runs(tmp_path, perf):
    from .conftest import cli

    _, _, cache = perf
    for name in ("fakemla-tree", "fake-fix.patch", "fake-slow.patch", "fake-slow-absorbed.patch"):
        (shutil.copytree if (FIXTURES / name).is_dir() else shutil.copy)(
            FIXTURES / name, tmp_path / name
        )
    matrix = tmp_path / "fake-perf.yaml"
    text = MATRIX.read_text()
    assert "samples: 11, confidence" in text
    matrix.write_text(text.replace("samples: 11, confidence", "samples: 20, confidence"))
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
