"""threshold: the widest step each module admits to the absorbed path, read through the path
counters, equals the exact formula for its geometry.

For every cache length of the profile (and the first cache length at which the step past the
boundary is an exact tie) the module is stepped at the formula's boundary b (must be
absorbed) and at b + 1 (must be materialised); on a cold cache (T == L) and at prefill chunk
widths the formula says materialised. Where b + 1 is an exact tie the two paths cost the same;
gates.ties says whether either path passes there ("either") or the strict form is required.
gates.floor_caches adds cache lengths on both sides of where runtimes put cache-length floors;
a failure names the wrong region first (mlagate.pathregions).
"""

from mlagate import crossover, pathregions
from mlagate.harness import check


def test_threshold(mla):
    r, n, v = mla.geometry.rnv
    gates = mla.gates
    key, _ = mla.build()
    caches = sorted(
        set(mla.profile.cache_lengths)
        | set(gates.get("floor_caches") or ())
        | set(crossover.tie_caches(r, n, v, gates["tie_search"])[:1])
    )
    boundary_probes = [
        (T, L)
        for T in caches
        for L in sorted(
            {crossover.widest_absorbed(T, r, n, v), crossover.widest_absorbed(T, r, n, v) + 1}
        )
    ]
    probes = list(boundary_probes) + [(0, L) for L in gates["cold_widths"]]
    probes += [(mla.profile.cache_lengths[0], L) for L in mla.profile.prefill_widths]
    wrong, boundary, seen = [], {}, []
    for T, L in probes:
        obs = mla.step(key, T, L)
        expected = crossover.expected_path(L, T, r, n, v)
        tie = crossover.is_tie(L, T, r, n, v)
        if not tie:
            seen.append((T, L, obs["path"], expected))
        ok = obs["path"] == expected or (
            tie and gates["ties"] == "either" and obs["path"] in ("absorbed", "materialised")
        )
        if T in caches:
            boundary.setdefault(f"T={T}", {"formula": crossover.widest_absorbed(T, r, n, v)})[
                f"L={L}"
            ] = obs["path"] + (" (tie)" if tie else "")
        if not ok:
            wrong.append(
                (
                    "boundary_off" if (T, L) in boundary_probes else "wrong_path",
                    f"L={L} T={T}: took {obs['path']}, the formula says {expected}"
                    + (" (an exact tie)" if tie else ""),
                )
            )
    mla.metric("boundary", boundary)
    mla.metric(
        "limit",
        {
            "r_d_over_2r_minus_d": str(crossover.limit(r, n, v)),
            "table": crossover.table_threshold(r, n, v),
        },
    )
    if wrong:
        region = pathregions.describe(seen, (r, n, v))
        mla.metric("wrong_region", region)
        wrong[0] = (wrong[0][0], f"{region}; {wrong[0][1]}" if region else wrong[0][1])
    check(wrong, shown=4)


ORDER = 20  # where the report lists it among the correctness suites
