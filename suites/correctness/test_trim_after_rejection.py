"""trim_after_rejection: prime a cache of T tokens, run a verify step of S drafted tokens,
reject the last k (k = 1..S-1) through the runtime's own API (its speculative cache
transaction where it has one, else `trim_prompt_cache`, else each cache's `trim`), then
continue with new tokens (gates.continue: the correction token first, which never equals the
rejected draft; a wider step is a verify accepted whole). Caches are gates.beyond_topk tokens
past the indexer's top-k. The result must equal a run that never saw the rejected tokens: the same
prompt, the S - k accepted tokens as one step, the same continuation.

A runtime with a transaction has a cache-level rollback too (its drafters' rollback and its
prompt-cache reuse call each cache's `trim`): every rejection is also made through that route
(`trim_prompt_cache`, else each cache's `trim`) where the caches say they can be trimmed; a
refusal is recorded, not judged. With kpool >= 4, a prompt of one token and a verify of kpool - 2
add rejections before the first pool window completes (nothing pooled yet, the pool's own
remainder rolled back).

Exact: the top-k every indexer returns at every position still in the cache, every cache's
public offset, the integer state (pool window count, remainder). Within gates.state_ulps:
float state (pooled keys, index keys, latents); within gates.logits_ulps: the logits of
every accepted and continued position.

The grid covers rejections that un-complete a pool window (cross a boundary) and ones that
stay inside the open window; a case whose grid misses either (with kpool > 1) is invalid.
"""

import random

from mlagate.harness import check, give_up, scripts


def _scripts(g, vocab: int, T: int, widths, kpool: int) -> tuple[dict, list, dict]:
    """For each width S and rejected count k: the verify run, the run that never saw the
    rejected tokens, and the same verify rolled back through each cache's own trim."""
    rng = random.Random(g["seed"] * 1000 + T)
    runs, pairs, where = {}, [], {}
    for S in widths:
        for k in range(1, S):
            drafted = scripts.tokens(rng, vocab, S)
            fix = scripts.tokens(rng, vocab, 1, avoid=drafted[S - k])
            cont = [fix] + [scripts.tokens(rng, vocab, n) for n in g["continue"][1:]]
            cont_steps = [
                {
                    "tokens": toks,
                    "mark": f"continue {i}",
                    **({"keep": len(toks)} if len(toks) > 1 else {}),
                }
                for i, toks in enumerate(cont)
            ]
            name = f"S={S},k={k}"
            runs[f"verify/{name}"] = {
                "prompt": scripts.prompt(T, g["seed"]),
                "steps": [{"tokens": drafted, "keep": S - k, "mark": "rejected"}, *cont_steps],
            }
            runs[f"never/{name}"] = {
                "prompt": scripts.prompt(T, g["seed"]),
                "steps": [{"tokens": drafted[: S - k], "mark": "rejected"}, *cont_steps],
            }
            pairs.append((f"verify/{name}", f"never/{name}"))
            crosses = scripts.crosses_window(T, S, k, kpool)
            where[f"verify/{name}|never/{name}"] = (S, k, crosses, "")
    for tested, ref in list(pairs):  # the cache-level route: after the runtime's own
        trim = "trim/" + tested.split("/", 1)[1]
        runs[trim] = {**runs[tested], "rollback": "trim"}
        pairs.append((trim, ref))
        where[f"{trim}|{ref}"] = (*where[f"{tested}|{ref}"][:3], ",trim")
    return runs, pairs, where


def test_trim_after_rejection(mla):
    g = mla.gates
    key, _ = mla.build()
    kpool, topk = mla.kpool, mla.index_topk
    vocab = mla.profile.vocab_size
    problems, table, private, crossing = [], {}, [], {True: 0, False: 0}
    selected, refused, skipped = 0, [], None
    grid = [(mla.beyond_topk(o), g["widths"]) for o in g["beyond_topk"]]
    if kpool >= 4:  # before the first window completes: 1 + (kpool - 2) tokens, nothing pooled
        grid.append((1, [kpool - 2]))
    for T, widths in grid:
        runs, pairs, where = _scripts(g, vocab, T, widths, kpool)
        reply = mla.script(key, runs, pairs)
        mla.metric("rollback", reply["rollback"])
        for pair, cmp in reply["pairs"].items():
            S, k, crosses, via = where[pair]
            row = f"T={T},S={S},k={k}{via}"
            if "not_run" in cmp:  # the trim route: no need of it here, or a cache refused it
                if "already" in cmp["not_run"]:
                    skipped = cmp["not_run"]
                else:
                    refused.append(f"{row}: {cmp['not_run']}")
                continue
            crossing[crosses] += not via
            table[row] = {**scripts.summary(cmp), "crosses_window": crosses}
            selected += cmp["topk"]["compared"] - cmp["topk"]["dense"]
            private += [f"{row} {n}" for n in scripts.private_notes(cmp)]
            found = scripts.judge(
                cmp,
                scripts.budget(g["logits_ulps"], mla.case.backend),
                scripts.budget(g["state_ulps"], mla.case.backend),
            )
            if found:
                extra = {"rollback": "trim"} if via else {}
                mla.reproducer(seed=g["seed"], S=S, k=k, T=T, crosses_window=crosses, **extra)
                problems.append(
                    (
                        scripts.kind(cmp, "pool_mismatch"),
                        f"{row}{' (crosses a window)' if crosses else ''}: {found[0]}"
                        + (f" (+{len(found) - 1} more)" if len(found) > 1 else ""),
                    )
                )
    mla.metric("indexer", {"kpool": kpool, "index_topk": topk})
    mla.metric("cases", table)
    mla.metric(
        "rejections",
        {"crossing_a_window": crossing[True], "inside_the_open_window": crossing[False]},
    )
    judged = sum(r.endswith(",trim") for r in table)
    route = {"judged": judged, "refused": len(refused), "first_refusals": refused[:4]}
    mla.metric("trim_route", {**route, "not_needed": skipped})
    mla.metric("private_pool_notes", private[:8])
    summary = f"{len(problems)} of {len(table)} rejections differ from a run that never saw them; "
    if problems:
        problems[0] = (problems[0][0], summary + problems[0][1])
    if selected == 0:
        give_up("every selection fell back to dense: nothing about the pools was checked", problems)
    check(problems, shown=3)


ORDER = 80  # where the report lists it among the correctness suites
