"""probes: the path every module really takes at L = 1, 2, 4 on warm and cold caches, and
proof that each path can be forced (or the module is reported unforceable).

Fails when the counters cannot name a path (the fold and unfold disagree), when a forced
path is not the path the counters saw, or when a forced branch raises in the runtime.

The cold cache comes first at each width, so the first step a fresh worker takes is a short
prompt on an empty cache, as a server's first request may be: a function the runtime compiles
on first use is then traced on fewer keys than a sparse indexer's top-k, not on a long cache.
"""

from mlagate.harness import Invalid, check
from mlagate.harness.supervisor import RuntimeRaised


def test_probes(mla):
    widths = mla.gates["widths"]
    forced_width = mla.gates["forced_width"]
    warm = mla.profile.cache_lengths[0]
    problems = []

    key, _ = mla.build()
    paths = {}
    for L in widths:
        for T in (0, warm):  # cold first (above)
            obs = mla.step(key, T, L)
            paths[f"L={L},T={T}"] = obs["path"]
            if obs["path"] not in ("absorbed", "materialised"):
                problems.append(
                    (
                        "guards_disagree",
                        f"L={L} T={T}: no single path ({obs['path']}: "
                        f"{[c['ops'] for c in obs['calls']]})",
                    )
                )
    mla.metric("paths", paths)

    forced_key, info = mla.build(forced=True)
    mla.metric("guards", info["guards"])
    if not info["guards"]:
        check(problems)
        raise Invalid(
            "unforceable: no `if` around self.embed_q/self.unembed_out in "
            f"{info.get('searched') or mla.module.attention_for(mla.case.arm)}"
        )
    forced = {}
    for path in ("absorbed", "materialised"):
        try:
            obs = mla.step(forced_key, warm, forced_width, force=path)
        except RuntimeRaised as exc:
            forced[path] = "raised"
            problems.append(
                (
                    "runtime_raised",
                    f"forced {path} at L={forced_width} T={warm}: the runtime raised {exc}",
                )
            )
            continue
        forced[path] = obs["path"]
        if obs["path"] != path:
            problems.append(
                (
                    "wrong_path",
                    f"forced {path} at L={forced_width} T={warm}: the counters saw {obs['path']} "
                    f"({[c['ops'] for c in obs['calls']]})",
                )
            )
    mla.metric("forced", forced)
    check(problems, shown=len(problems))


ORDER = 10  # where the report lists it among the correctness suites
