"""Token scripts for the pool and speculative suites (parent side): building them, judging the
worker's comparison of two scripts (mlagate.worker.rollback) against the suite's budgets.

A script is {"prompt": {"T", "seed"}, "steps": [{"tokens": [...], "keep": j, "mark": label}]};
a step with `keep` is a verify step whose tokens past the first j are rejected through the
runtime's own rollback API.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from mlagate.contract.suites import crosses_window  # noqa: F401 (the suites' contracts' plan rules use it too)


def prompt(T: int, seed: int) -> dict:
    return {"T": T, "seed": seed}


def tokens(rng: random.Random, vocab: int, n: int, avoid: int | None = None) -> list[int]:
    """n random token ids; the first differs from `avoid` (a correction never repeats the rejected
    draft)."""
    out = [rng.randrange(vocab) for _ in range(n)]
    while out and avoid is not None and out[0] == avoid:
        out[0] = rng.randrange(vocab)
    return out


def one_at_a_time(toks: list[int], mark: str | None = None) -> list[dict]:
    steps = [{"tokens": [t]} for t in toks]
    if steps and mark:
        steps[-1]["mark"] = mark
    return steps


def budget(value, backend: str) -> float:
    """A budget in ULPs: one number for every backend, or {backend: number}."""
    if isinstance(value, Mapping):
        if backend not in value:
            raise KeyError(f"no budget for backend {backend!r} (has {', '.join(value)})")
        return value[backend]
    return value


def judge(
    cmp: dict, logits_ulps: float, state_ulps: float, margin_check: bool = False
) -> list[str]:
    """Problems of one comparison: positions, selections and cache lengths exact; logits and
    state arrays within their ULP budgets; argmax (when asked) wherever the margin is clear."""
    problems = []
    err = cmp["errors"]["tested"]
    if err:
        problems.append(
            f"the runtime raised at step {err['step']} (S={err['S']}, {err['length']} tokens "
            f"cached before it): {err['error']} at {err['at']}"
        )
    pos = cmp["positions"]
    if pos["only_tested"] or pos["only_reference"]:
        problems.append(
            f"positions differ: only tested {pos['only_tested']}, only reference "
            f"{pos['only_reference']}"
        )
    tk = cmp["topk"]
    if tk["mismatch_count"]:
        m = tk["mismatches"][0]
        problems.append(
            f"selected indices differ at {tk['mismatch_count']} of {tk['compared']} (indexer, "
            f"position) pairs; first at position {m['position']} (indexer {m['indexer']}): "
            f"{_short(m['tested'])} vs {_short(m['reference'])}"
        )
    for label, mk in cmp["marks"].items():
        for p in mk["problems"]:
            problems.append(f"after {label}: {p}")
        for where, ulps in mk["max_ulps"].items():
            if ulps > state_ulps and "private:" not in where:
                problems.append(
                    f"after {label}: {where} off by {ulps:.1f} ULP (budget {state_ulps})"
                )
    lg = cmp.get("logits")
    if lg and lg["max_ulps"] > logits_ulps:
        problems.append(
            f"logits off by {lg['max_ulps']:.1f} ULP at position {lg['worst_position']} (budget "
            f"{logits_ulps})"
        )
    if margin_check and cmp["argmax_disagreements"]:
        a = cmp["argmax_disagreements"][0]
        problems.append(
            f"greedy argmax differs at position {a['position']}: {a['tested']} vs "
            f"{a['reference']} with a top-two margin of {a['margin_ulps']:.0f} ULP"
        )
    return problems


def first_position(cmp: dict) -> int | None:
    """The first absolute position where the tested script went wrong (raised, selected, or
    drifted)."""
    err = cmp["errors"]["tested"]
    if err:
        return err["length"]
    if cmp["topk"]["mismatches"]:
        return cmp["topk"]["mismatches"][0]["position"]
    lg = cmp.get("logits")
    return lg["worst_position"] if lg else None


def kind(cmp: dict, otherwise: str) -> str:
    """The failure kind of a judged comparison: runtime_raised where the tested script raised,
    else the suite's own kind."""
    return "runtime_raised" if cmp["errors"]["tested"] else otherwise


def reference_error(reply: dict) -> str | None:
    """A reference script that raised (it runs the same runtime: a failure, as the tested one's)."""
    for name, cmp in reply["pairs"].items():
        if "not_run" in cmp:  # a "trim" route script the runtime refused or has no need of
            continue
        err = cmp["errors"]["reference"]
        if err:
            return (
                f"the runtime raised in reference script {name.split('|')[1]} at step "
                f"{err['step']}: {err['error']} at {err['at']}"
            )
    return None


def private_notes(cmp: dict) -> list[str]:
    return [f"{label}: {p}" for label, mk in cmp["marks"].items() for p in mk["private"]]


def summary(cmp: dict) -> dict:
    """The small part of a comparison kept in the result as evidence."""
    lg = cmp.get("logits") or {}
    states = {
        w: round(u, 2)
        for mk in cmp["marks"].values()
        for w, u in mk["max_ulps"].items()
        if "private:" not in w
    }
    private = {
        w: round(u, 2)
        for mk in cmp["marks"].values()
        for w, u in mk["max_ulps"].items()
        if "private:" in w
    }
    return {
        "positions": cmp["positions"]["reference"],
        "logits_max_ulps": round(lg.get("max_ulps", 0.0), 2),
        "topk_compared": cmp["topk"]["compared"],
        "topk_dense": cmp["topk"]["dense"],
        "topk_mismatches": cmp["topk"]["mismatch_count"],
        "state_max_ulps": max(states.values(), default=0.0),
        **({"private_pool_max_ulps": max(private.values())} if private else {}),
        "error": (cmp["errors"]["tested"] or {}).get("error"),
        "argmax_disagreements": len(cmp["argmax_disagreements"]),
    }


def _short(row) -> str:
    if not isinstance(row, list):
        return str(row)
    return str(row) if len(row) <= 12 else f"[{', '.join(map(str, row[:12]))}, ...]"
