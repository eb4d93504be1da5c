"""Prompt caches reused inside a worker, through the runtime's own functions: a prefix prefilled,
then saved to a file and loaded (`save_prompt_cache`/`load_prompt_cache`), or a branch past the
prefix trimmed back to it (mlx-lm's `trim_prompt_cache`; mlx-vlm's per-turn reuse:
`generate.dispatch._prefix_cache_trim_amount`, then each cache's `trim`), and continued with a
follow-up turn. Each follow-up's logits are compared with the prefix kept in memory and
continued (the same arithmetic: bitwise when reuse is exact) and with a cold prefill of the
prefix and the follow-up in one call.

`ReuseOps` is mixed into the worker (mlagate.worker.server.Worker), beside
mlagate.worker.serving's ServingOps, whose runtime lookups it uses. Imports only the stdlib at
module level.
"""

from __future__ import annotations

import os

from mlagate.worker.rollback import leaves
from mlagate.worker.serving import NotServable, Side
from mlagate.worker.ulps import BITS, ulp


class Refused(RuntimeError):
    """The runtime's reuse declines this cache: it would prefill the next turn cold."""


class ReuseOps:
    """Worker op `reuse` (mixed into the worker)."""

    def op_reuse(self, req: dict) -> dict:
        """req: key, prefix (tokens), branch (tokens the trim mode feeds past the prefix and
        trims back), follow (follow-up token lists), mode ("save_load" or "trim"), force,
        path (a file for save_load), dtype. Per follow-up: ULPs of the reused run against the
        kept one and the cold one, the paths, the cache classes."""
        entry = self.models[req["key"]]
        if req.get("force") is not None and entry["forcing"] is None:
            raise RuntimeError("forcing asked of a model built without forced guards")
        try:
            self._reuse_api(entry, req["mode"])
        except NotServable as exc:
            return {"not_servable": str(exc)}
        out = []
        for follow in req["follow"]:
            out.append(self._reuse_one(entry, req, follow))
        return {"follow": out}

    def _reuse_api(self, entry: dict, mode: str):
        cm = self._cache_module(entry)
        if mode == "save_load":
            if not (hasattr(cm, "save_prompt_cache") and hasattr(cm, "load_prompt_cache")):
                raise NotServable("the runtime has no save_prompt_cache/load_prompt_cache")
            return cm
        if hasattr(cm, "trim_prompt_cache"):

            def trim_lm(cache, prefix_len, n):
                if hasattr(cm, "can_trim_prompt_cache") and not cm.can_trim_prompt_cache(cache):
                    raise Refused("can_trim_prompt_cache refuses the cache (it prefills cold)")
                return cm.trim_prompt_cache(cache, n)

            return trim_lm
        disp = self._serving_runtime(entry, "generate.dispatch")
        amount = getattr(disp, "_prefix_cache_trim_amount", None)
        if amount is None:
            raise NotServable("the runtime has neither trim_prompt_cache nor a per-turn trim")

        def trim(cache, prefix_len, n):
            drop = amount(cache, prefix_len)
            if drop is None:
                raise Refused("_prefix_cache_trim_amount refuses the cache (it prefills cold)")
            for c in cache:
                if drop:
                    c.trim(drop)
            return drop

        return trim

    def _fresh(self, entry: dict):
        return self._cache_module(entry).make_prompt_cache(entry["model"])

    def _reuse_one(self, entry: dict, req: dict, follow: list[int]) -> dict:
        mx, force = self.mx, req.get("force")
        prefix, n = req["prefix"], len(req["prefix"])

        side = Side()

        def run(tokens, cache, key):
            logits = self._call(entry, mx.array([tokens], mx.int32), cache, force, side, [key])
            return logits[0]

        cold = run(prefix + follow, self._fresh(entry), "cold")[n:]
        kept_cache = self._fresh(entry)
        run(prefix, kept_cache, "prefix")
        kept = run(follow, kept_cache, "kept")
        reply = {"width": len(follow), "paths": {}, "classes": []}
        try:
            cache = self._fresh(entry)
            if req["mode"] == "save_load":
                run(prefix, cache, "prefix")
                cm = self._reuse_api(entry, "save_load")
                path = f"{req['path']}.{os.getpid()}.safetensors"
                cm.save_prompt_cache(path, cache)
                cache = cm.load_prompt_cache(path)
                os.unlink(path)
            else:
                run(prefix + req["branch"], cache, "branch")
                reply["dropped"] = self._reuse_api(entry, "trim")(cache, n, len(req["branch"]))
            reply["classes"] = sorted({type(c).__name__ for c in leaves(cache)})
            reused = run(follow, cache, "reused")
        except Refused as exc:
            reply["refused"] = str(exc)
            return reply
        except Exception as exc:  # noqa: BLE001  (the runtime raised: evidence)
            from mlagate.worker import tracing  # noqa: PLC0415

            reply["error"] = {
                "error": f"{type(exc).__name__}: {exc}",
                "at": tracing.runtime_frame(exc, self.arm_dir),
            }
            return reply
        bits = BITS[req.get("dtype", "float32")]
        for name, ref in (("kept", kept), ("cold", cold)):
            unit = ulp(mx.max(mx.abs(ref)).item(), bits)
            reply[name] = mx.max(mx.abs(reused - ref)).item() / unit
        reply["paths"] = {k: side.paths.get(k) for k in ("reused", "kept", "cold")}
        return reply
