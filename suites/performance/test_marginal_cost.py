"""marginal_cost: the cost of the extra queries of a verify step, time(L) - time(1) for
L = 2, 3, 4, over the profile's cache lengths, per module and arm.

Widths are interleaved on one primed cache (L = 1, 2, 3, 4, then reversed, ...), and every
timed step's path is proven by the counters.

Gate (every arm): at the longest cache, the L = 2 marginal cost in units of the L = 1 step
on the same cache, (time(2) - time(1)) / time(1), is at most `max_relative`. A module that
absorbs pays about one more decode step for the second query whatever the cache (its
attention over the cached latent grows with T exactly as decode does); a module that
materialises pays the expansion of the whole cache, tens to hundreds of decode steps, and
more the longer the cache. The verdict uses the bootstrap interval of the marginal
(denominator: the L = 1 median): confidently above fails, confidently below passes, an
interval across the bound is invalid (inconclusive). The growth of the absolute marginal
from the shortest to the longest cache, and its slope per cached token with an interval,
are reported for every arm.
"""

from mlagate import stats
from mlagate.harness import Failed, Invalid


def test_marginal_cost(mla):
    gates = mla.gates
    widths = gates["widths"]
    key, _ = mla.build()
    series = [{"label": f"L={L}", "key": key, "L": L} for L in widths]
    by_t = {}
    for T in mla.profile.perf_cache_lengths:
        mla.prime(key, T)
        by_t[T] = mla.interleaved(series, samples=mla.gates["samples"])
    table = {}
    for L in widths[1:]:
        mc = stats.marginal_cost({T: (t["L=1"], t[f"L={L}"]) for T, t in by_t.items()})
        table[f"L={L}"] = {
            "per_T": {
                str(T): {
                    "marginal_s": v["marginal"],
                    "ci_s": v["ci"],
                    "relative": v["marginal"] / stats.median(by_t[T]["L=1"]),
                }
                for T, v in mc["per_T"].items()
            },
            "slope_s_per_token": mc["slope"],
            "slope_ci": mc["slope_ci"],
        }
    mla.metric("marginal", table)
    mla.metric("l1_median_s", {str(T): stats.median(t["L=1"]) for T, t in by_t.items()})
    lo_t, hi_t = min(by_t), max(by_t)
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
    l1 = stats.median(by_t[hi_t]["L=1"])
    rel, lo, hi = (
        two[str(hi_t)]["relative"],
        two[str(hi_t)]["ci_s"][0] / l1,
        two[str(hi_t)]["ci_s"][1] / l1,
    )
    bound = gates["max_relative"]
    mla.metric("gate", {"relative_marginal": rel, "ci": (lo, hi), "T": hi_t, "bound": bound})
    if lo > bound:
        raise Failed(
            ["too_slow"],
            f"at T={hi_t} the second query costs {rel:.1f} decode steps (interval "
            f"{lo:.1f}-{hi:.1f}, bound {bound}): it grows with the cache",
            {"relative_marginal": rel, "T": hi_t, "bound": bound},
        )
    if hi > bound:
        raise Invalid(
            f"inconclusive: the second query costs {rel:.2f} decode steps at T={hi_t}, interval "
            f"{lo:.2f}-{hi:.2f} straddles the bound {bound}"
        )
