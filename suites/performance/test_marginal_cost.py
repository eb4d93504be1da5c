"""marginal_cost: the cost of the extra queries of a verify step, time(L) - time(1) for
L = 2, 3, 4, over the profile's cache lengths, per module and arm.

Widths are interleaved on one primed cache (L = 1, 2, 3, 4, then reversed, ...), and every
timed step's path is proven by the counters. All series run in one worker, so each sample of
L = k is paired with the L = 1 sample taken beside it.

Gate (every arm): at the longest cache, the L = 2 marginal cost in units of the L = 1 step
on the same cache: the median of the paired ratios time_i(2) / time_i(1) - 1, with its exact
order-statistic interval (mlagate.stats.median_interval), is at most `max_relative`. A
module that absorbs pays about one more decode step for the second query whatever the cache
(its attention over the cached latent grows with T exactly as decode does); a module that
materialises pays the expansion of the whole cache, tens to hundreds of decode steps.
Confidently above fails, confidently below passes. The longest cache is sampled
sequentially (mla.until_decided): `samples` first, more at each look while the interval
straddles the bound, up to `max_samples` and within `budget_s`, every look at a spent
confidence; still across the bound then is invalid (inconclusive). The growth of the absolute
marginal from the shortest to the longest cache, and its slope per cached token with a
bootstrap interval, are reported for every arm.
"""

from mlagate import stats
from mlagate.harness import Failed, Invalid
from mlagate.harness.timing import stopped_at_each


def test_marginal_cost(mla):
    gates = mla.gates
    widths = gates["widths"]
    bound = gates["max_relative"]
    key, _ = mla.build()
    series = [{"label": f"L={L}", "key": key, "L": L} for L in widths]
    caches = list(mla.profile.perf_cache_lengths)
    hi_t = max(caches)

    def judge(t: dict, level: float):
        _, lo, hi = stats.paired_change(t["L=2"], t["L=1"], level)
        return "fail" if lo > bound else "pass" if hi <= bound else None

    by_t, level, seq = {}, gates["confidence"], {}
    for T in caches:
        mla.prime(key, T)
        if T == hi_t:
            by_t[T], _, seq = mla.until_decided(
                series, judge, gates, gates["budget_s"][mla.ctx.profile_name]
            )
            level = seq["look_confidence"]
            mla.metric("sequential", seq)
        else:
            by_t[T] = mla.interleaved(series, samples=gates["samples"])
    table = _table(by_t, widths)
    mla.metric("marginal", table)
    mla.metric("l1_median_s", {str(T): stats.median(t["L=1"]) for T, t in by_t.items()})
    lo_t = min(by_t)
    two = table["L=2"]["per_T"]
    if two[str(lo_t)]["marginal_s"] > 0:
        mla.metric(
            "growth",
            {
                "ratio": two[str(hi_t)]["marginal_s"] / two[str(lo_t)]["marginal_s"],
                "from_T": lo_t,
                "to_T": hi_t,
            },
        )
    rel, lo, hi = stats.paired_change(by_t[hi_t]["L=2"], by_t[hi_t]["L=1"], level)
    mla.metric(
        "gate",
        {"relative_marginal": rel, "ci": (lo, hi), "confidence": level, "T": hi_t, "bound": bound},
    )
    if lo > bound:
        raise Failed(
            ["too_slow"],
            f"at T={hi_t} the second query costs {rel:.1f} decode steps (interval "
            f"{lo:.1f}-{hi:.1f}, bound {bound}): it grows with the cache",
            {"relative_marginal": rel, "T": hi_t, "bound": bound},
        )
    if hi > bound:
        fixed = {T: len(t["L=1"]) for T, t in by_t.items() if T != hi_t}
        raise Invalid(
            f"inconclusive: the second query costs {rel:.2f} decode steps at T={hi_t}, interval "
            f"{lo:.2f}-{hi:.2f} straddles the bound {bound}; each cache length: "
            + stopped_at_each("T", hi_t, seq, fixed)
        )


def _table(by_t: dict, widths) -> dict:
    """Per verify width: the paired marginal per cache length (median of time_i(L) -
    time_i(1), exact interval; relative: median of the paired ratios minus one) and its slope
    per cached token."""
    table = {}
    for L in widths[1:]:
        mc = stats.marginal_cost({T: (t["L=1"], t[f"L={L}"]) for T, t in by_t.items()})
        table[f"L={L}"] = {
            "per_T": {
                str(T): {
                    "marginal_s": v["marginal"],
                    "ci_s": v["ci"],
                    "relative": stats.paired_change(by_t[T][f"L={L}"], by_t[T]["L=1"], 0.95)[0],
                }
                for T, v in mc["per_T"].items()
            },
            "slope_s_per_token": mc["slope"],
            "slope_ci": mc["slope_ci"],
        }
    return table
