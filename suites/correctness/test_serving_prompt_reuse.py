"""serving_prompt_reuse: a prompt cache reused through the runtime's own functions continues a
conversation as the cache it came from, and as a cold prefill of the same tokens.

For each prefix length of gates.prefixes and each mode of gates.modes (mlagate.worker.reuse):
- save_load: the prefix prefilled, saved with the runtime's `save_prompt_cache` and loaded with
  its `load_prompt_cache`;
- trim: the prefix and a branch of gates.branch tokens prefilled, then trimmed back to the
  shared prefix as the runtime trims a cache for the next turn (mlx-lm `trim_prompt_cache`;
  mlx-vlm its per-turn prefix reuse: `_prefix_cache_trim_amount`, each cache's `trim`);
then a follow-up turn of each width of gates.follow_ups (a warm step). Its logits equal the
prefix kept in memory and continued within gates.kept_ulps (0: bitwise; the same arithmetic)
and a cold prefill of prefix and follow-up in one call within gates.cold_ulps (other shapes,
maybe another path). Prefixes and branches straddle a sparse indexer's top-k and pool windows.
On the natural path; on both forced paths too for the last prefix. Both modes continue the same
prefix and follow-ups, so each follow-up's kept and cold runs serve both. Each configuration
(mode, prefix, path) is judged on its own (mlagate.harness.configurations): one the runtime
cannot serve is listed against its finding (matrix.yaml's `unservable`), the others must be
equal.
"""

import random

from mlagate.harness import check, scripts
from mlagate.harness import serving as sv
from mlagate.harness.configurations import Configurations
from mlagate.harness.scripts import budget


def test_serving_prompt_reuse(mla):
    g = mla.gates
    key, info = mla.build(forced=True)
    vocab, backend = mla.profile.vocab_size, mla.case.backend
    kept_ulps, cold_ulps = budget(g["kept_ulps"], backend), budget(g["cold_ulps"], backend)
    rng = random.Random(g["seed"])
    tmp = mla.ctx.out / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    configs, table, modes = Configurations(mla), {}, list(g["modes"])
    for T in g["prefixes"]:
        prefix = scripts.tokens(rng, vocab, T)
        branch = scripts.tokens(rng, vocab, g["branch"])
        follow = [scripts.tokens(rng, vocab, w) for w in g["follow_ups"]]
        for force in sv.forces(info) if T == g["prefixes"][-1] else [None]:
            reply = mla.call(
                "reuse",
                key=key,
                prefix=prefix,
                branch=branch,
                follow=follow,
                modes=modes,
                force=force,
                path=str(tmp / mla.case.file_stem),
                dtype=mla.case.dtype,
            )
            for mode in modes:
                got, label = reply["modes"][mode], f"{mode}/T={T}/path={force or 'natural'}"
                if "not_servable" in got:
                    configs.judge(label, [("not_servable", f"{label}: {got['not_servable']}")])
                    continue
                problems = []
                table[label] = _judge(got, label, kept_ulps, cold_ulps, g["branch"], problems)
                configs.judge(label, problems)
    mla.metric("cases", table)
    configs.record(mla)
    check(configs.problems)


def _judge(reply, label: str, kept_ulps: float, cold_ulps: float, branch: int, problems) -> dict:
    worst = {"kept": 0.0, "cold": 0.0}
    classes: set = set()
    for f in reply["follow"]:
        at = f"{label} follow-up L={f['width']}"
        if "error" in f:
            err = f["error"]
            problems.append(
                ("runtime_raised", f"{at}: the runtime raised: {err['error']} at {err['at']}")
            )
            continue
        if "refused" in f:
            problems.append(("not_servable", f"{at}: {f['refused']}"))
            continue
        classes |= set(f["classes"])
        if "dropped" in f and f["dropped"] != branch:
            problems.append(
                (
                    "reuse_mismatch",
                    f"{at}: the runtime's trim dropped {f['dropped']} of the {branch} tokens past "
                    "the shared prefix",
                )
            )
        for name, limit in (("kept", kept_ulps), ("cold", cold_ulps)):
            worst[name] = max(worst[name], f[name])
            if not f[name] <= limit:
                problems.append(
                    (
                        "reuse_mismatch",
                        f"{at}: {f[name]:.1f} ULP from the {name} run (budget {limit}; paths "
                        f"{f['paths']['reused']} vs {f['paths'][name]})",
                    )
                )
    return {
        "kept_ulps": round(worst["kept"], 3),
        "cold_ulps": round(worst["cold"], 3),
        "classes": sorted(classes),
    }
