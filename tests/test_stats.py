"""Stats on synthetic signals with known answers."""

import math
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


def test_median_interval_is_exact_and_narrows_with_samples():
    wide = stats.median_interval(_noisy(1.0, 9), 0.95)
    narrow = stats.median_interval(_noisy(1.0, 101), 0.95)
    assert wide[1] <= wide[0] <= wide[2] and narrow[2] - narrow[1] < wide[2] - wide[1]
    # 9 samples at 95 %: [x_(2), x_(8)] covers 1 - 2 P(B <= 1) = 0.961 (k = 2)
    xs = list(range(1, 10))
    assert stats.median_interval(xs, 0.95) == (5, 2, 8)
    assert stats.median_interval(xs, 0.999)[1:] == (1, 9)  # the whole range cannot reach it


def test_median_interval_covers_at_its_confidence():
    rng = random.Random(5)
    trials, level = 1000, 0.9
    hits = 0
    for _ in range(trials):
        _, lo, hi = stats.median_interval([rng.expovariate(1.0) for _ in range(15)], level)
        hits += lo <= 0.6931 <= hi  # the exponential's median, ln 2
    assert hits / trials >= level - 0.02


def test_diff_ci_is_paired_and_excludes_zero_only_for_a_real_difference():
    drift = [1 + 0.5 * (i % 3) for i in range(21)]  # a shared drift pairing must cancel
    a = [x * y for x, y in zip(drift, _noisy(1.0, 21, spread=0.01, seed=1), strict=True)]
    b = [x * 1.05 for x in a]
    d, lo, hi = stats.diff_ci(a, b)
    assert lo > 0 and 0.04 < d < 0.1
    d0, lo0, hi0 = stats.diff_ci(_noisy(1.0, 21, seed=3), _noisy(1.0, 21, seed=4))
    assert lo0 < 0 < hi0
    with pytest.raises(ValueError):
        stats.diff_ci([1.0, 2.0], [1.0])


def test_look_confidence_spends_alpha_over_the_looks():
    assert stats.look_confidence(0.95, 1) == 0.95
    assert stats.look_confidence(0.95, 5) == pytest.approx(0.99)
    with pytest.raises(ValueError):
        stats.look_confidence(0.95, 0)


def test_pairs_interval_widens_with_a_per_process_offset():
    rng = random.Random(2)
    quiet = [rng.gauss(0, 0.002) for _ in range(8)]
    offset = [y + (0.03 if i % 2 else -0.03) for i, y in enumerate(quiet)]
    _, qlo, qhi, how = stats.pairs_interval(quiet, 0.99)
    m, lo, hi, _ = stats.pairs_interval(offset, 0.99)
    assert qhi - qlo < 0.01 < hi - lo and lo < m < hi and how == "mean"
    assert stats.pairs_interval([0.1], 0.95)[1:3] == (float("-inf"), float("inf"))


def test_pairs_interval_of_twelve_pairs_is_not_held_by_one_anomalous_process():
    """From 12 pairs the mean trims the highest and the lowest pair (Yuen's interval): one
    worker 40 % slow for its whole life (a 2-core Zen 3 VM, glm-4.7-flash at T = 4096)
    neither decides nor holds the interval across a 10 % tolerance; the t interval of the mean
    over the first 11 pairs straddles it. A shift of every pair still moves it."""
    changes = [-0.033, -0.027, 0.406, 0.069, -0.062, -0.028, 0.006, -0.046, -0.019, 0.055]
    ys = [math.log1p(c) for c in changes + [-0.068, -0.008]]
    centre, lo, hi, how = stats.pairs_interval(ys, 0.99)
    assert how == "trimmed" and math.log1p(-0.1) < lo < centre < hi < math.log1p(0.1)
    *_, t_hi, t_how = stats.pairs_interval(ys[:11], 0.99)
    assert t_how == "mean" and t_hi > math.log1p(0.1)
    slower = [y + math.log(1.25) for y in ys]
    assert stats.pairs_interval(slower, 0.99)[1] > math.log1p(0.1)


def test_sequential_looks_keep_the_false_alarm_rate():
    """A/A sequences judged at every look, stopping at the first that decides "beyond 0": at
    look_confidence the rate of a wrong "beyond" stays within alpha; at the unspent confidence
    it does not (optional stopping inflates it)."""
    rng = random.Random(11)
    looks = list(range(4, 13, 2))
    spent = stats.look_confidence(0.9, len(looks))
    wrong = {0.9: 0, spent: 0}
    trials = 300
    for _ in range(trials):
        ys = [rng.gauss(0, 1) for _ in range(looks[-1])]
        for level in wrong:
            for n in looks:
                _, lo, hi, _ = stats.pairs_interval(ys[:n], level)
                if lo > 0 or hi < 0:
                    wrong[level] += 1
                    break
    assert wrong[spent] / trials <= 0.1 + 0.02 < wrong[0.9] / trials


def test_the_trimmed_interval_covers_with_one_anomalous_process_in_twelve():
    """Twelve A/A pairs, one of them drawn from a process offset by 10 to 40 sd: Yuen's
    interval of the trimmed mean still covers 0 at about its confidence, where the t interval
    of the mean spreads to cover it nearly always and so decides nothing (its width triples)."""
    rng = random.Random(5)
    trials, level = 400, 0.95
    missed, widths = 0, {"trimmed": [], "t": []}
    for _ in range(trials):
        ys = [rng.gauss(0, 1) for _ in range(12)]
        ys[rng.randrange(12)] += rng.choice((-1, 1)) * rng.uniform(10, 40)
        _, lo, hi, how = stats.pairs_interval(ys, level)
        assert how == "trimmed"
        missed += not lo <= 0 <= hi
        widths["trimmed"].append(hi - lo)
        _, tlo, thi, _ = stats.pairs_interval(ys[:11], level)
        widths["t"].append(thi - tlo)
    assert missed / trials <= 1 - level + 0.03
    assert stats.median(widths["t"]) > 2 * stats.median(widths["trimmed"])


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
    assert same == 1.0 and lo2 <= 1.0 <= hi2 and lo2 < hi2


def test_the_interval_at_the_last_look_is_the_measured_one_there_and_narrows_with_more_pairs():
    rng = random.Random(5)
    for n in (6, 12, 20):
        ys = [rng.gauss(0.01, 0.03) for _ in range(n)]
        _, lo, hi, _ = stats.pairs_interval(ys, 0.99)
        assert stats.interval_at(ys, n, 0.99) == pytest.approx((lo, hi))
        wider, narrower = stats.interval_at(ys, n // 2, 0.99), stats.interval_at(ys, 4 * n, 0.99)
        assert wider[1] - wider[0] > hi - lo > 2 * (narrower[1] - narrower[0])
    assert stats.interval_at([0.1], 56, 0.99) == (-math.inf, math.inf)
    assert stats.needed_tolerance([(-0.011, 0.02), (-0.031, 0.0)]) == 0.04
    assert stats.needed_tolerance([(-math.inf, math.inf)]) == math.inf
