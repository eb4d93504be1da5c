"""Statistics for timings: pure functions of their arguments, on scipy.stats.

Timings are skewed and heavy-tailed (a sample can be delayed by the OS, never sped up), so a
comparison within one process pair is built on paired samples and medians with exact
order-statistic intervals; one across process pairs on one figure per pair (each a median of
paired samples, close to normal) with a Student t interval. Sequential gates spend their
error over their looks (look_confidence).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence


def median(xs: Sequence[float]) -> float:
    """The median. With an odd number of samples it is one of them (no interpolation)."""
    if not xs:
        raise ValueError("median of no samples")
    return statistics.median(xs)


def median_interval(xs: Sequence[float], confidence: float) -> tuple[float, float, float]:
    """The median of xs with its exact distribution-free interval, as (median, low, high).

    The interval [x_(k), x_(n+1-k)] of the sorted samples covers the true median with
    probability 1 - 2 P(B <= k-1), B ~ Binomial(n, 1/2) (scipy.stats.binom): k is the largest
    with that at least `confidence` (k = 1, the whole range, when even that cannot reach it).
    Needs only independent samples, no shape of their distribution."""
    from scipy.stats import binom

    if not xs:
        raise ValueError("median_interval of no samples")
    d = sorted(xs)
    n = len(d)
    # k - 1 counts the j in 1 .. (n + 1) // 2 - 1 with 2 P(B <= j) <= 1 - confidence
    tails = 2 * binom.cdf(range(1, (n + 1) // 2), n, 0.5)
    k = 1 + int((tails <= 1 - confidence).sum())
    return median(d), d[k - 1], d[n - k]


def look_confidence(confidence: float, looks: int) -> float:
    """The confidence of each of `looks` interim intervals so that all of them hold together
    with probability at least `confidence` (Bonferroni alpha spending, alpha / looks a look).

    A sequential gate that stops at the first look whose interval decides is then wrong with
    probability at most 1 - confidence, whenever it stops: the union bound needs no
    independence between looks."""
    if looks < 1:
        raise ValueError("looks must be at least 1")
    return 1 - (1 - confidence) / looks


TRIM_FROM = 12  # process pairs from which pairs_interval trims one a side (the shipped last look)


def pairs_interval(ys: Sequence[float], confidence: float) -> tuple[float, float, float, str]:
    """One statistic per process pair, summarised with its interval: (centre, low, high,
    estimator). Each y comes from a fresh pair of worker processes, so a per-process offset is
    part of the spread between them and widens the interval.

    Under TRIM_FROM pairs: the mean with its Student t interval (`mean`, scipy.stats.t). From
    TRIM_FROM: the mean without the highest and the lowest pair, with Yuen's interval of that
    trimmed mean (`trimmed`, scipy.stats.mstats.trimmed_mean_ci: the winsorised spread, t with
    n - 3 degrees of freedom), so one anomalous process (a worker 40 % slow for its whole
    life) can neither decide a case nor hold it undecided, at little cost in width when every
    pair is well-behaved. Under two pairs the interval is unbounded."""
    from scipy.stats import mstats, t

    n = len(ys)
    if n == 0:
        raise ValueError("pairs_interval of no process pairs")
    if n >= TRIM_FROM:
        cut = (1 / n, 1 / n)
        lo, hi = mstats.trimmed_mean_ci(ys, limits=cut, alpha=1 - confidence)
        return float(mstats.trimmed_mean(ys, limits=cut)), float(lo), float(hi), "trimmed"
    mean = sum(ys) / n
    if n < 2:
        return mean, -math.inf, math.inf, "mean"
    sd = statistics.stdev(ys)
    half = t.ppf((1 + confidence) / 2, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half, "mean"


def _pairs_df(n: int) -> int:
    """The degrees of freedom of pairs_interval's t quantile over n process pairs."""
    return n - 3 if n >= TRIM_FROM else n - 1


def interval_at(ys: Sequence[float], pairs: int, confidence: float) -> tuple[float, float]:
    """The interval pairs_interval would give over `pairs` process pairs that spread as ys do,
    centred where ys are: its half-width scaled by the t quantiles' ratio and sqrt(n / pairs)
    (the spread is the runner's, measured; only the count changes). Under two pairs unbounded."""
    from scipy.stats import t

    n = len(ys)
    centre, lo, hi, _ = pairs_interval(ys, confidence)
    if n < 2 or pairs < 2 or not math.isfinite(hi - lo):
        return -math.inf, math.inf
    q = (1 + confidence) / 2
    scale = t.ppf(q, _pairs_df(pairs)) / t.ppf(q, _pairs_df(n)) * math.sqrt(n / pairs)
    half = (hi - lo) / 2 * scale
    return centre - half, centre + half


def needed_tolerance(intervals: Sequence[Sequence[float]]) -> float:
    """The tolerance that intervals of relative changes (low, high) need to fit inside: the
    widest end of any, rounded up to a whole percent (mlagate calibrate's proposal from A/A
    intervals, and what an undecided l1_parity case names)."""
    widest = max(max(abs(lo), abs(hi)) for lo, hi in intervals)
    return math.ceil(round(widest * 100, 6)) / 100 if math.isfinite(widest) else math.inf


def last_look_floor(figures: Mapping[int, Sequence[float]], pairs: int, confidence: float) -> dict:
    """What a runner's spread between process pairs allows at the last look: per cache length
    the interval (relative change) over `pairs` pairs that spread as its figures (log-ratios)
    do (interval_at); `floor`, the widest half-width; `needed_tolerance` of those intervals.
    mlagate calibrate proposes l1_parity's tolerance by it and an undecided case names it."""
    ends = {}
    for T, ys in figures.items():
        lo, hi = interval_at(ys, pairs, confidence)
        ends[T] = (math.expm1(lo), math.expm1(hi))
    return {
        "pairs": pairs,
        "confidence": confidence,
        "intervals": {str(T): list(e) for T, e in ends.items()},
        "floor": max((hi - lo) / 2 for lo, hi in ends.values()),
        "needed_tolerance": needed_tolerance(list(ends.values())),
    }


def _bootstrap(data: tuple, statistic, level: float, seed: int) -> tuple[float, float]:
    """scipy.stats.bootstrap's percentile interval of statistic(*data), each sample resampled
    on its own (a paired design is passed as one sample of per-pair values)."""
    from scipy.stats import bootstrap

    if any(len(d) < 2 for d in data):
        v = statistic(*data)
        return v, v
    res = bootstrap(
        data,
        statistic,
        vectorized=False,
        n_resamples=1999,
        confidence_level=level,
        method="percentile",
        rng=seed,
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def diff_ci(
    a: Sequence[float], b: Sequence[float], level: float = 0.95
) -> tuple[float, float, float]:
    """Paired difference b_i - a_i of two interleaved series (sample i of both ran back to
    back): its median with the exact order-statistic interval (median_interval)."""
    if len(a) != len(b) or not a:
        raise ValueError("diff_ci needs two equally long, non-empty series")
    return median_interval([y - x for x, y in zip(a, b, strict=True)], level)


def retained_ci(
    plain_lo: Sequence[float],
    spec_lo: Sequence[float],
    plain_hi: Sequence[float],
    spec_hi: Sequence[float],
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """How much of a speed ratio survives from one condition to another, with a bootstrap interval:
    median(plain_hi_i / spec_hi_i) / median(plain_lo_i / spec_lo_i). Within a condition the two
    series are interleaved, so each ratio is paired by sample; the two conditions' ratios are
    resampled independently (scipy.stats.bootstrap, percentile). Caveat: with under about 7
    samples a condition the interval is too narrow."""

    def paired(p, s):
        if len(p) != len(s) or not p:
            raise ValueError("retained_ci needs equally long, non-empty series per condition")
        return [x / y for x, y in zip(p, s, strict=True)]

    lo_r, hi_r = paired(plain_lo, spec_lo), paired(plain_hi, spec_hi)

    def stat(lo_x, hi_x):
        return median(list(hi_x)) / median(list(lo_x))

    return (stat(lo_r, hi_r), *_bootstrap((lo_r, hi_r), stat, level, seed))


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
    level: float = 0.95,
    seed: int = 0,
) -> dict:
    """The cost of the extra queries, time(L) - time(1), per cache length, and its trend.

    samples maps a cache length T to (L = 1 timings, L = k timings), interleaved: sample i of
    both ran back to back, so the marginal is the median of the paired differences, with its
    exact order-statistic interval (diff_ci). The least-squares slope of those medians against
    T (seconds per cached token) has a bootstrap interval (scipy.stats.bootstrap) that
    resamples the paired differences within every T. Caveat: the slope assumes the cost is
    linear in T; a flat cost gives a slope interval around zero, a materialising path a
    clearly positive one.
    """
    Ts = sorted(samples)
    per_t = {}
    diffs = []
    for T in Ts:
        one, k = samples[T]
        d, lo, hi = diff_ci(one, k, level=level)
        per_t[T] = {"marginal": d, "ci": (lo, hi)}
        diffs.append([y - x for x, y in zip(one, k, strict=True)])
    if len(Ts) < 2:
        return {"per_T": per_t, "slope": 0.0, "slope_ci": (0.0, 0.0)}

    def slope(*ds):
        return least_squares_slope(Ts, [median(list(d)) for d in ds])

    return {
        "per_T": per_t,
        "slope": slope(*diffs),
        "slope_ci": _bootstrap(tuple(diffs), slope, level, seed),
    }


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
    the median of the per-pair changes and its exact order-statistic interval (median_interval).
    Pairs are the two series' samples taken back to back (ABBA), so a change of machine speed
    slower than one pair cancels out of each ratio."""
    if len(arm) != len(baseline) or not arm:
        raise ValueError("paired_change needs two equally long, non-empty series")
    return median_interval([a / b - 1 for a, b in zip(arm, baseline, strict=True)], confidence)
