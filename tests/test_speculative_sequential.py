"""The speculative suite's verify-growth gate samples in looks (_sampled_until_decided in
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
            "max_verify_growth": {"cpu": bound},
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


def _times(rng, lo_v: float, growth: float, n: int, noise: float, hi: bool) -> dict:
    """n rounds of a decode step of about 1 ms and a verify step of about lo_v ms at the short
    context, lo_v + growth ms at the long one (so its growth is about `growth` decode steps)."""
    decode = [1e-3 * (1 + rng.gauss(0, noise)) for _ in range(n)]
    v = 1e-3 * (lo_v + (growth if hi else 0))
    return {"decode": decode, "verify": [v * (1 + rng.gauss(0, noise)) for _ in range(n)]}


def _measured(rng, growth: float, noise: float):
    m = speculative_run.Measured(
        step_times={
            32: _times(rng, 2.0, growth, 9, noise, False),
            64: _times(rng, 2.0, growth, 9, noise, True),
        },
    )
    return m


@pytest.fixture
def sampled(monkeypatch):
    calls = []

    def run(bound, growth, noise, **case):
        rng = random.Random(7)
        measured = _measured(rng, growth, noise)

        def more(mla, cfg, target, drafts, m, P, n):
            calls.append((P, n))
            extra = _times(rng, 2.0, growth, n, noise, P == 64)
            for k in ("verify", "decode"):
                m.step_times[P][k] = m.step_times[P][k] + extra[k]

        monkeypatch.setattr(speculative_run, "more_samples", more)
        mla = Case(bound, **case)
        out = _suite()._sampled_until_decided(mla, SimpleNamespace(samples=9), measured, "t", {})
        return out, mla.metrics["sequential"], measured

    return run, calls


def test_a_clear_case_stops_at_the_first_look(sampled):
    run, calls = sampled
    (growth, lo, hi, level, *_), seq, _ = run(3.0, 0.5, 0.02)
    assert hi < 3.0 and seq["stopped"] == "decided" and seq["samples"] == 9 and seq["looks"] == 1
    assert calls == [] and seq["planned_looks"] == 3
    assert growth == pytest.approx(0.5, abs=0.1)
    assert level == pytest.approx(1 - 0.05 / 3)


def test_a_straddling_case_samples_on_to_max_samples(sampled):
    run, calls = sampled
    (growth, lo, hi, *_), seq, measured = run(3.0, 3.0, 0.3)
    assert lo < 3.0 < hi
    assert seq["stopped"] == "max_samples" and seq["samples"] == 21 and seq["looks"] == 3
    assert calls == [(32, 6), (64, 6), (32, 6), (64, 6)]
    assert len(measured.step_times[64]["verify"]) == 21


def test_an_undecided_case_stops_on_its_budget(sampled):
    run, calls = sampled
    _, seq, _ = run(3.0, 3.0, 0.3, budget_s=10, elapsed_s=11)
    assert seq["stopped"] == "budget" and seq["samples"] == 9 and calls == []


def test_a_verify_step_growing_with_context_fails_once_decided(sampled):
    run, _ = sampled
    (growth, lo, hi, *_), seq, _ = run(3.0, 10.0, 0.05)
    assert lo > 3.0 and seq["stopped"] == "decided" and growth == pytest.approx(10, rel=0.1)
