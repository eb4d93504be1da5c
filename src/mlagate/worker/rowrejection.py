"""Speculative rejection per row in a batch, through the runtime's own row functions: each row's
caches taken out of the batch (its batch caches' `extract(i)`, what mlx-lm's BatchGenerator
`extract_cache` calls), trimmed by that row's rejected count (`trim_prompt_cache`, else each
cache's `trim`), and the rows merged back into a batch (mlx-lm's `generate._merge_caches`, else
each row cache's own `merge`, as mlx-vlm's batch extension does). A batch cache's own `trim(n)`
takes one n for all rows.

`RowRejectionOps` is mixed into the worker with ServingOps. Imports only the stdlib at module
level; MLX and the runtime arrive through the worker.
"""

from __future__ import annotations

from mlagate.worker.rollback import leaves


class RowRejectionOps:
    """Per-row trims of a batch (mixed into the worker)."""

    def _trim_rows(self, entry: dict, cache: list, trims: list[int], side) -> list | None:
        """The batch `cache` with row i's last trims[i] tokens dropped: a new cache list. None
        where a cache cannot be taken apart or trimmed (recorded in side.untrimmable: the
        rejection is not expressible there, and the batch stops)."""
        refused = sorted(
            {
                type(c).__name__
                for c in leaves(cache)
                if not hasattr(c, "extract")
                or not hasattr(c, "trim")
                or (hasattr(c, "is_trimmable") and not c.is_trimmable())
            }
        )
        if refused:
            side.untrimmable = refused
            return None
        rows = [[c.extract(i) for c in cache] for i in range(len(trims))]
        cm = self._cache_module(entry)
        for row, n in zip(rows, trims, strict=True):
            if not n:
                continue
            if hasattr(cm, "trim_prompt_cache"):
                cm.trim_prompt_cache(row, n)
            else:
                for c in row:
                    c.trim(n)
        gen = self._serving_runtime(entry, "generate")
        if gen is not None and hasattr(gen, "_merge_caches"):
            return gen._merge_caches(rows)
        return [type(rows[0][i]).merge([r[i] for r in rows]) for i in range(len(cache))]


def row_trim(trim, row: int) -> int:
    """A step's trim for one row: the same n for every row, or row's own of a per-row list."""
    return trim[row] if isinstance(trim, list) else trim
