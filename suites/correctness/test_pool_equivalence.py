"""pool_equivalence: on a sparse-indexer module, from the same primed cache, a wide step of S
new tokens must equal the same S tokens fed one at a time (S from gates.widths), on cache
lengths aligned and misaligned to the pool width (gates.beyond_topk: tokens past the
indexer's top-k; the pool width is the indexer's kpool, 1 where it does not pool).

Exact: the top-k the indexer returns for every new position (as a set: argpartition leaves
the order free), every cache's public offset, and the shapes and integer contents of every
cache's public `state` (so the pool window count and remainder). Within gates.state_ulps:
the float state (pooled keys, index keys, latents), because the two orders of summation may
differ. Within gates.logits_ulps: the logits of the new positions.

The cache lengths exceed the indexer's top-k so that every query really selects; a case
where every selection fell back to dense is invalid, not passed.
"""

import random

from mlagate import gates
from mlagate.harness import check, give_up, scripts

FAILURE_KINDS = ("pool_mismatch", "runtime_raised")
GATES = {
    "dtype": gates.Dtype(),  # weights and activations (float32: selections must match exactly)
    "widths": gates.List(gates.Int(2, 4096)),  # S, new tokens per wide step
    "beyond_topk": gates.List(gates.Int(0, 1 << 20)),  # primed caches past the top-k
    "seed": gates.Int(0),  # prompt and token seed (the reproducer names it)
    "logits_ulps": gates.Keyed("backend", gates.Number(0)),  # ULPs of the dtype at max |logits|
    "state_ulps": gates.Keyed(
        "backend", gates.Number(0)
    ),  # ULPs at max |array| of pooled keys, index keys, latents
}


def PLAN_CHECK(kpool: int, topk: int, gates) -> str | None:  # noqa: N802  (a declaration, read with GATES)
    """Aligned and misaligned caches are both needed where the indexer pools."""
    lengths = [topk + o for o in gates["beyond_topk"]]
    if kpool > 1 and not (any(T % kpool == 0 for T in lengths) and any(T % kpool for T in lengths)):
        return (
            f"beyond_topk gives cache lengths {lengths}: both aligned and misaligned ones are "
            f"needed for kpool {kpool}"
        )
    return None


def test_pool_equivalence(mla):
    g = mla.gates
    key, _ = mla.build()
    kpool, topk = mla.kpool, mla.index_topk
    lengths = [mla.beyond_topk(o) for o in g["beyond_topk"]]
    mla.metric(
        "indexer",
        {
            "kpool": kpool,
            "index_topk": topk,
            "aligned": [T for T in lengths if T % kpool == 0],
            "misaligned": [T for T in lengths if T % kpool],
        },
    )
    vocab = mla.profile.vocab_size
    problems, table, private = [], {}, []
    selected = 0
    for T in lengths:
        rng = random.Random(g["seed"] * 1000 + T)
        runs, pairs, where = {}, [], {}
        for S in g["widths"]:
            toks = scripts.tokens(rng, vocab, S)
            runs[f"wide/S={S}"] = {
                "prompt": scripts.prompt(T, g["seed"]),
                "steps": [{"tokens": toks, "mark": "end"}],
            }
            runs[f"one/S={S}"] = {
                "prompt": scripts.prompt(T, g["seed"]),
                "steps": scripts.one_at_a_time(toks, "end"),
            }
            pairs.append((f"wide/S={S}", f"one/S={S}"))
            where[f"wide/S={S}|one/S={S}"] = S
        reply = mla.script(key, runs, pairs)
        mla.metric("rollback", reply["rollback"])
        mla.metric("indexers", reply["indexers"])
        for name, cmp in reply["pairs"].items():
            S = where[name]
            row = f"T={T},S={S}"
            table[row] = scripts.summary(cmp)
            selected += cmp["topk"]["compared"] - cmp["topk"]["dense"]
            private += [f"{row} {n}" for n in scripts.private_notes(cmp)]
            found = scripts.judge(
                cmp,
                scripts.budget(g["logits_ulps"], mla.case.backend),
                scripts.budget(g["state_ulps"], mla.case.backend),
            )
            if found:
                rep = mla.reproducer(seed=g["seed"], S=S, k=0, T=T, aligned=T % kpool == 0)
                problems.append(
                    (
                        scripts.kind(cmp, "pool_mismatch"),
                        f"{row}: {found[0]}"
                        + (f" (+{len(found) - 1} more)" if len(found) > 1 else "")
                        + f" [reproducer: T={rep['T']} S={S} seed={g['seed']}]",
                    )
                )
    mla.metric("cases", table)
    mla.metric("private_pool_notes", private[:8])
    if reply["indexers"] == 0:
        give_up(
            f"no sparse indexer found in {mla.module.attention_for(mla.case.arm)} instances (no "
            "`indexer` child)",
            problems,
        )
    if selected == 0:
        give_up("every selection fell back to dense: nothing about the pools was checked", problems)
    check(problems)


ORDER = 60  # where the report lists it among the correctness suites
