"""crossover: forced absorbed vs forced materialised over widths L (the profile's
crossover_widths) at one warm cache (its crossover_cache), locating where materialising
starts to win on this backend.

The formula's widest absorbed width b for that cache is added to the sweep. At b the two
paths cost the same number of operations by construction, so the backend's constant factors
decide which is faster there. Gate: at b the absorbed path is at most `tolerance` slower than
the materialised one (the bootstrap interval of (absorbed - materialised) / materialised
lies below the tolerance): confidently slower fails (the formula sends too many queries to
the absorbed path on this backend), an interval across the tolerance is invalid
(inconclusive). The gate's width takes `samples_at_formula` samples a side (the others the
profile's): the two paths are within a few percent of each other there. The measured
crossover (the first swept width where materialising wins) and the margin at b are reported
either way.
"""

from mlagate import crossover, stats
from mlagate.harness import Failed, Invalid


def test_crossover(mla):
    r, n, v = mla.geometry.rnv
    T = mla.profile.crossover_cache
    b = crossover.widest_absorbed(T, r, n, v)
    widths = sorted(set(mla.profile.crossover_widths) | {b})
    key, info = mla.build(forced=True)
    if not info["guards"]:
        raise Invalid(
            "unforceable: no `if` around self.embed_q/self.unembed_out in "
            f"{mla.module.attention_for(mla.case.arm)}"
        )
    mla.prime(key, T, horizon=max(widths))
    sweep = {}
    for L in widths:
        t = mla.interleaved(
            [
                {"label": "absorbed", "key": key, "L": L, "force": "absorbed"},
                {"label": "materialised", "key": key, "L": L, "force": "materialised"},
            ],
            samples=mla.gates["samples_at_formula"] if L == b else None,
        )
        d, lo, hi = stats.diff_ci(t["absorbed"], t["materialised"])
        sweep[L] = {
            "absorbed_s": stats.median(t["absorbed"]),
            "materialised_s": stats.median(t["materialised"]),
            "materialised_minus_absorbed_s": d,
            "ci": (lo, hi),
        }
    losing = [L for L in widths if sweep[L]["materialised_minus_absorbed_s"] < 0]
    empirical = min(losing) if losing else None
    at_b = sweep[b]
    base = at_b["materialised_s"]
    slowdown = -at_b["materialised_minus_absorbed_s"] / base
    lo, hi = -at_b["ci"][1] / base, -at_b["ci"][0] / base
    tol = mla.gates["tolerance"]
    mla.metric("sweep", {str(L): s for L, s in sweep.items()})
    mla.metric(
        "crossover",
        {
            "cache": T,
            "formula_widest_absorbed": b,
            "empirical_first_width_materialised_wins": empirical,
            "absorbed_slowdown_at_formula": slowdown,
            "ci": (lo, hi),
            "tolerance": tol,
        },
    )
    if lo > tol:
        raise Failed(
            ["boundary_off"],
            f"at the formula's width L={b} (T={T}) the absorbed path is {slowdown:.0%} slower "
            f"than materialising (interval {lo:.0%}..{hi:.0%}, tolerance {tol:.0%}); "
            f"materialising first wins at L={empirical}",
            {"width": b, "cache": T, "slowdown": slowdown},
        )
    if hi > tol:
        raise Invalid(
            f"inconclusive at L={b}: absorbed is {slowdown:+.0%} vs materialised, interval "
            f"{lo:+.0%}..{hi:+.0%} straddles the {tol:.0%} tolerance"
        )
