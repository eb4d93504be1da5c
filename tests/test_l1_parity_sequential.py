"""l1_parity's sequential loop over process pairs (test_l1_parity in
suites/performance/test_l1_parity.py): it stops when every cache length is decided, at its pair
limit (max_pairs) or on its budget, and an undecided case names the limit that really stopped
it. The rounds' figures here are synthetic (seeded log-ratios, one a process pair and cache
length); the loop, the intervals, the verdicts and the messages are the suite's own. Real runs:
tests/test_l1_parity_arms.py and tests/test_performance_suites.py."""

import contextlib
import importlib.util
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from mlagate.harness import Failed, Invalid
from mlagate.harness.timing import stopped_by

ROOT = Path(__file__).resolve().parents[1]


class Case:
    """What test_l1_parity reads of the case API when its rounds are synthetic (A/A: no
    baseline arm is looked up)."""

    def __init__(self, budget_s: float, round_s: float):
        self.case = SimpleNamespace(arm="a", aa=True, backend="cpu", runner="linux-cpu")
        self.gates = {
            "tolerance": {"cpu": 0.10},
            "samples": 11,
            "min_pairs": 4,
            "max_pairs": 12,
            "confidence": 0.95,
            "budget_s": {"quick": budget_s},
        }
        self.ctx = SimpleNamespace(profile_name="quick")
        self.profile = SimpleNamespace(perf_cache_lengths=[256, 1024])
        self.metrics: dict = {}
        self.clock, self.round_s = 0.0, round_s

    def metric(self, key, value):
        self.metrics[key] = value

    def _elapsed(self) -> float:
        return self.clock


def _run(
    monkeypatch,
    centre: float,
    sd: float,
    budget_s: float = 1000,
    round_s: float = 3,
    tol=0.10,
    aa=True,
    figures=None,
):
    spec = importlib.util.spec_from_file_location(
        "l1_parity_suite", ROOT / "suites/performance/test_l1_parity.py"
    )
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    rng = random.Random(7)
    mla = Case(budget_s, round_s)
    mla.gates["tolerance"]["cpu"] = tol
    mla.case.aa = aa
    mla.ctx.matrix = SimpleNamespace(arms={"a": SimpleNamespace(baseline="b")})

    @contextlib.contextmanager
    def primed(*_):
        yield {}

    def round_(mla_, p, slots, caches, files):
        mla_.clock += mla_.round_s
        for T in caches:
            y = figures[p] if figures else rng.gauss(centre, sd)
            yield T, y, {"pair": p, "T": T, "change": 0.0}

    monkeypatch.setattr(suite, "_primed_once", primed)
    monkeypatch.setattr(suite, "_round", round_)
    try:
        suite.test_l1_parity(mla)
    except (Invalid, Failed) as e:
        return mla.metrics, e
    return mla.metrics, None


def test_undecided_at_the_pair_limit_says_so_not_the_budget(monkeypatch):
    metrics, err = _run(monkeypatch, 0.0, 0.4)
    seq = metrics["sequential"]
    assert isinstance(err, Invalid) and seq["stopped"] == "max_pairs"
    assert seq["process_pairs"] == 12 and seq["used_s"] == 36
    assert "stopped at its process pairs limit (max_pairs = 12, the last look)" in str(err)
    assert "after 36 s of the 1000 s budget" in str(err)
    assert "stopped by the" not in str(err)


def test_undecided_on_the_budget_says_so(monkeypatch):
    metrics, err = _run(monkeypatch, 0.0, 0.4, budget_s=100, round_s=20)
    seq = metrics["sequential"]
    assert isinstance(err, Invalid) and seq["stopped"] == "budget"
    # the synthetic rounds take no real time, so the look after 4 pairs lets two more run
    assert seq["process_pairs"] == 6
    assert "stopped by the 100 s budget after 6 process pairs and 120 s" in str(err)
    assert "limit" not in str(err)


@pytest.mark.parametrize("centre, verdict", [(0.0, None), (0.25, "fail"), (-0.25, "fail")])
def test_decided_cases_stop_early(monkeypatch, centre, verdict):
    metrics, err = _run(monkeypatch, centre, 0.01)
    assert metrics["sequential"]["stopped"] == "decided"
    assert metrics["sequential"]["process_pairs"] == 4
    if verdict is None:
        assert err is None
    else:
        assert isinstance(err, Failed) and "beyond the 10% tolerance" in str(err)


def test_a_case_decided_at_its_last_look_is_recorded_as_decided(monkeypatch):
    # two wild pairs keep the t interval across the tolerance up to 10 pairs; from 12 the
    # trimmed (Yuen) interval drops them and passes, at the last look
    ys = [0.5, -0.5] + [0.01, -0.01] * 5
    metrics, err = _run(monkeypatch, 0.0, 0.0, figures=ys)
    assert err is None
    assert {r["pairs"] for r in metrics["l1"].values()} == {12}
    seq = metrics["sequential"]
    assert seq["stopped"] == "decided" and seq["max_pairs"] == 12 and seq["tolerance"] == 0.10


@pytest.mark.parametrize(
    "stopped, words",
    [
        ("budget", "stopped by the 120 s budget after 15 samples and 130 s"),
        ("max_samples", "stopped at its samples limit (max_samples = 15, the last look)"),
    ],
)
def test_stopped_by_within_one_worker(stopped, words):
    record = {"stopped": stopped, "samples": 15, "used_s": 130.2, "budget_s": 120}
    assert words in stopped_by(record)


def test_an_uncalibrated_tolerance_measures_nothing_against_a_baseline(monkeypatch):
    from mlagate.contract.gates import UNCALIBRATED

    metrics, err = _run(monkeypatch, 0.25, 0.01, tol=UNCALIBRATED, aa=False)
    assert isinstance(err, Invalid) and metrics == {}
    assert "run mlagate calibrate first" in str(err)
    assert "mlagate calibrate --runner linux-cpu" in str(err)


def test_an_uncalibrated_aa_run_measures_the_floor_for_calibrate(monkeypatch):
    from mlagate.commands import calibrate
    from mlagate.contract.gates import UNCALIBRATED

    metrics, err = _run(monkeypatch, 0.0, 0.02, tol=UNCALIBRATED)
    assert isinstance(err, Invalid) and "run mlagate calibrate first" in str(err)
    assert metrics["sequential"]["stopped"] == "max_pairs"  # nothing to decide against
    assert all(r["decided"] is None and r["pairs"] == 12 for r in metrics["l1"].values())
    row = {"suite": "l1_parity", "case_id": "c", "arm": "a", "module": "m", "metrics": metrics}
    floor = calibrate.aa_floor([{**row, "geometry": {"id": "g"}}])
    assert 0 < floor["aa_floor"] < 0.05 and floor["bound"] <= 0.05
    assert f"intervals reach {floor['aa_floor']:.1%}" in str(err)
