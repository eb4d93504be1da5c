"""dispatch: at the widths a speculative verify uses (L = 2..8) on a warm cache the module takes
the absorbed path; L = 1 takes it too; on a cold cache the materialised path. Both guards
must read one decision: a call whose query fold and output unfold disagree fails, with the
L and T where it happened.
"""

from mlagate import crossover


def test_dispatch(mla):
    r, n, v = mla.geometry.rnv
    gates = mla.gates
    key, _ = mla.build()
    steps = [(T, L) for T in gates["warm_caches"] for L in (1, *gates["widths"])] + [
        (0, L) for L in gates["widths"]
    ]
    wrong = []
    for T, L in steps:
        obs = mla.step(key, T, L)
        expected = crossover.expected_path(L, T, r, n, v)
        if obs["path"] not in ("absorbed", "materialised"):
            ops = [c["ops"] for c in obs["calls"]]
            wrong.append(
                {
                    "L": L,
                    "T": T,
                    "path": obs["path"],
                    "expected": expected,
                    "why": f"the query fold and the output unfold disagree: {ops}",
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
                }
            )
    mla.metric("first_wrong", wrong[0] if wrong else None)
    mla.metric("wrong_steps", len(wrong))
    assert not wrong, (
        f"first wrong choice at L={wrong[0]['L']} T={wrong[0]['T']}: {wrong[0]['why']} "
        f"({len(wrong)} of {len(steps)} steps wrong)"
    )
