"""crossover: forced absorbed vs forced materialised over widths L (the profile's
crossover_widths) at one warm cache (its crossover_cache), locating where materialising
starts to win on this backend.

The formula's widest absorbed width b for that cache is added to the sweep. At b the two
paths cost the same number of operations by construction, so the backend's constant factors
decide which is faster there. Both paths run in one worker, interleaved, so sample i of each
is a pair. Gate: at b the absorbed path is at most `tolerance` slower than the materialised
one: the median of the paired ratios absorbed_i / materialised_i - 1, with its exact
order-statistic interval (mlagate.stats.paired_change), lies below the tolerance; confidently
slower fails (the formula sends too many queries to the absorbed path on this backend). The
gate's width is sampled sequentially (mla.until_decided): `samples_at_formula` pairs first,
more at each look while the interval straddles the tolerance, up to `max_samples` and within
`budget_s`, every look at a spent confidence; still across then is invalid (inconclusive).
The other widths take the profile's samples. The measured crossover (the first swept width
where materialising wins) and the margin at b are reported either way.
"""

from mlagate import crossover, stats
from mlagate.harness import Failed, Invalid
from mlagate.harness.timing import stopped_at_each


def test_crossover(mla):
    r, n, v = mla.geometry.rnv
    T = mla.profile.crossover_cache
    b = crossover.widest_absorbed(T, r, n, v)
    widths = sorted(set(mla.profile.crossover_widths) | {b})
    key, info = mla.build(forced=True)
    if not info["guards"]:
        raise Invalid(
            "unforceable: no `if` around self.embed_q/self.unembed_out in "
            f"{info.get('searched') or mla.module.attention_for(mla.case.arm)}"
        )
    mla.prime(key, T, horizon=max(widths))
    tol = mla.gates["tolerance"]
    gates = {**mla.gates, "samples": mla.gates["samples_at_formula"]}

    def judge(t: dict, level: float):
        _, lo, hi = stats.paired_change(t["absorbed"], t["materialised"], level)
        return "fail" if lo > tol else "pass" if hi <= tol else None

    sweep, level, seq, counts = {}, 0.95, {}, {}
    for L in widths:
        series = [
            {"label": "absorbed", "key": key, "L": L, "force": "absorbed"},
            {"label": "materialised", "key": key, "L": L, "force": "materialised"},
        ]
        if L == b:
            t, _, seq = mla.until_decided(
                series, judge, gates, mla.gates["budget_s"][mla.ctx.profile_name]
            )
            level = seq["look_confidence"]
            mla.metric("sequential", seq)
        else:
            t = mla.interleaved(series)
        counts[L] = len(t["absorbed"])
        d, lo, hi = stats.diff_ci(t["absorbed"], t["materialised"])
        sweep[L] = {
            "absorbed_s": stats.median(t["absorbed"]),
            "materialised_s": stats.median(t["materialised"]),
            "materialised_minus_absorbed_s": d,
            "ci": (lo, hi),
            "slowdown": stats.paired_change(t["absorbed"], t["materialised"], 0.95)[0],
        }
        if L == b:
            slowdown, lo_b, hi_b = stats.paired_change(t["absorbed"], t["materialised"], level)
    losing = [L for L in widths if sweep[L]["materialised_minus_absorbed_s"] < 0]
    empirical = min(losing) if losing else None
    lo, hi = lo_b, hi_b
    mla.metric("sweep", {str(L): s for L, s in sweep.items()})
    mla.metric(
        "crossover",
        {
            "cache": T,
            "formula_widest_absorbed": b,
            "empirical_first_width_materialised_wins": empirical,
            "absorbed_slowdown_at_formula": slowdown,
            "ci": (lo, hi),
            "confidence": level,
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
            f"{lo:+.0%}..{hi:+.0%} straddles the {tol:.0%} tolerance; each width at T={T}: "
            + stopped_at_each("L", b, seq, {L: n for L, n in counts.items() if L != b})
        )
