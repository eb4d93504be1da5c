"""l1_parity's sequential loop over process pairs (test_l1_parity in
suites/performance/test_l1_parity.py): it stops when every cache length is decided, at its pair
limit (max_pairs) or on its budget, and an undecided case names the limit that really stopped
it. The rounds' figures here are synthetic (seeded log-ratios, one a process pair and cache
length); the loop, the intervals, the verdicts and the messages are the suite's own. Real runs:
tests/test_l1_parity_arms.py and tests/test_performance_suites.py."""

import contextlib
import importlib.util
import math
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
        self.passed = ""

    def metric(self, key, value):
        self.metrics[key] = value

    def pass_reason(self, reason: str) -> None:
        self.passed = reason

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
            yield T, y, {"pair": p, "T": T, "change": math.expm1(y)}

    monkeypatch.setattr(suite, "_primed_once", primed)
    monkeypatch.setattr(suite, "_round", round_)
    try:
        suite.test_l1_parity(mla)
    except (Invalid, Failed) as e:
        return mla.metrics, e
    return mla.metrics, mla.passed or None


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


@pytest.mark.parametrize("centre, verdict", [(0.0, "pass"), (0.25, "fail"), (-0.25, "pass")])
def test_decided_cases_stop_early(monkeypatch, centre, verdict):
    metrics, err = _run(monkeypatch, centre, 0.01)
    assert metrics["sequential"]["stopped"] == "decided"
    assert metrics["sequential"]["process_pairs"] == 4
    if verdict == "pass":
        assert isinstance(err, str) and "not slower beyond the 10% tolerance" in err
    else:
        assert isinstance(err, Failed) and "slower beyond the 10% tolerance" in str(err)


def test_the_rule_is_one_sided_a_speed_up_passes_and_is_reported(monkeypatch):
    # 22 % faster: the interval lies wholly below -tolerance, which the two-sided rule failed
    metrics, said = _run(monkeypatch, -0.25, 0.01)
    assert isinstance(said, str) and "faster by 22." in said
    assert all(r["decided"] == "pass" and r["ci"][1] < -0.10 for r in metrics["l1"].values())
    # an unchanged arm passes without a speed-up claimed
    _, said = _run(monkeypatch, 0.0, 0.01)
    assert "faster" not in said


def test_a_planted_slowdown_still_fails_and_a_small_one_inside_the_tolerance_passes(monkeypatch):
    _, err = _run(monkeypatch, 0.05, 0.01, tol=0.032)
    assert isinstance(err, Failed) and "L = 1 slower beyond the 3.2% tolerance: +5." in str(err)
    _, said = _run(monkeypatch, 0.0, 0.01, tol=0.032)
    assert isinstance(said, str) and "3.2% tolerance" in said


def test_a_spread_too_wide_for_the_last_look_names_the_floor_and_the_tolerance_needed(monkeypatch):
    from mlagate import stats

    metrics, err = _run(monkeypatch, 0.0, 0.4)
    assert isinstance(err, Invalid) and metrics["sequential"]["stopped"] == "max_pairs"
    floor = metrics["floor"]
    assert floor["pairs"] == 12 and floor["floor"] > 0.10 and floor["needed_tolerance"] > 0.10
    assert f"+-{floor['floor']:.1%} wide (the runner's measured floor)" in str(err)
    assert "12 process pairs are too few here, it needs a tolerance of" in str(err)
    assert f"{floor['needed_tolerance'] * 100:.3g}% (as mlagate calibrate computes it)" in str(err)
    # one mechanism: calibrate's rule on the intervals the floor names
    assert floor["needed_tolerance"] == stats.needed_tolerance(list(floor["intervals"].values()))


def test_a_budget_stop_whose_spread_would_decide_at_the_last_look_says_so(monkeypatch):
    metrics, err = _run(monkeypatch, 0.0, 0.10, budget_s=20, round_s=5)
    assert isinstance(err, Invalid) and metrics["sequential"]["stopped"] == "budget"
    assert "12 pairs would decide it; the limit above stopped it first" in str(err)


def test_a_case_decided_at_its_last_look_is_recorded_as_decided(monkeypatch):
    # two wild pairs keep the t interval across the tolerance up to 10 pairs; from 12 the
    # trimmed (Yuen) interval drops them and passes, at the last look
    ys = [0.5, -0.5] + [0.01, -0.01] * 5
    metrics, err = _run(monkeypatch, 0.0, 0.0, figures=ys)
    assert isinstance(err, str) and "not slower beyond" in err  # a pass, with its reason
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


def _calibrated(metrics: dict) -> dict:
    from mlagate.commands import calibrate

    row = {"suite": "l1_parity", "case_id": "c", "arm": "a", "module": "m", "metrics": metrics}
    return calibrate.aa_floor([{**row, "geometry": {"id": "g"}}])


def test_the_tolerance_an_undecided_case_needs_is_the_one_calibrate_proposes(monkeypatch):
    metrics, err = _run(monkeypatch, 0.0, 0.03, tol=0.02)  # an A/A run too noisy for 2 %
    assert isinstance(err, Invalid) and "too few here" in str(err)
    gate = _calibrated(metrics)
    assert gate["bound"] == metrics["floor"]["needed_tolerance"]


def test_calibrate_projects_a_budget_stopped_aa_case_to_its_last_look(monkeypatch):
    from mlagate import stats
    from mlagate.contract.gates import UNCALIBRATED

    metrics, err = _run(monkeypatch, 0.0, 0.04, tol=UNCALIBRATED, budget_s=25, round_s=5)
    assert isinstance(err, Invalid) and metrics["sequential"]["stopped"] == "budget"
    assert {r["pairs"] for r in metrics["l1"].values()} == {6}  # the budget allowed 6 of 12
    gate = _calibrated(metrics)
    measured = stats.needed_tolerance([r["ci"] for r in metrics["l1"].values()])
    figures = {int(T): [] for T in metrics["l1"]}
    for p in metrics["pairs"]:
        figures[p["T"]].append(math.log1p(p["change"]))
    at_last = stats.last_look_floor(figures, 12, metrics["sequential"]["look_confidence"])
    assert gate["bound"] == at_last["needed_tolerance"] < measured
