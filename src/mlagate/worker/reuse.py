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

from mlagate.worker.rollback import leaves, prompt_trim
from mlagate.worker.serving import NotServable, Side
from mlagate.worker.ulps import BITS, ulp


class Refused(RuntimeError):
    """The runtime's reuse declines this cache: it would prefill the next turn cold."""


class ReuseOps:
    """Worker op `reuse` (mixed into the worker)."""

    def op_reuse(self, req: dict) -> dict:
        """req: key, prefix (tokens), branch (tokens the trim mode feeds past the prefix and
        trims back), follow (follow-up token lists), modes ("save_load", "trim"), force, path
        (a file for save_load), dtype. Per mode and follow-up: ULPs of the reused run against
        the kept one and the cold one, the paths, the cache classes. The kept and cold runs of
        a follow-up are the same for every mode: run once, each mode compared with them."""
        entry = self.models[req["key"]]
        if req.get("force") is not None and entry["forcing"] is None:
            raise RuntimeError("forcing asked of a model built without forced guards")
        out, apis = {}, {}
        for mode in req["modes"]:
            try:
                apis[mode] = self._reuse_api(entry, mode)
            except NotServable as exc:
                out[mode] = {"not_servable": str(exc)}
        for mode in apis:
            out[mode] = {"follow": []}
        saved: dict = {}
        try:
            for follow in req["follow"] if apis else ():
                for mode, reply in self._reuse_one(entry, req, follow, apis, saved).items():
                    out[mode]["follow"].append(reply)
        finally:
            if saved.get("file"):
                os.unlink(saved["file"])
        return {"modes": out}

    def _reuse_api(self, entry: dict, mode: str):
        cm = self._cache_module(entry)
        if mode == "save_load":
            if not (hasattr(cm, "save_prompt_cache") and hasattr(cm, "load_prompt_cache")):
                raise NotServable("the runtime has no save_prompt_cache/load_prompt_cache")
            return cm
        cache_trim = prompt_trim(cm)
        if cache_trim is not None:

            def trim_lm(cache, prefix_len, n):
                if hasattr(cm, "can_trim_prompt_cache") and not cm.can_trim_prompt_cache(cache):
                    raise Refused("can_trim_prompt_cache refuses the cache (it prefills cold)")
                return cache_trim(cache, n)

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

    def _reuse_one(self, entry: dict, req: dict, follow: list[int], apis, saved) -> dict:
        mx, force = self.mx, req.get("force")
        prefix = req["prefix"]
        side = Side()

        def run(tokens, cache, key):
            logits = self._call(entry, mx.array([tokens], mx.int32), cache, force, side, [key])
            return logits[0]

        cold = run(prefix + follow, self._fresh(entry), "cold")[len(prefix) :]
        kept_cache = self._fresh(entry)
        run(prefix, kept_cache, "prefix")
        kept = run(follow, kept_cache, "kept")
        return {
            mode: self._reused(entry, req, follow, mode, api, saved, run, side, kept, cold)
            for mode, api in apis.items()
        }

    def _reused(self, entry, req, follow, mode, api, saved, run, side, kept, cold) -> dict:
        """One mode's reused cache continued with `follow`, compared with kept and cold. The
        save_load mode saves the prefix's cache once (`saved`) and loads it for each follow-up."""
        mx, prefix, n = self.mx, req["prefix"], len(req["prefix"])
        reply = {"width": len(follow), "paths": {}, "classes": []}
        try:
            if mode == "save_load":
                cache = api.load_prompt_cache(self._saved_prefix(entry, req, api, saved, run))
            else:
                cache = self._fresh(entry)
                run(prefix + req["branch"], cache, "branch")
                reply["dropped"] = api(cache, n, len(req["branch"]))
            reply["classes"] = sorted({type(c).__name__ for c in leaves(cache)})
            reused = run(follow, cache, ("reused", mode))
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
        reply["paths"] = {
            "reused": side.paths.get(("reused", mode)),
            "kept": side.paths.get("kept"),
            "cold": side.paths.get("cold"),
        }
        return reply

    def _saved_prefix(self, entry, req, cm, saved: dict, run) -> str:
        """The file the prefix's cache was saved to (prefilled and saved on the first call); a
        raise while doing so is raised again for every follow-up."""
        if "error" not in saved and "file" not in saved:
            try:
                cache = self._fresh(entry)
                run(req["prefix"], cache, "prefix")
                path = f"{req['path']}.{os.getpid()}.safetensors"
                cm.save_prompt_cache(path, cache)
                saved["file"] = path
            except Exception as exc:  # noqa: BLE001  (raised again below, per follow-up)
                saved["error"] = exc
        if "error" in saved:
            raise saved["error"]
        return saved["file"]
