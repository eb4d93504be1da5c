"""l1_parity: L = 1 takes the same branch in an arm and its baseline, so a change must not
make the L = 1 step slower or faster by more than `tolerance` (2 %).

Each try takes `samples` interleaved (ABBA) samples a side; sample i of the arm and of the
baseline ran back to back, so their ratio cancels any change of machine speed slower than a
pair. The change is the median of the paired ratios minus one, with its exact order-statistic
interval at `confidence` (mlagate.stats.paired_change). Per cache length:

- pass when the interval lies inside +-tolerance;
- fail when it lies wholly beyond it (the arm's L = 1 really is slower, or faster);
- otherwise re-measured up to `retries` times, then invalid: the run could not decide.

With `mlagate run --aa`, the baseline is a second worker of the same arm: the A/A run that
measures this runner's noise floor (benchmarks/aa_false_alarms.py counts its red runs).
"""

from mlagate import stats
from mlagate.harness import Failed, Invalid

FINGERPRINT_KEYS = ("mlx", "backend", "device", "blas", "mlx_env", "ld_preload", "python", "cpus")


def test_l1_parity(mla):
    arm = mla.case.arm
    aa = mla.case.aa
    baseline, replica = (arm, 1) if aa else (mla.ctx.matrix.arms[arm].baseline, 0)
    gates = mla.gates
    tol = gates["tolerance"]
    ours, _ = mla.build()
    theirs, _ = mla.build(arm=baseline, replica=replica)
    fp_a, fp_b = mla.ctx.pool.get(arm).fingerprint, mla.ctx.pool.get(baseline, replica).fingerprint
    differ = [k for k in FINGERPRINT_KEYS if fp_a.get(k) != fp_b.get(k)]
    if differ:
        raise Invalid(
            f"the two workers' environments differ in {', '.join(differ)}: their timings are "
            "never compared"
        )
    rows, attempts = {}, []
    caches = [T for T in mla.profile.perf_cache_lengths if T <= gates.get("max_cache", T)]
    for T in caches:
        for attempt in range(gates["retries"] + 1):
            mla.prime(ours, T)
            mla.prime(theirs, T, arm=baseline, replica=replica)
            t = mla.interleaved(
                [
                    {"label": "arm", "key": ours, "L": 1},
                    {
                        "label": "baseline",
                        "key": theirs,
                        "L": 1,
                        "arm": baseline,
                        "replica": replica,
                    },
                ],
                samples=gates["samples"],
            )
            change, lo, hi = stats.paired_change(t["arm"], t["baseline"], gates["confidence"])
            decided = (
                "pass" if -tol <= lo and hi <= tol else "fail" if lo > tol or hi < -tol else None
            )
            attempts.append(
                {
                    "T": T,
                    "attempt": attempt,
                    "change": change,
                    "ci": (lo, hi),
                    "confidence": gates["confidence"],
                    "decided": decided,
                    "arm_s": stats.median(t["arm"]),
                    "baseline_s": stats.median(t["baseline"]),
                }
            )
            if decided:
                break
        rows[str(T)] = attempts[-1]
    mla.metric("l1", rows)
    mla.metric("attempts", attempts)
    mla.metric("aa", aa)
    mla.metric(
        "detectable_difference",
        stats.detectable_difference([a["change"] for a in attempts]) if aa else None,
    )
    who = f"{baseline}{' (A/A)' if aa else ''}"

    def said(r: dict) -> str:
        return (
            f"{r['change']:+.1%} at T={r['T']} (interval {r['ci'][0]:+.1%}..{r['ci'][1]:+.1%} at "
            f"{r['confidence']:.0%}; "
            f"{arm}: {r['arm_s'] * 1e3:.3f} ms, {who}: {r['baseline_s'] * 1e3:.3f} ms)"
        )

    failed = [r for r in rows.values() if r["decided"] == "fail"]
    if failed:
        shown = "; ".join(said(r) for r in failed)
        raise Failed(["too_slow"], f"L = 1 changed beyond the {tol:.0%} tolerance: {shown}")
    open_rows = [r for r in rows.values() if r["decided"] is None]
    if open_rows:
        raise Invalid(
            f"undecided after {gates['retries'] + 1} tries: the interval straddles the {tol:.0%} "
            "tolerance: " + "; ".join(said(r) for r in open_rows)
        )
