"""dispatch: at the widths a speculative verify uses (L = 2..8) on a warm cache the module takes
the absorbed path; L = 1 takes it too; on a cold cache the materialised path. Both guards
must read one decision: a call whose query fold and output unfold disagree fails, with the
L and T where it happened. The warm caches span both sides of the cache lengths where runtimes
put floors (a few tokens to past 1024; on a cache longer than the profile's longest only the
narrowest and widest verify widths, as a floor is a cache length and each step there primes a
long cache), and a failure names the wrong region
(mlagate.pathregions): "materialised at L = 2..8 for every warm T < 1024 ..., absorbed from
T = 1024: a cache-length floor".
"""

from mlagate import crossover, pathregions
from mlagate.harness import check


def test_dispatch(mla):
    r, n, v = mla.geometry.rnv
    gates = mla.gates
    key, _ = mla.build()
    widths = gates["widths"]
    far = max(mla.profile.cache_lengths)  # past the profile's caches: the widths' two ends
    steps = [
        (T, L)
        for T in gates["warm_caches"]
        for L in ((1, *widths) if T <= far else (min(widths), max(widths)))
    ] + [(0, L) for L in widths]
    wrong, seen = [], []
    for T, L in steps:
        obs = mla.step(key, T, L)
        expected = crossover.expected_path(L, T, r, n, v)
        seen.append((T, L, obs["path"], expected))
        if obs["path"] not in ("absorbed", "materialised"):
            ops = [c["ops"] for c in obs["calls"]]
            wrong.append(
                {
                    "L": L,
                    "T": T,
                    "path": obs["path"],
                    "expected": expected,
                    "why": f"the query fold and the output unfold disagree: {ops}",
                    "kind": "guards_disagree",
                }
            )
        elif obs["path"] != expected:
            wrong.append(
                {
                    "L": L,
                    "T": T,
                    "path": obs["path"],
                    "expected": expected,
                    "why": f"took {obs['path']}, the formula says {expected}",
                    "kind": "wrong_path",
                }
            )
    mla.metric("first_wrong", wrong[0] if wrong else None)
    mla.metric("wrong_steps", len(wrong))
    if wrong:
        region = pathregions.describe(seen, (r, n, v))
        mla.metric("wrong_region", region)
        check(
            [
                (
                    w["kind"],
                    f"{region}; first wrong choice at L={w['L']} T={w['T']}: {w['why']} "
                    f"({len(wrong)} of {len(steps)} steps wrong)",
                )
                for w in wrong
            ],
            shown=1,
            more=False,  # the text counts them
            first={k: wrong[0][k] for k in ("L", "T", "path", "expected")},
        )


ORDER = 30  # where the report lists it among the correctness suites
