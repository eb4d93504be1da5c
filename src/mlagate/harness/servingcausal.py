"""Causality on a served configuration (the causal checks of serving_quantized and
serving_rotating): the variants the worker op `serve_pairs` (mlagate.worker.servingpairs) runs,
and how its reply is judged.

The rows are prefilled and fed the steps before the widest one, accepted whole; then the widest
step (L tokens a row) in three forms: as drawn (the base), with one token j changed in every row
(j = 1, L // 2, L - 1), and one token at a time (L steps of width 1). On the same configuration
(the same caches, quantization, batching and path):
- causality: no position before the changed token moves (within the causal budget; 0: bitwise,
  both runs take one path on the same shapes);
- prefill against decode: the wide step's logits equal the one-at-a-time run's within the decode
  budget (the paths and summation orders differ).
"""

from __future__ import annotations

from mlagate.harness import give_up
from mlagate.harness.scripts import budget


def _changed(toks: list[int], j: int, vocab: int) -> list[int]:
    out = list(toks)
    out[j] = (out[j] + 1 + (j % (vocab - 1))) % vocab
    return out


def variants(rows, steps, vocab: int) -> tuple[dict, list, dict]:
    """(variants, pairs, where): where maps a causal pair to the step's start per row and j."""
    plain = [s for s in steps if not s.get("trim")]
    k = max(range(len(plain)), key=lambda i: (plain[i]["width"], -i))
    head = [{"tokens": s["tokens"]} for s in plain[:k]]
    wide, L = plain[k]["tokens"], plain[k]["width"]
    starts = [len(r) + sum(len(s["tokens"][i]) for s in head) for i, r in enumerate(rows)]
    out = {"wide": {"rows": rows, "steps": [*head, {"tokens": wide}]}}
    out["decode"] = {
        "rows": rows,
        "steps": [*head, *({"tokens": [[t[i]] for t in wide]} for i in range(L))],
    }
    pairs, where = [("wide", "decode")], {"wide|decode": {"starts": starts, "L": L}}
    for j in sorted(j for j in {1, L // 2, L - 1} if 0 < j < L):
        name = f"j={j}"
        out[name] = {
            "rows": rows,
            "steps": [*head, {"tokens": [_changed(t, j, vocab) for t in wide]}],
        }
        pairs.append((name, "wide"))
        where[f"{name}|wide"] = {"starts": starts, "L": L, "j": j}
    return out, pairs, where


def check(mla, key: str, rows, steps, force, label: str, into: dict, **req) -> list:
    """The causal check of one configuration (req: batched, quant, max_kv_size), its table row
    put in `into` under `label`; the gates causal_ulps and decode_ulps."""
    g, backend = mla.gates, mla.case.backend
    runs, pairs, where = variants(rows, steps, mla.profile.vocab_size)
    reply = mla.call(
        "serve_pairs",
        key=key,
        variants=runs,
        pairs=pairs,
        force=force,
        dtype=mla.case.dtype,
        **req,
    )
    if "not_servable" in reply:
        return [("not_servable", f"{label} causal: {reply['not_servable']}")]
    same, loose = budget(g["causal_ulps"], backend), budget(g["decode_ulps"], backend)
    found, into[label] = judge(reply, where, label, same, loose, force)
    into[label]["classes"] = reply["classes"]
    return found


def judge(reply: dict, where: dict, label: str, same: float, loose: float, force) -> tuple:
    """(problems, table row) of one `serve_pairs` reply."""
    problems, broken, worst = [], 0, 0.0
    for pair, cmp in reply["pairs"].items():
        w = where[pair]
        for side in ("tested", "reference"):
            err = cmp["errors"][side]
            if err:
                text = f"{label} causal: the runtime raised: {err['error']} at {err['at']}"
                problems.append(("runtime_raised", text))
        if force is not None:
            seen = set(cmp["paths"]["tested"]) | set(cmp["paths"]["reference"])
            if seen - {force}:
                give_up(f"{label}: forced {force} but the counters saw {sorted(seen)}", problems)
        for r in cmp["rows"]:
            row = r["row"]
            found = _causal(r, w, row, same) if "j" in w else _decode(r, w, row, loose)
            if "j" not in w:
                worst = max([worst, *r["ulps"]])
            if found:
                broken += 1
                problems.append((found[0], f"{label}: {found[1]}"))
    table = {"pairs": len(reply["pairs"]), "broken": broken, "decode_max_ulps": round(worst, 3)}
    return problems, table


def _causal(r: dict, w: dict, row: int, budget: float) -> tuple | None:
    at = w["starts"][row] + w["j"]
    early = [(p, e) for p, e in zip(r["positions"], r["ulps"], strict=True) if p < at]
    bad = [(p, e) for p, e in early if not e <= budget]
    if not bad:
        return None
    p, e = bad[0]
    return (
        "causality_broken",
        f"row {row}: changing token {w['j']} of the verify step of L={w['L']} (position {at}) "
        f"changed the logits at position {p} by {e:.1f} ULP (budget {budget}; {len(bad)} "
        "earlier positions changed)",
    )


def _decode(r: dict, w: dict, row: int, budget: float) -> tuple | None:
    bad = [(p, e) for p, e in zip(r["positions"], r["ulps"], strict=True) if not e <= budget]
    if not bad:
        return None
    p, e = bad[0]
    return (
        "prefill_decode_mismatch",
        f"row {row}: the verify step of L={w['L']} differs at position {p} from the same tokens "
        f"decoded one at a time by {e:.1f} ULP (budget {budget}; {len(bad)} positions over it)",
    )
