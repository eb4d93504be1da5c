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

from mlagate.harness import check, give_up, scripts


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
