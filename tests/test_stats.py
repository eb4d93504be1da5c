"""Stats on synthetic signals with known answers."""

import random

import pytest

from mlagate import stats


def _noisy(center, k, spread=0.02, seed=0):
    rng = random.Random(seed)
    return [
        center * (1 + rng.uniform(-spread, spread)) + (center * 0.5 if rng.random() < 0.1 else 0)
        for _ in range(k)
    ]


def test_median_of_an_odd_count_is_a_sample():
    xs = [3.0, 1.0, 2.0, 10.0, 4.0]
    assert stats.median(xs) == 3.0 and stats.median(xs) in xs


def test_bootstrap_interval_covers_the_center_and_narrows_with_samples():
    wide = stats.bootstrap_ci(_noisy(1.0, 9))
    narrow = stats.bootstrap_ci(_noisy(1.0, 101))
    assert wide[0] <= 1.0 <= wide[1] * 1.01
    assert narrow[1] - narrow[0] < wide[1] - wide[0]


def test_diff_ci_excludes_zero_for_a_real_difference_and_not_for_none():
    d, lo, hi = stats.diff_ci(_noisy(1.0, 21, seed=1), _noisy(1.2, 21, seed=2))
    assert 0.15 < d < 0.25 and lo > 0
    d0, lo0, hi0 = stats.diff_ci(_noisy(1.0, 21, seed=3), _noisy(1.0, 21, seed=4))
    assert lo0 < 0 < hi0


def test_marginal_cost_slope_is_positive_for_a_materialising_signal_and_near_zero_when_flat():
    Ts = [256, 1024, 4096]
    grows = {T: (_noisy(1e-3, 9, seed=T), _noisy(1e-3 + 2e-7 * T, 9, seed=T + 1)) for T in Ts}
    flat = {T: (_noisy(1e-3, 9, seed=T), _noisy(1.1e-3, 9, seed=T + 1)) for T in Ts}
    g = stats.marginal_cost(grows)
    f = stats.marginal_cost(flat)
    assert g["slope_ci"][0] > 0 and abs(g["slope"] - 2e-7) < 5e-8
    assert f["slope_ci"][0] <= 0 <= f["slope_ci"][1] or abs(f["slope"]) < 1e-9
    assert stats.growth_ratio(g["per_T"]) > 5 and stats.growth_ratio(f["per_T"]) < 2


def test_relative_change_and_detectable_difference():
    assert stats.relative_change([1.0, 1.0, 1.0], [1.1, 1.1, 1.1]) == pytest.approx(0.1)
    assert (
        stats.detectable_difference(
            [0.01, -0.02, 0.005, 0.03, -0.004, 0.0, 0.01, -0.01, 0.02, 0.015]
        )
        == 0.03
    )
    with pytest.raises(ValueError):
        stats.detectable_difference([])


def _levels(levels: list[tuple[float, int]], sd: float, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [level * (1 + rng.gauss(0, sd)) for level, n in levels for _ in range(n)]


def test_detect_steps_finds_a_planted_step_where_it_is():
    for seed in range(20):
        (step,) = stats.detect_steps(_levels([(1.0, 30), (1.5, 30)], 0.02, seed))
        assert step["index"] == 30 and step["change"] == pytest.approx(0.5, abs=0.1)
        (down,) = stats.detect_steps(_levels([(2.0, 25), (1.0, 25)], 0.02, seed))
        assert down["index"] == 25 and down["change"] < 0


def test_detect_steps_is_quiet_without_a_step_and_ignores_a_spike():
    assert all(stats.detect_steps(_levels([(1.0, 100)], 0.02, seed)) == [] for seed in range(20))
    spike = [1.0] * 20
    spike[10] = 5.0
    assert stats.detect_steps(spike) == []
    assert stats.detect_steps([1.0] * 5 + [1.05] * 5) == []  # under min_relative


def test_detect_steps_needs_confirmation_after_the_step():
    assert stats.detect_steps([1.0] * 10 + [2.0]) == []  # the newest commit alone never flags
    assert [s["index"] for s in stats.detect_steps([1.0] * 10 + [2.0] * 2)] == [10]
    assert [s["index"] for s in stats.detect_steps([1.0] * 10 + [2.0] * 10 + [1.0] * 10)] == [
        10,
        20,
    ]
    assert (
        stats.detect_steps([0.0] * 8 + [3.0] * 8)[0]["change"] is None
    )  # from zero: no relative change


def test_retained_ci_on_synthetic_ratios():
    from mlagate.stats import retained_ci

    plain_lo, spec_lo = [1.0, 1.01, 0.99, 1.0, 1.02], [2.0, 2.02, 1.98, 2.0, 2.01]  # ratio 0.5
    plain_hi, spec_hi = [1.0, 1.0, 1.01, 0.99, 1.0], [8.0, 8.1, 7.9, 8.0, 8.05]  # ratio 0.125
    r, lo, hi = retained_ci(plain_lo, spec_lo, plain_hi, spec_hi)
    assert abs(r - 0.25) < 0.01 and lo <= r <= hi < 0.3
    same, lo2, hi2 = retained_ci(plain_lo, spec_lo, plain_lo, spec_lo)
    assert same == 1.0 and lo2 < 1.0 < hi2
