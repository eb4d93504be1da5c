"""Statistics for timings: pure functions of their arguments, standard library only.

Timings are skewed and heavy-tailed (a sample can be delayed by the OS, never sped up), so
everything here is built on medians and the bootstrap rather than means and normal theory.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence


def median(xs: Sequence[float]) -> float:
    """The median. With an odd number of samples it is one of them (no interpolation)."""
    if not xs:
        raise ValueError("median of no samples")
    return statistics.median(xs)


def _interval(draws: Sequence[float], level: float) -> tuple[float, float]:
    """The central `level` interval of sorted bootstrap draws (percentile method)."""
    n = len(draws)
    return (draws[int((1 - level) / 2 * n)], draws[min(n - 1, int((1 + level) / 2 * n))])


def bootstrap_ci(
    xs: Sequence[float],
    stat: Callable[[Sequence[float]], float] = median,
    n: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of stat(xs).

    Caveats: with few samples (under about 7) the interval is too narrow (the bootstrap
    cannot invent spread it never saw), and a median's bootstrap distribution is lumpy:
    its ends are sample values. Deterministic for a given seed.
    """
    if len(xs) < 2:
        v = stat(xs)
        return (v, v)
    rng = random.Random(seed)
    k = len(xs)
    return _interval(
        sorted(stat([xs[rng.randrange(k)] for _ in range(k)]) for _ in range(n)), level
    )


def diff_ci(
    a: Sequence[float], b: Sequence[float], n: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """median(b) - median(a) with a bootstrap interval (each side resampled independently).

    Caveat: assumes the two sample sets are independent; interleaved samples (ABBA) share
    slow drifts, which this ignores, so the interval is slightly conservative then.
    """
    rng = random.Random(seed)
    ka, kb = len(a), len(b)
    diffs = sorted(
        median([b[rng.randrange(kb)] for _ in range(kb)])
        - median([a[rng.randrange(ka)] for _ in range(ka)])
        for _ in range(n)
    )
    return (median(b) - median(a), *_interval(diffs, level))


def retained_ci(
    plain_lo: Sequence[float],
    spec_lo: Sequence[float],
    plain_hi: Sequence[float],
    spec_hi: Sequence[float],
    n: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """How much of a speed ratio survives from one condition to another, with a bootstrap interval:
    (median(plain_hi) / median(spec_hi)) / (median(plain_lo) / median(spec_lo)), each of the four
    sample sets resampled independently.

    Caveats: as diff_ci, it treats the sets as independent (interleaved samples share slow
    drifts, so the interval is slightly conservative); with under about 7 samples a set the
    interval is too narrow, and a ratio of medians of small sets is lumpy.
    """

    def one(pick) -> float:
        return (median(pick(plain_hi)) / median(pick(spec_hi))) / (
            median(pick(plain_lo)) / median(pick(spec_lo))
        )

    rng = random.Random(seed)
    draws = sorted(one(lambda xs: [xs[rng.randrange(len(xs))] for _ in xs]) for _ in range(n))
    return (one(list), *_interval(draws, level))


def relative_change(a: Sequence[float], b: Sequence[float]) -> float:
    """(median(b) - median(a)) / median(a): how much slower b is than a (negative: faster)."""
    base = median(a)
    if base <= 0:
        raise ValueError("relative change against a non-positive median")
    return (median(b) - base) / base


def least_squares_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The slope of the least-squares line through (xs, ys). Caveat: sensitive to outliers."""
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError("need two or more (x, y) pairs")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("all x are equal")
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


def marginal_cost(
    samples: dict[int, tuple[Sequence[float], Sequence[float]]],
    n: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> dict:
    """The cost of the extra queries, time(L) - time(1), per cache length, and its trend.

    samples maps a cache length T to (L = 1 timings, L = k timings). Returns, per T, the
    median difference with its bootstrap interval, and the least-squares slope of that
    difference against T (seconds per cached token) with a bootstrap interval that
    resamples within every T. Caveat: the slope assumes the cost is linear in T; a flat
    cost gives a slope interval around zero, a materialising path a clearly positive one.
    """
    rng = random.Random(seed)
    Ts = sorted(samples)
    per_t = {}
    for T in Ts:
        one, k = samples[T]
        d, lo, hi = diff_ci(one, k, n=n, level=level, seed=seed)
        per_t[T] = {"marginal": d, "ci": (lo, hi)}
    point = least_squares_slope(Ts, [per_t[T]["marginal"] for T in Ts]) if len(Ts) >= 2 else 0.0
    boots = []
    for _ in range(n if len(Ts) >= 2 else 0):
        ys = []
        for T in Ts:
            one, k = samples[T]
            ys.append(
                median([k[rng.randrange(len(k))] for _ in k])
                - median([one[rng.randrange(len(one))] for _ in one])
            )
        boots.append(least_squares_slope(Ts, ys))
    boots.sort()
    ci = _interval(boots, level) if boots else (0.0, 0.0)
    return {"per_T": per_t, "slope": point, "slope_ci": ci}


def growth_ratio(per_t: dict[int, dict]) -> float:
    """marginal at the longest cache / marginal at the shortest (how many times it grew).

    Caveat: meaningless when the short-cache marginal is near zero or negative; callers
    floor it (see the marginal_cost suite).
    """
    Ts = sorted(per_t)
    return per_t[Ts[-1]]["marginal"] / per_t[Ts[0]]["marginal"]


def detectable_difference(aa_changes: Sequence[float], level: float = 0.95) -> float:
    """The smallest relative difference a gate can tell from noise, from A/A runs.

    Given the relative changes measured between an arm and itself, returns the `level`
    quantile of their absolute values: a real change smaller than this is indistinguishable
    from this runner's noise. Caveat: needs enough A/A runs (ten or more) to mean much.
    """
    if not aa_changes:
        raise ValueError("no A/A runs")
    xs = sorted(abs(x) for x in aa_changes)
    return xs[min(len(xs) - 1, int(level * len(xs)))]


def detect_steps(
    xs: Sequence[float],
    window: int = 5,
    min_before: int = 3,
    min_after: int = 3,
    k: float = 4.0,
    min_relative: float = 0.1,
) -> list[dict]:
    """Where a series (one key figure over successive commits) stepped to a new level.

    Rule: index i (between commit i-1 and commit i) qualifies when the median of the up to
    `window` points from i on differs from the median of the up to `window` points before i
    by more than k x the noise and by more than `min_relative` of the earlier level
    (|earlier median|, or the later one when the earlier is 0). The noise is 1.4826 x the
    median absolute deviation of both windows, each about its own median (a robust standard
    deviation). At least `min_before` points before i and `min_after` from i on are needed.
    A run of adjacent qualifying indices is one step, placed at the split within `window`
    of the run where the means of the two windows differ most; the next step is searched
    for at least `window` points later.

    Returns [{"index", "before", "after", "change"}] (medians of the two windows at the
    placed split), change = (after - before) / |before| (None when before is 0).
    Caveats: a step is flagged only once most of `min_after` points sit at the new level
    (two of three by default: the newest commit alone never flags); a single-commit spike is
    never a step (the medians ignore it), nor a slow drift of under min_relative per window;
    two steps closer than `window` points blur into one; with perfectly flat windows
    (noise 0) only min_relative decides.
    """
    xs = list(xs)
    n = len(xs)

    def windows(i: int) -> tuple[list[float], list[float]]:
        return xs[max(0, i - window) : i], xs[i : i + window]

    qualifying = []
    for i in range(min_before, n - min_after + 1):
        before, after = windows(i)
        mb, ma = median(before), median(after)
        deviations = [abs(x - mb) for x in before] + [abs(x - ma) for x in after]
        noise = 1.4826 * median(deviations)
        shift = ma - mb
        level = abs(mb) if mb != 0 else abs(ma)
        if abs(shift) > k * noise and abs(shift) > min_relative * level:
            qualifying.append(i)

    def separation(j: int) -> float:
        before, after = windows(j)
        return abs(sum(after) / len(after) - sum(before) / len(before))

    steps: list[dict] = []
    runs: list[list[int]] = []
    for i in qualifying:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    for run in runs:
        span = range(max(1, run[0] - window + 1), min(n - 1, run[-1] + window - 1) + 1)
        j = max(span, key=lambda j: (separation(j), -j))
        if steps and j - steps[-1]["index"] < window:
            continue
        before, after = windows(j)
        mb, ma = median(before), median(after)
        steps.append(
            {
                "index": j,
                "before": mb,
                "after": ma,
                "change": (ma - mb) / abs(mb) if mb != 0 else None,
            }
        )
    return steps


def paired_change(
    arm: Sequence[float], baseline: Sequence[float], confidence: float
) -> tuple[float, float, float]:
    """The relative change of paired samples, arm_i / baseline_i - 1, as (median, low, high):
    the median of the per-pair changes and its exact distribution-free interval from order
    statistics (the binomial distribution of how many pairs fall below the true median,
    scipy.stats.binom). Pairs are the two series' samples taken back to back (ABBA), so a
    change of machine speed slower than one pair cancels out of each ratio.

    The interval [d_(k), d_(n+1-k)] covers the median with probability 1 - 2 P(B <= k-1),
    B ~ Binomial(n, 1/2); k is the largest with that at least `confidence` (k = 1 when even the
    whole range cannot reach it)."""
    from scipy.stats import binom

    if len(arm) != len(baseline) or not arm:
        raise ValueError("paired_change needs two equally long, non-empty series")
    d = sorted(a / b - 1 for a, b in zip(arm, baseline, strict=True))
    n = len(d)
    alpha = 1 - confidence
    k = 1
    while k + 1 <= (n + 1) // 2 and 2 * binom.cdf(k, n, 0.5) <= alpha:
        k += 1
    return median(d), d[k - 1], d[n - k]
