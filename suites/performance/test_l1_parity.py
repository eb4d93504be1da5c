"""l1_parity: L = 1 takes the same branch in an arm and its baseline, so their L = 1 step
times must agree within `tolerance` (2 %). A run where they do not measured something other
than the change (a loaded machine, a different build): it is re-measured up to `retries`
times, then reported invalid with both timings, never failed. Each try takes `samples`
interleaved samples a side (more than the profile's: two equal times are compared within
2 %), and records the bootstrap interval of the change.

With `mlagate run --aa`, the baseline is a second worker of the same arm: the A/A run that
measures this runner's noise floor and the smallest difference the gate can detect.
"""

from mlagate import stats
from mlagate.plugin import Invalid

FINGERPRINT_KEYS = ("mlx", "backend", "device", "blas", "mlx_env", "ld_preload", "python", "cpus")


def test_l1_parity(mla):
    arm = mla.case.arm
    aa = mla.case.aa
    baseline, replica = (arm, 1) if aa else (mla.ctx.matrix.arms[arm].baseline, 0)
    gates = mla.gates
    ours, _ = mla.build()
    theirs, _ = mla.build(arm=baseline, replica=replica)
    fp_a, fp_b = mla.ctx.pool.get(arm).fingerprint, mla.ctx.pool.get(baseline, replica).fingerprint
    differ = [k for k in FINGERPRINT_KEYS if fp_a.get(k) != fp_b.get(k)]
    if differ:
        raise Invalid(f"the two workers' environments differ in {', '.join(differ)}: their timings are never compared")
    rows, attempts = {}, []
    caches = [T for T in mla.profile.perf_cache_lengths if T <= gates.get("max_cache", T)]
    for T in caches:
        for attempt in range(gates["retries"] + 1):
            mla.prime(ours, T)
            mla.prime(theirs, T, arm=baseline, replica=replica)
            t = mla.interleaved([
                {"label": "arm", "key": ours, "L": 1},
                {"label": "baseline", "key": theirs, "L": 1, "arm": baseline, "replica": replica},
            ], samples=gates.get("samples"))
            change = stats.relative_change(t["baseline"], t["arm"])
            base = stats.median(t["baseline"])
            _, lo, hi = stats.diff_ci(t["baseline"], t["arm"])
            attempts.append({"T": T, "attempt": attempt, "change": change, "ci": (lo / base, hi / base), "arm_s": stats.median(t["arm"]), "baseline_s": base})
            if abs(change) <= gates["tolerance"]:
                break
        rows[str(T)] = attempts[-1]
    mla.metric("l1", rows)
    mla.metric("attempts", attempts)
    mla.metric("aa", aa)
    mla.metric("detectable_difference", stats.detectable_difference([a["change"] for a in attempts]) if aa else None)
    bad = [r for r in rows.values() if abs(r["change"]) > gates["tolerance"]]
    if bad:
        worst = max(bad, key=lambda r: abs(r["change"]))
        raise Invalid(
            f"L = 1 differs by {worst['change']:+.1%} at T={worst['T']} after {gates['retries'] + 1} tries "
            f"({arm}: {worst['arm_s'] * 1e3:.3f} ms, {baseline}{' (A/A)' if aa else ''}: {worst['baseline_s'] * 1e3:.3f} ms); "
            f"this run measured something other than the change"
        )
