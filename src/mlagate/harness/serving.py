"""The serving suites' side of the harness: the rows and steps a serving case feeds, the worker
op that runs them (mlagate.worker.serving), and how a reply is judged.

A reply holds, per row and step, the error in ULPs of the dtype at max |logits| of the tested
side (batched, quantized or reused) against the same tokens run as one plain sequence, and the
path the counters saw on each side. An error within the same-path budget passes; where the two
sides took different paths (a batch decides once for all its rows, on its padded length) the
cross-path budget applies.
"""

from __future__ import annotations

import random

from mlagate.harness import give_up, scripts

PATHS = ("absorbed", "materialised")


def rows_and_steps(g, vocab: int, seed: int) -> tuple[list[list[int]], list[dict]]:
    """Prompts of the lengths gates.rows (ragged; the longest unpadded) and the steps fed after
    them: one step of each width of gates.widths (every row gets its own tokens), then, when
    gates.rejected, a step of the widest width of which the last `rejected` tokens are trimmed
    back, and a decode; then the per-row rejection by its routes (per_row_rejection): when
    gates.rejected_rows_transaction, through the runtime's speculative cache transaction; then,
    when gates.leave, those rows leave the batch (_leave_steps); then, when
    gates.rejected_rows_extract, through the runtime's row functions, over the rows kept."""
    rng = random.Random(seed)
    rows = [scripts.tokens(rng, vocab, n) for n in g["rows"]]
    steps = [
        {"tokens": [scripts.tokens(rng, vocab, w) for _ in rows], "width": w} for w in g["widths"]
    ]
    if g.get("rejected"):
        w = max(g["widths"])
        steps.append(
            {
                "tokens": [scripts.tokens(rng, vocab, w) for _ in rows],
                "width": w,
                "trim": g["rejected"],
            }
        )
        steps.append({"tokens": [scripts.tokens(rng, vocab, 1) for _ in rows], "width": 1})
    everyone = list(range(len(rows)))
    if g.get("rejected_rows_transaction"):
        steps += per_row_rejection(g, rng, rows, vocab, "transaction", everyone)
    if g.get("leave"):
        steps += _leave_steps(g, rng, vocab, rows)
    if g.get("rejected_rows_extract"):
        kept = [r for r in everyone if r not in g.get("leave", ())]
        steps += per_row_rejection(g, rng, rows, vocab, "extract", kept)
    return rows, steps


def _leave_steps(g, rng, vocab: int, rows) -> list[dict]:
    """The rows gates.leave finish: they leave the batch through the runtime's filter, and the
    rows kept get a decode and a verify step of the widest width."""
    keep = [r for r in range(len(rows)) if r not in g["leave"]]
    return [
        {"tokens": [scripts.tokens(rng, vocab, w) for _ in rows], "width": w, **extra}
        for w, extra in ((1, {"keep": keep}), (max(g["widths"]), {}))
    ]


def per_row_rejection(g, rng, rows, vocab: int, route: str, batch: list[int]) -> list[dict]:
    """A verify step of the widest width w whose rows reject different counts of its tokens, and a
    decode. The rows of `batch` (those in the batch then) reject gates.rejected_rows_<route>
    cycled over them, each at most w - 1 (a verify step keeps at least its first token). The
    step's "route" says how the rows drop them (mlagate.worker.rowrejection): "transaction",
    the runtime's speculative cache transaction committed with each row's count; "extract", the
    runtime's row functions (each row's caches extracted, trimmed and merged back)."""
    w, counts = max(g["widths"]), g[f"rejected_rows_{route}"]
    trim = [0] * len(rows)
    for i, r in enumerate(batch):
        trim[r] = min(counts[i % len(counts)], w - 1)
    return [
        {
            "tokens": [scripts.tokens(rng, vocab, w) for _ in rows],
            "width": w,
            "trim": trim,
            "route": route,
        },
        {"tokens": [scripts.tokens(rng, vocab, 1) for _ in rows], "width": 1},
    ]


def rejection_of(step: dict) -> str | None:
    """The rejection a step asks for: "uniform" (every row trims the same count), its per-row
    route ("transaction", "extract"), or None."""
    if "route" in step:
        return step["route"]
    return "uniform" if step.get("trim") else None


def by_rejection(reply: dict, steps) -> dict[str | None, dict]:
    """A serve reply split by configuration: None (the batch's rows and steps) and each
    rejection its steps ask for (the rejecting step and the step after it), each a reply of
    its own rows; what the runtime said it could not express goes with its rejection, the
    runtime's exception with the configuration of the step it raised in (the first (row, step)
    the tested side does not hold)."""
    group = {0: None}
    for s, step in enumerate(steps, start=1):
        name = rejection_of(step)
        group[s] = name if name else group.get(s, None)
        if name and s + 1 <= len(steps):
            group[s + 1] = name
    names = list(dict.fromkeys(group.values()))
    parts = {
        n: {**reply, "rows": [r for r in reply["rows"] if group[r["step"]] == n]} for n in names
    }
    raised_at = max((r["step"] for r in reply["rows"]), default=-1) + 1
    errors, last = reply["errors"], {group[s]: s for s in range(len(steps) + 1)}
    for n, part in parts.items():
        whole = last[n] < raised_at  # every step of it ran before the runtime raised
        part["errors"] = {"tested": None, "reference": None} if whole else errors
        routes = reply.get("per_row_rejection") or {}
        part["per_row_rejection"] = {k: v for k, v in routes.items() if k == n}
        part["untrimmable"] = reply.get("untrimmable") if n == "uniform" else []
    return parts


def forces(info: dict) -> list[str | None]:
    """The natural path, and both forced paths where the module can be forced."""
    return [None, *PATHS] if info["guards"] else [None]


def serve(mla, key: str, rows, steps, force, **req) -> dict:
    """The worker's `serve` op on the case's arm."""
    return mla.call(
        "serve",
        key=key,
        rows=rows,
        steps=[{k: v for k, v in s.items() if k != "width"} for s in steps],
        force=force,
        dtype=mla.case.dtype,
        **req,
    )


def judge(
    reply: dict, label: str, same: float, cross: float, kind: str, steps, expressible=False
) -> tuple:
    """(problems, table row) of one reply: the tested side raised (runtime_raised), the
    reference raised (runtime_raised: it runs the same runtime), a row and step over its
    budget (`kind`), or, with `expressible`, a rejection the runtime could not take
    (not_expressible). The table row: worst ULPs, rows and steps compared, how many took another
    path than their plain run, and the cache classes each side used."""
    problems = []
    for side in ("tested", "reference"):
        err = reply["errors"][side]
        if err:
            what = "" if side == "tested" else " (the plain run of the same rows)"
            problems.append(
                (
                    "runtime_raised",
                    f"{label}: the runtime raised{what}: {err['error']} at {err['at']}",
                )
            )
    worst, other, over = 0.0, 0, set()
    for r in reply["rows"]:
        differ = r["tested_path"] != r["reference_path"]
        other += differ
        limit = cross if differ else same
        worst = max(worst, r["ulps"])
        if not r["ulps"] <= limit:
            over.add(r["row"])
            w = _where(r["step"], steps)
            problems.append(
                (
                    kind,
                    f"{label}: row {r['row']} {w}: {r['ulps']:.1f} ULP from its plain run "
                    f"(budget {limit}; paths {r['tested_path']} vs {r['reference_path']}; "
                    f"first column {r['first']})",
                )
            )
    table = {
        "max_ulps": round(worst, 3),
        "compared": len(reply["rows"]),
        "other_path": other,
        "rows_over": sorted(over),
        "classes": reply["classes"],
        "batching": reply.get("batching"),
    }
    if reply.get("per_row_rejection"):
        table["per_row_rejection"] = reply["per_row_rejection"]
    if reply.get("untrimmable"):
        table["rejection"] = (
            f"not expressible: {', '.join(reply['untrimmable'])} cannot be trimmed (the "
            "rejected tokens stay on both sides)"
        )
    if expressible:
        problems += not_expressible(table, label)
    return problems, table


def not_expressible(table: dict, label: str) -> list[tuple[str, str]]:
    """A rejection the steps ask for that the runtime cannot take (its tokens stay on both
    sides, or the batch stops there): a fail of kind not_expressible, one a route, never a
    pass; the steps it does not hide are still judged."""
    found = [
        ("not_expressible", f"{label}: per-row rejection, the {route} route: {why}")
        for route, why in table.get("per_row_rejection", {}).items()
    ]
    if "rejection" in table:
        found.append(("not_expressible", f"{label}: the uniform rejection: {table['rejection']}"))
    return found


def _where(step: int, steps) -> str:
    return "prefill" if step == 0 else f"step {step} (L={steps[step - 1]['width']})"


def check_paths(rows, label: str, cache: str, problems: list) -> None:
    """wrong_path when a row's step took another path on the `cache` side than on its plain run
    (the first such, and how many)."""
    wrong = [r for r in rows if r["tested_path"] != r["reference_path"]]
    if wrong:
        w = wrong[0]
        problems.append(
            (
                "wrong_path",
                f"{label}: row {w['row']} step {w['step']} took {w['tested_path']} "
                f"{cache}, {w['reference_path']} plain ({len(wrong)} such)",
            )
        )


def check_forced(reply: dict, force, label: str, problems: list) -> None:
    """A forced run whose counters saw another path measured nothing forced: invalid."""
    if force is None:
        return
    seen = {r[k] for r in reply["rows"] for k in ("tested_path", "reference_path")}
    seen -= {force, None}
    if seen:
        give_up(f"{label}: forced {force} but the counters saw {sorted(seen)}", problems)
