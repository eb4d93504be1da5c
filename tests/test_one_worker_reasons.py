"""marginal_cost and crossover (suites/performance/): an undecided case's reason names what
stopped every cache length or width, the judged one's limit and the others' fixed sample
counts, not only the judged one's. The timed samples are synthetic (seeded noise around the
bound); the looks, the budget check (mlagate.harness.timing.sequential), the intervals and the
messages are the suites' own. Real runs: tests/test_performance_suites.py."""

import importlib.util
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from mlagate.harness import Invalid
from mlagate.harness.timing import sequential

ROOT = Path(__file__).resolve().parents[1]


def _suite(name: str):
    path = ROOT / f"suites/performance/test_{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_suite", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Case:
    """What the two suites read of the case API; a sample of series s costs `ratio(s)` times a
    1 ms step with 30 % noise, and every take of samples advances the clock by a second each."""

    def __init__(self, gates: dict, ratio):
        self.gates, self.ratio = gates, ratio
        self.ctx = SimpleNamespace(profile_name="quick")
        self.profile = SimpleNamespace(
            perf_cache_lengths=[256, 1024, 4096], crossover_cache=1024, crossover_widths=[1, 8]
        )
        self.geometry = SimpleNamespace(rnv=(512, 128, 128))
        self.metrics: dict = {}
        self.clock, self.rng = 0.0, random.Random(3)

    def metric(self, key, value):
        self.metrics[key] = value

    def build(self, forced=False):
        return "k", {"guards": ["if L == 1"]}

    def prime(self, *args, **kwargs):
        return {}

    def _elapsed(self) -> float:
        return self.clock

    def _take(self, times: dict, series: list[dict], n: int) -> None:
        for _ in range(n):
            self.clock += 1.0
            for s in series:
                times[s["label"]].append(1e-3 * self.ratio(s) * (1 + self.rng.gauss(0, 0.3)))

    def interleaved(self, series, samples=None):
        times = {s["label"]: [] for s in series}
        self._take(times, series, samples or 5)
        return times

    def until_decided(self, series, judge, gates, budget_s):
        times = {s["label"]: [] for s in series}
        verdict, record = sequential(
            gates["samples"],
            gates["max_samples"],
            gates["confidence"],
            budget_s,
            self._elapsed,
            lambda n: self._take(times, series, n - len(times[series[0]["label"]])),
            lambda level: judge(times, level),
        )
        return times, verdict, record


def test_an_undecided_marginal_cost_names_what_stopped_every_cache_length():
    gates = {"widths": [1, 2], "max_relative": 1.5, "samples": 9, "max_samples": 45,
             "confidence": 0.95, "budget_s": {"quick": 30}}  # fmt: skip
    mla = Case(gates, lambda s: 1 + 1.5 * (s["L"] - 1))  # the second query costs the bound
    with pytest.raises(Invalid) as err:
        _suite("marginal_cost").test_marginal_cost(mla)
    said = str(err.value)
    assert "T=256, 1024: 9 samples each (a fixed count: reported, not judged)" in said
    assert "T=4096: judged, stopped by the 30 s budget after 15 samples and 33 s" in said


def test_an_undecided_crossover_names_what_stopped_every_width():
    gates = {"tolerance": 0.10, "samples_at_formula": 15, "max_samples": 45,
             "confidence": 0.95, "budget_s": {"quick": 1000}}  # fmt: skip
    mla = Case(gates, lambda s: 1.10 if s["force"] == "absorbed" else 1.0)  # at the tolerance
    with pytest.raises(Invalid) as err:
        _suite("crossover").test_crossover(mla)
    said = str(err.value)
    b = mla.metrics["crossover"]["formula_widest_absorbed"]
    assert "each width at T=1024: L=1, 8: 5 samples each (a fixed count: reported, not judged)" in (
        said
    )
    assert f"L={b}: judged, stopped at its samples limit (max_samples = 45, the last look)" in said
