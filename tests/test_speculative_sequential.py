"""The speculative suite's ground-kept gate samples in looks (_sampled_until_decided in
suites/performance/test_speculative.py): it stops at the first decided look, samples on to
max_samples while the interval straddles the bound, and stops on its budget. The timed runs
here are synthetic (seeded); the statistics and the looping are the suite's own. The real runs
are in tests/test_speculative.py."""

import importlib.util
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from mlagate.harness import speculative_run

ROOT = Path(__file__).resolve().parents[1]


def _suite():
    spec = importlib.util.spec_from_file_location(
        "speculative_suite", ROOT / "suites/performance/test_speculative.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Case:
    """What _sampled_until_decided reads of the case API: gates, the profile, the clock, metrics."""

    def __init__(self, bound: float, budget_s: float = 300, elapsed_s: float = 0):
        self.gates = {
            "min_ratio_retained": {"cpu": bound},
            "max_samples": {"quick": 21},
            "confidence": 0.95,
            "budget_s": {"quick": budget_s},
        }
        self.ctx = SimpleNamespace(profile_name="quick")
        self.case = SimpleNamespace(backend="cpu")
        self.metrics: dict = {}
        self.elapsed_s = elapsed_s

    def metric(self, key, value):
        self.metrics[key] = value

    def _elapsed(self) -> float:
        return self.elapsed_s


def _times(rng, ratio: float, n: int, noise: float) -> dict:
    """n plain runs of about 1 s and spec runs making plain/spec about `ratio`."""
    plain = [1.0 * (1 + rng.gauss(0, noise)) for _ in range(n)]
    return {"plain": plain, "spec": [p / ratio * (1 + rng.gauss(0, noise)) for p in plain]}


def _measured(rng, lo_ratio: float, hi_ratio: float, noise: float):
    m = speculative_run.Measured(
        rows=[{"draft": "self", "context": 32}, {"draft": "self", "context": 64}],
        self_times={32: _times(rng, lo_ratio, 9, noise), 64: _times(rng, hi_ratio, 9, noise)},
    )
    return m, {32: lo_ratio, 64: hi_ratio}


@pytest.fixture
def sampled(monkeypatch):
    calls = []

    def run(bound, lo_ratio, hi_ratio, noise, **case):
        rng = random.Random(7)
        measured, ratios = _measured(rng, lo_ratio, hi_ratio, noise)

        def more(mla, cfg, target, drafts, m, P, n):
            calls.append((P, n))
            extra = _times(rng, ratios[P], n, noise)
            for k in ("plain", "spec"):
                m.self_times[P][k] = m.self_times[P][k] + extra[k]

        monkeypatch.setattr(speculative_run, "more_samples", more)
        mla = Case(bound, **case)
        out = _suite()._sampled_until_decided(mla, SimpleNamespace(samples=9), measured, "t", {})
        return out, mla.metrics["sequential"], measured

    return run, calls


def test_a_clear_case_stops_at_the_first_look(sampled):
    run, calls = sampled
    (retained, lo, hi, level, *_), seq, _ = run(0.5, 2.0, 2.0, 0.02)
    assert lo > 0.5 and seq["stopped"] == "decided" and seq["samples"] == 9 and seq["looks"] == 1
    assert calls == [] and seq["planned_looks"] == 3
    assert level == pytest.approx(1 - 0.05 / 3)


def test_a_straddling_case_samples_on_to_max_samples(sampled):
    run, calls = sampled
    (retained, lo, hi, *_), seq, measured = run(0.5, 2.0, 1.0, 0.2)
    assert lo < 0.5 < hi
    assert seq["stopped"] == "max_samples" and seq["samples"] == 21 and seq["looks"] == 3
    assert calls == [(32, 6), (64, 6), (32, 6), (64, 6)]
    assert len(measured.self_times[64]["plain"]) == 21


def test_an_undecided_case_stops_on_its_budget(sampled):
    run, calls = sampled
    _, seq, _ = run(0.5, 2.0, 1.0, 0.2, budget_s=10, elapsed_s=11)
    assert seq["stopped"] == "budget" and seq["samples"] == 9 and calls == []


def test_a_case_that_loses_ground_fails_once_decided(sampled):
    run, _ = sampled
    (retained, lo, hi, *_), seq, _ = run(0.5, 2.0, 0.4, 0.05)
    assert hi < 0.5 and seq["stopped"] == "decided"
