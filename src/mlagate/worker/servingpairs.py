"""Variants of one serving configuration compared position by position inside the worker: the
quantized causality check of serving_quantized (a token changed in a step against the unchanged
run; a wide step against the same tokens decoded one at a time), each variant run through
mlagate.worker.serving's own runs (the runtime's caches, batching and quantization entry points).

`ServingPairsOps` is mixed into the worker; its op is `serve_pairs`. Only small evidence crosses
the pipe: per pair and row, the ULPs at each absolute position, the paths and the cache classes.
Imports only the stdlib at module level; MLX and the runtime arrive through the worker.
"""

from __future__ import annotations

import inspect

from mlagate.worker.rollback import leaves
from mlagate.worker.serving import NotServable
from mlagate.worker.ulps import BITS, ulp


class ServingPairsOps:
    """Worker op `serve_pairs` (mixed into the worker with ServingOps)."""

    def op_serve_pairs(self, req: dict) -> dict:
        """`variants` ({name: {"rows": [...], "steps": [...]}}, no trims) each run `batched` or
        row by row, with `quant` or not, under `force`; each (tested, reference) pair of `pairs`
        compared per row at every absolute position both hold (prompt positions first, then
        each step's, in order)."""
        entry = self.models[req["key"]]
        if req.get("force") is not None and entry["forcing"] is None:
            raise RuntimeError("forcing asked of a model built without forced guards")
        sides = {}
        try:
            for name, v in req["variants"].items():
                run = {**req, "rows": v["rows"], "steps": v["steps"]}
                sides[name] = self._side(entry, run, req.get("batched", False), req.get("quant"))
        except NotServable as exc:
            return {"not_servable": str(exc)}
        bits = BITS[req.get("dtype", "float32")]
        pairs = {}
        for tested, ref in req["pairs"]:
            t = _by_position(self.mx, sides[tested], req["variants"][tested])
            r = _by_position(self.mx, sides[ref], req["variants"][ref])
            pairs[f"{tested}|{ref}"] = {
                "rows": [
                    {"row": i, **_compare_row(self.mx, t.get(i, {}), r[i], bits)} for i in sorted(r)
                ],
                "errors": {"tested": sides[tested].error, "reference": sides[ref].error},
                "paths": {
                    "tested": sorted({p for p in sides[tested].paths.values() if p}),
                    "reference": sorted({p for p in sides[ref].paths.values() if p}),
                },
            }
        classes = sorted({c for s in sides.values() for c in s.classes})
        return {"pairs": pairs, "classes": classes}

    def _prompt_cache(self, entry: dict, req: dict):
        """The runtime's make_prompt_cache for one row; with req["max_kv_size"], its rotating
        form (`make_prompt_cache(model, max_kv_size=...)`, as `--max-kv-size` serves), and
        NotServable where the module's own make_cache ignores it (no rotating cache comes back)."""
        cm, size = self._cache_module(entry), req.get("max_kv_size")
        if size is None:
            return cm.make_prompt_cache(entry["model"])
        if "max_kv_size" not in inspect.signature(cm.make_prompt_cache).parameters:
            raise NotServable("the runtime's make_prompt_cache takes no max_kv_size")
        cache = cm.make_prompt_cache(entry["model"], max_kv_size=size)
        got = sorted({type(c).__name__ for c in leaves(cache)})
        if not any("Rotating" in c for c in got):
            raise NotServable(
                f"make_prompt_cache(model, max_kv_size={size}) gave {', '.join(got)}: the "
                "module's make_cache ignores max_kv_size (no rotating cache)"
            )
        return cache

    def _batched_rotating(self, req: dict) -> None:
        """mlx-vlm's batches (_make_cache) take no max_kv_size: they never rotate."""
        if req.get("max_kv_size") is not None:
            raise NotServable(
                "generate.ar._make_cache takes no max_kv_size: the runtime's batches never rotate"
            )


def _by_position(mx, side, variant: dict) -> dict[int, dict[int, object]]:
    """Row -> absolute position -> logits row, from a Side's (row, step) blocks."""
    out: dict[int, dict[int, object]] = {}
    for (row, step), block in side.logits.items():
        start = len(variant["rows"][row]) if step else 0
        start += sum(len(s["tokens"][row]) for s in variant["steps"][: max(step - 1, 0)])
        rows = block.astype(mx.float32)
        for j in range(rows.shape[0]):
            out.setdefault(row, {})[start + j] = rows[j]
    return out


def _compare_row(mx, tested: dict, ref: dict, bits: int) -> dict:
    common = sorted(set(tested) & set(ref))
    if not common:
        return {"positions": [], "ulps": []}
    R = mx.stack([ref[p] for p in common])
    T = mx.stack([tested[p] for p in common])
    unit = ulp(mx.max(mx.abs(R)).item(), bits)
    return {"positions": common, "ulps": (mx.max(mx.abs(T - R), axis=-1) / unit).tolist()}
