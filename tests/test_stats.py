"""Stats on synthetic signals with known answers."""

import random

import pytest

from mlagate import stats


def _noisy(center, k, spread=0.02, seed=0):
    rng = random.Random(seed)
    return [center * (1 + rng.uniform(-spread, spread)) + (center * 0.5 if rng.random() < 0.1 else 0) for _ in range(k)]


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
    assert stats.detectable_difference([0.01, -0.02, 0.005, 0.03, -0.004, 0.0, 0.01, -0.01, 0.02, 0.015]) == 0.03
    with pytest.raises(ValueError):
        stats.detectable_difference([])
