"""speculative_transaction: a tiny whole model of the runtime's own classes (gates.layers
decoder layers or more, random weights) runs gates.rounds rounds of: verify L drafted tokens
(L cycles over gates.widths), accept the first j (drawn from 0..L), roll the rest back
through the runtime's own API, then a decode step or straight into the next verify. The
reference is plain autoregressive decoding of the very tokens that were kept, one at a time,
from the same primed cache.

Within gates.logits_ulps: the logits of every accepted position and the float cache state at
the end. Exact: greedy argmax
wherever the reference's top-two margin exceeds that budget, the top-k every sparse indexer
returns, and every cache's public offset at the end. A model built with fewer than
gates.layers decoder layers is invalid (the module's `deep` config keys in matrix.yaml say
how to build it deeper). A run in which no verify step rejected a token is invalid.
"""

import random

from mlagate.harness import check, give_up, scripts


def transaction(
    rng: random.Random, vocab: int, widths: list[int], rounds: int
) -> tuple[list[dict], list[int], list[dict]]:
    """(steps of the tested script, the kept tokens in order, a log of (L, j, then)) for one
    seed."""
    steps, kept, log = [], [], []
    for r in range(rounds):
        L = widths[r % len(widths)]
        drafted = scripts.tokens(rng, vocab, L)
        j = rng.randint(0, L)
        steps.append({"tokens": drafted, "keep": j})
        kept += drafted[:j]
        then = "decode" if rng.random() < 0.5 else "verify"
        if then == "decode" or j < L:
            fix = scripts.tokens(rng, vocab, 1, avoid=drafted[j] if j < L else None)
            steps.append({"tokens": fix})
            kept += fix
            then = "decode"
        log.append({"L": L, "j": j, "then": then})
    steps[-1]["mark"] = "end"
    return steps, kept, log


def test_speculative_transaction(mla):
    g = mla.gates
    key, info = mla.build(layers=g["layers"])
    T, vocab = mla.beyond_topk(g["beyond_topk"]), mla.profile.vocab_size
    problems, table, rounds = [], {}, {}
    for seed in g["seeds"]:
        rng = random.Random(seed)
        steps, kept, log = transaction(rng, vocab, list(g["widths"]), g["rounds"])
        rounds[f"seed={seed}"] = log
        runs = {
            "speculative": {"prompt": scripts.prompt(T, seed), "steps": steps},
            "plain": {
                "prompt": scripts.prompt(T, seed),
                "steps": scripts.one_at_a_time(kept, "end"),
            },
        }
        reply = mla.script(
            key,
            runs,
            [("speculative", "plain")],
            margin_ulps=scripts.budget(g["logits_ulps"], mla.case.backend),
        )
        if reply["layers"] < g["layers"]:
            give_up(
                f"the model was built with {reply['layers']} decoder layers, fewer than "
                f"gates.layers {g['layers']}: give the module `deep` config keys",
                problems,
            )
        mla.metric("rollback", reply["rollback"])
        mla.metric("layers", reply["layers"])
        mla.metric("mla_instances", info["attention_instances"])
        cmp = reply["pairs"]["speculative|plain"]
        table[f"seed={seed}"] = scripts.summary(cmp)
        found = scripts.judge(
            cmp,
            scripts.budget(g["logits_ulps"], mla.case.backend),
            scripts.budget(g["logits_ulps"], mla.case.backend),
            margin_check=True,
        )
        if found:
            mla.reproducer(seed=seed, T=T, first_position=scripts.first_position(cmp), rounds=log)
            problems.append(
                (
                    scripts.kind(cmp, "numerical_mismatch"),
                    f"seed={seed}: {found[0]}"
                    + (f" (+{len(found) - 1} more)" if len(found) > 1 else ""),
                )
            )
    mla.metric("cases", table)
    mla.metric("rounds", rounds)
    if not any(r["j"] < r["L"] for log in rounds.values() for r in log):
        give_up("no verify step rejected a token: the rollback was never exercised", problems)
    if not all(t["positions"] for t in table.values()):
        give_up("a script kept no position to compare", problems)
    check(problems, shown=len(problems))


ORDER = 70  # where the report lists it among the correctness suites
