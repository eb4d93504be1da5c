"""serving_batched: rows served together through the runtime's own batch caches equal each row
served alone.

B = len(gates.rows) prompts of ragged lengths (the longest unpadded, the others left-padded as
the runtime pads them) are prefilled in one call through the runtime's batching code
(mlagate.worker.serving: mlx-vlm's `_make_cache` with the padding mask passed as
`attention_mask`, mlx-lm's `_merge_caches` with prepare/finalize), then fed one step of each
width of gates.widths (decode and verify steps on warm caches), a verify step whose last
gates.rejected tokens are trimmed back through the runtime's trim, and a decode; then the
per-row rejection (rows of one verify step rejecting different counts) by its two routes
(mlagate.worker.rowrejection), each followed by a decode: gates.rejected_rows_transaction
through the runtime's speculative cache transaction (a runtime without one says so), then the
rows of gates.leave leave the batch through the runtime's filter (their requests finished) and
the others get a decode and a verify step (a pool cache must keep each row's pools), then
gates.rejected_rows_extract over the rows kept, through the runtime's row functions (each
row's caches extracted, trimmed and merged back; a batch whose caches cannot be trimmed stops
there and says so); and, on the natural path, a batch of gates.cold_rows whose rows leave
before any holds a pool. Each row's
logits at every step equal the same tokens run as one sequence through the runtime's plain
cache (make_prompt_cache): within gates.same_path_ulps (0: bitwise) where both took the same
path, within gates.cross_path_ulps where the batch, which decides once for all its rows on its
padded length, took another path than the row alone.

It runs on the natural path and, where the module can be forced, on both forced paths (both
sides forced alike). The cache classes each side used are kept as evidence. Each configuration
is judged on its own (mlagate.harness.configurations): per path, the batch's rows and steps
(`path=P`), and each rejection it asks for (`path=P/rejection=uniform`, `=transaction`,
`=extract`: the rejecting step and the decode after it), and the cold batch (`cold`); a
rejection the runtime cannot express is listed against its finding (matrix.yaml's
`unservable`), the others must be equal.
"""

from mlagate.harness import check
from mlagate.harness import serving as sv
from mlagate.harness.configurations import Configurations
from mlagate.harness.scripts import budget


def test_serving_batched(mla):
    g = mla.gates
    key, info = mla.build(forced=True)
    backend = mla.case.backend
    same = budget(g["sparse_same_path_ulps" if mla.module.sparse else "same_path_ulps"], backend)
    cross = budget(g["cross_path_ulps"], backend)
    rows, steps = sv.rows_and_steps(g, mla.profile.vocab_size, g["seed"])
    configs, table, servable = Configurations(mla), {}, True
    for force in sv.forces(info):
        label = f"path={force or 'natural'}"
        reply = sv.serve(mla, key, rows, steps, force, batched=True)
        if "not_servable" in reply:
            configs.judge(label, [("not_servable", f"{label}: {reply['not_servable']}")])
            servable = False
            continue
        for name, part in sv.by_rejection(reply, steps).items():
            where = label if name is None else f"{label}/rejection={name}"
            found, table[where] = sv.judge(
                part, where, same, cross, "batch_row_mismatch", steps, expressible=True
            )
            sv.check_forced(part, force, where, found)
            configs.judge(where, found)
    if g.get("cold_rows") and servable:
        configs.judge("cold", _cold(mla, key, table, same, cross))
    mla.metric("cases", table)
    mla.metric("shape", {"rows": list(g["rows"]), "widths": list(g["widths"])})
    configs.record(mla)
    check(configs.problems)


def _cold(mla, key, table, same, cross) -> list:
    """gates.cold_rows: a batch whose rows all stay shorter than a pool window until the rows of
    gates.leave have left (its pool caches hold no pool yet when they are filtered), natural
    path: a decode, the rows leave, two decodes."""
    g = {**mla.gates, "rows": mla.gates["cold_rows"], "widths": [1], "rejected": 0}
    g |= {"rejected_rows_transaction": [], "rejected_rows_extract": []}
    rows, steps = sv.rows_and_steps(g, mla.profile.vocab_size, g["seed"])
    reply = sv.serve(mla, key, rows, steps, None, batched=True)
    found, table["cold"] = sv.judge(reply, "cold", same, cross, "batch_row_mismatch", steps)
    return found
