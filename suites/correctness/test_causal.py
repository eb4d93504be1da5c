"""causal: the attention mask, checked through outputs, on short contexts as on long ones.

- Causality: one token j of a prompt (or of a wide step's new tokens) is changed; the logits at
  every position before j must not change (within gates.same_path_ulps, 0 = bitwise: both runs
  take the same path), nor the selections of a sparse indexer there. j runs across the prompt
  (both sides of the indexer's top-k and of pool-window boundaries) in a single prefill call
  from the empty cache and in chunked prefill (gates.chunk tokens a call), and across the new
  tokens of verify steps of width L (gates.widths) on caches of every length of gates.caches.
- Prefill against decode: the same tokens fed in one call and one at a time (L = 1 each) give
  the same logits at every position (within gates.logits_ulps: the paths and summation orders
  differ) and the same selections (exact): the prompt from the empty cache, and a step of the
  widest L on each cache of gates.caches.
- Short contexts: gates.caches are cache lengths in tokens past the indexer's top-k (the
  profile's cap where the module has none); negative ones lie below it (clamped at 0: the
  empty cache). While a query sees no more keys than the top-k, every key up to it must be
  selected: the sparse mask must equal the causal one.

Every check runs on the natural path and, where the module can be forced (the `if` around
self.embed_q / self.unembed_out), on both forced paths. A failure names the first position,
j, T, L and path that broke, and keeps a reproducer.
"""

import random

from mlagate.harness import check, give_up, scripts

PATHS = ("absorbed", "materialised")


def _prompt_js(n: int, topk: int, kpool: int) -> list[int]:
    """Changed positions across a prompt of n: its start, the first pool window's end, the
    top-k (every query before it sees all keys) and its end."""
    near = {1, topk, n - 1} | ({kpool} if kpool > 1 else set())
    return sorted(j for j in near if 0 < j < n)


def _changed(toks: list[int], j: int, vocab: int) -> list[int]:
    out = list(toks)
    out[j] = (out[j] + 1 + (j % (vocab - 1))) % vocab
    return out


def _chunks(toks: list[int], width: int) -> list[dict]:
    return [{"tokens": toks[i : i + width]} for i in range(0, len(toks), width)]


def _causal_runs(g, vocab: int, topk: int, kpool: int, force) -> tuple[dict, list, dict]:
    """Scripts of one path: prompt causality (one call; chunked on the natural path) and verify
    causality (every width on every verify cache; a forced path: the widest on each, and the
    narrowest on the longest), each changed script paired with its unchanged run; where: pair
    -> (mode, T, L, absolute j). A chunked script stops after the chunk that holds j (the
    earlier chunks were computed before j was fed)."""
    rng = random.Random(g["seed"])
    n = topk + g["prompt_past_topk"]
    prompt = scripts.tokens(rng, vocab, n)
    runs, pairs, where = {}, [], {}

    def add(name: str, T: int, steps: list[dict], ref: str, info: tuple) -> None:
        runs[name] = {"prompt": scripts.prompt(T, g["seed"]), "steps": steps, "force": force}
        if name != ref:
            pairs.append((name, ref))
            where[f"{name}|{ref}"] = info

    c = g["chunk"]
    for mode in ("prefill", "chunked") if force is None else ("prefill",):
        add(
            f"{mode}/ref",
            0,
            [{"tokens": prompt}] if mode == "prefill" else _chunks(prompt, c),
            f"{mode}/ref",
            (),
        )
        for j in _prompt_js(n, topk, kpool):
            toks = _changed(prompt, j, vocab)
            steps = (
                [{"tokens": toks}] if mode == "prefill" else _chunks(toks[: (j // c + 1) * c], c)
            )
            add(f"{mode}/j={j}", 0, steps, f"{mode}/ref", (mode, 0, n, j))
    verify = _lengths(g["verify_caches"], topk)
    grid: dict[tuple, set] = {
        (T, L): {L - 1}
        for T in verify
        for L in g["widths"]
        if force is None or L == max(g["widths"]) or (T == verify[-1] and L == min(g["widths"]))
    }
    if force is None:
        L = max(g["widths"])
        for T in _lengths(g["caches"], topk):
            grid.setdefault((T, L), set()).update({1, L // 2})
    for (T, L), js in grid.items():
        toks = scripts.tokens(rng, vocab, L)
        ref = f"verify/T={T},L={L}"
        add(ref, T, [{"tokens": toks}], ref, ())
        for j in sorted(js):
            add(
                f"{ref},j={j}",
                T,
                [{"tokens": _changed(toks, j, vocab)}],
                ref,
                ("verify", T, L, T + j),
            )
    return runs, pairs, where


def _decode_runs(g, vocab: int, topk: int, force) -> tuple[dict, list, dict]:
    """Prefill against decode, the widest step on each cache of gates.caches and the whole
    prompt from the empty cache on the natural path, the widest step on the longest verify
    cache on a forced one; where: pair -> (T, L)."""
    rng = random.Random(g["seed"] + 1)
    runs, pairs, where = {}, [], {}
    L = max(g["widths"])
    grid = [(T, L) for T in _lengths(g["verify_caches"], topk)[-1:]]
    if force is None:
        grid = [(0, topk + g["prompt_past_topk"])] + [(T, L) for T in _lengths(g["caches"], topk)]
    for T, L in grid:
        toks = scripts.tokens(rng, vocab, L)
        prompt = scripts.prompt(T, g["seed"])
        name = f"T={T},L={L}"
        runs[f"wide/{name}"] = {"prompt": prompt, "steps": [{"tokens": toks}], "force": force}
        runs[f"one/{name}"] = {
            "prompt": prompt,
            "steps": scripts.one_at_a_time(toks),
            "force": force,
        }
        pairs.append((f"wide/{name}", f"one/{name}"))
        where[f"wide/{name}|one/{name}"] = (T, L)
    return runs, pairs, where


def _lengths(offsets, topk: int) -> list[int]:
    return sorted({max(0, topk + o) for o in offsets})


def _causal_problem(
    cmp: dict, info: tuple, budget: float, path: str, chunk: int = 0
) -> tuple | None:
    """(kind, text, first position) of one changed run against its unchanged one."""
    mode, T, L, j = info
    width = f"L={L}" if mode == "verify" else f"n={L}" + (f" chunk={chunk}" if chunk else "")
    at = f"{mode} T={T} {width} j={j} path={path}"
    err = cmp["errors"]["tested"]
    if err:
        return "runtime_raised", f"{at}: the runtime raised: {err['error']} at {err['at']}", j
    lg = cmp.get("logits") or {"per_position": []}
    early = [r for r in lg["per_position"] if r["position"] < j and r["ulps"] != 0]
    bad = [r for r in early if not r["ulps"] <= budget]
    if bad:
        p = bad[0]
        return (
            "causality_broken",
            f"{at}: changing token {j} changed the logits at position {p['position']} by "
            f"{p['ulps']:.1f} ULP (budget {budget}; {len(bad)} earlier positions changed)",
            p["position"],
        )
    sel = [m for m in cmp["topk"]["mismatches"] if m["position"] < j]
    if sel:
        m = sel[0]
        return (
            "causality_broken",
            f"{at}: changing token {j} changed the selection of position {m['position']} "
            f"(indexer {m['indexer']}): {m['tested']} vs {m['reference']}",
            m["position"],
        )
    return None


def _decode_problem(cmp: dict, T: int, L: int, budget: float, path: str) -> tuple | None:
    at = f"prefill-vs-decode T={T} L={L} path={path}"
    err = cmp["errors"]["tested"]
    if err:
        return "runtime_raised", f"{at}: the runtime raised: {err['error']} at {err['at']}", T
    lg = cmp.get("logits") or {"per_position": []}
    bad = [r for r in lg["per_position"] if not r["ulps"] <= budget]
    if bad:
        p = bad[0]
        return (
            "prefill_decode_mismatch",
            f"{at}: the logits at position {p['position']} differ from decoding by "
            f"{p['ulps']:.1f} ULP (budget {budget}; {len(bad)} positions over it)",
            p["position"],
        )
    found = scripts.judge(cmp, budget, budget)
    if found:
        return "prefill_decode_mismatch", f"{at}: {found[0]}", scripts.first_position(cmp)
    return None


def _check_paths(reply: dict, force, problems: list) -> None:
    """A forced script whose steps the counters saw on another path measured nothing forced."""
    if force is None:
        return
    for name, log in reply["logs"].items():
        seen = {r.get("path") for r in log} - {force, None}
        if seen:
            give_up(f"forced {force} but the counters saw {sorted(seen)} in {name}", problems)


def _short_problems(reply: dict, topk: int, path: str) -> list[tuple]:
    out = []
    for name, s in sorted(reply.get("short_masks", {}).items()):
        out.append(
            (
                "sparse_mask_not_causal",
                f"{name} path={path}: position {s['position']} (below the top-k {topk}) does "
                f"not select keys {s['missing']} (indexer {s['indexer']})",
            )
        )
    return out[:1]


def _judge_causal(mla, reply, where, same, path) -> tuple[list, dict]:
    g, firsts = mla.gates, []
    for pair, cmp in reply["pairs"].items():
        if pair not in where:
            continue
        chunk = g["chunk"] if where[pair][0] == "chunked" else 0
        found = _causal_problem(cmp, where[pair], same, path, chunk)
        if found:
            firsts.append((where[pair][1], found[2], where[pair], found))
    out = []
    for _, _, (mode, T, L, j), found in sorted(firsts, key=lambda f: f[:2])[:1]:
        mla.reproducer(seed=g["seed"], check="causality", mode=mode, T=T, L=L, j=j, path=path)
        out.append(found[:2])
    return out, {"pairs": len(where), "broken": len(firsts)}


def _judge_decode(mla, reply, where, loose, path) -> tuple[list, dict]:
    g, firsts, worst = mla.gates, [], 0.0
    for pair, cmp in reply["pairs"].items():
        if pair not in where:
            continue
        T, L = where[pair]
        worst = max(worst, (cmp.get("logits") or {}).get("max_ulps", 0.0))
        found = _decode_problem(cmp, T, L, loose, path)
        if found:
            firsts.append((T, found[2] or 0, (T, L), found))
    out = []
    for _, _, (T, L), found in sorted(firsts, key=lambda f: f[:2])[:1]:
        mla.reproducer(seed=g["seed"], check="prefill_decode", T=T, L=L, path=path)
        out.append(found[:2])
    return out, {"pairs": len(where), "broken": len(firsts), "max_ulps": round(worst, 2)}


def test_causal(mla):
    g = mla.gates
    key, info = mla.build(forced=True)
    kpool, topk = mla.kpool, mla.beyond_topk(0)
    vocab, backend = mla.profile.vocab_size, mla.case.backend
    same = scripts.budget(g["same_path_ulps"], backend)
    loose = scripts.budget(g["logits_ulps"], backend)
    problems, table = [], {}
    for force in [None, *PATHS] if info["guards"] else [None]:
        path = force or "natural"
        c_runs, c_pairs, c_where = _causal_runs(g, vocab, topk, kpool, force)
        d_runs, d_pairs, d_where = _decode_runs(g, vocab, topk, force)
        reply = mla.script(key, {**c_runs, **d_runs}, c_pairs + d_pairs, causal_below=topk)
        _check_paths(reply, force, problems)
        problems += _short_problems(reply, topk, path)
        found, table[f"causality/{path}"] = _judge_causal(mla, reply, c_where, same, path)
        problems += found
        found, table[f"prefill_decode/{path}"] = _judge_decode(mla, reply, d_where, loose, path)
        problems += found
    mla.metric("cases", table)
    mla.metric(
        "shape",
        {
            "index_topk": topk,
            "kpool": kpool,
            "caches": _lengths(g["caches"], topk),
            "verify_caches": _lengths(g["verify_caches"], topk),
            "paths": len(table) // 2,
        },
    )
    check(problems)
