"""Speculative rejection per row in a batch: rows of one verify step rejecting different counts
of its tokens (a batch cache's own `trim(n)` takes one n for all rows). One property, two routes,
each the runtime's own (a step's "route"):
- "transaction": the runtime's speculative cache transaction (mlx-vlm 0.7.10
  `speculative.cache_state.start_speculative_cache`), opened before the step and committed after
  it with each row's kept count, as its batched speculative decoding commits. A runtime without
  one (mlx-lm), or a cache without trim (a linear-attention state, which the transaction rolls
  back only from records the model's layers keep), cannot take this route: the tokens stay on
  both sides and the reply says so.
- "extract": the runtime's row functions: each row's caches taken out of the batch (its batch
  caches' `extract(i)`, what mlx-lm's BatchGenerator `extract_cache` calls), trimmed by that
  row's count (`drop`), and the rows merged back into a batch (mlx-lm's
  `generate._merge_caches`, else each row cache's own `merge`, as mlx-vlm's batch extension
  does). A cache that cannot be taken apart or trimmed stops the batch there, and the reply
  says so.
A row run alone takes the same route: the transaction on its own cache, or `drop`.

`RowRejectionOps` is mixed into the worker with ServingOps. Imports only the stdlib at module
level; MLX and the runtime arrive through the worker.
"""

from __future__ import annotations

from mlagate.worker.rollback import drop_tokens, has_transaction, refusing

__all__ = ["RowRejectionOps", "refusing"]


class RowRejectionOps:
    """Per-row rejection by its two routes (mixed into the worker)."""

    def drop(self, entry: dict, cache: list, n: int) -> None:
        """Drop the last n tokens of one cache list through the runtime's trim_prompt_cache, else
        each cache's trim (rollback.drop_tokens; the uniform rejection's and the extract
        route's)."""
        drop_tokens(self._cache_module(entry), cache, n)

    def open_rejection(self, entry: dict, cache, step: dict, side):
        """Before a step of the transaction route: the runtime's speculative cache transaction
        over the step's width; None for any other step, or where the route is not expressible
        (recorded in side.per_row)."""
        if step.get("route") != "transaction":
            return None
        cs = self._serving_runtime(entry, "speculative.cache_state")
        if not has_transaction(cs):
            side.per_row["transaction"] = "the runtime has no speculative cache transaction"
            return None
        stateful = refusing(cache, ("trim",), trimmable=False)
        if stateful:
            side.per_row["transaction"] = (
                f"{', '.join(stateful)} has no trim (a state, not a token cache)"
            )
            return None
        return cs.start_speculative_cache(cache, len(step["tokens"][0]))

    def reject_rows(self, entry: dict, cache: list, step: dict, rows: list, txn, side, batched):
        """After a per-row step: row rows[i] (batch position i) drops its step["trim"] count by
        the step's route. The cache list to go on with (the extract route builds a new one), or
        None where the batch cannot go on (side.per_row says why)."""
        counts = [step["trim"][r] for r in rows]
        if step["route"] == "transaction":
            if txn is not None:
                txn.commit([len(step["tokens"][0]) - n for n in counts])
            return cache
        if not batched:
            if counts[0]:
                self._trim(entry, cache, counts[0], side)
            return cache
        refused = refusing(cache, ("extract", "trim"), trimmable=True)
        if refused:
            side.per_row["extract"] = (
                f"{', '.join(refused)} cannot be taken out of the batch and trimmed (the batch "
                "stops there)"
            )
            return None
        split = [[c.extract(i) for c in cache] for i in range(len(rows))]
        for row, n in zip(split, counts, strict=True):
            if n:
                self.drop(entry, row, n)
        gen = self._serving_runtime(entry, "generate")
        if gen is not None and hasattr(gen, "_merge_caches"):
            return gen._merge_caches(split)
        return [type(split[0][i]).merge([r[i] for r in split]) for i in range(len(cache))]
