"""Stepping models inside a worker: a cache of T tokens prefilled with the runtime's own
classes, then one step of L tokens (op `step`), or a primed cache kept for timed samples (ops
`prime` and `sample`), with the attention path counted around each.

`StepOps` is mixed into the worker (mlagate.worker.server.Worker). It uses the worker's `mx`,
`models`, `package` and `_kept` (the last output kept for op `compare`). Imports only the
stdlib at module level.

A module's cache, rollback and helper modules come from its own runtime package
(importers.runtime_root): `pkg._vendor.mlx_lm.models.cache` for
`pkg._vendor.mlx_lm.models.deepseek_v3`.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import sys
import time

from mlagate.worker import device
from mlagate.worker.importers import runtime_root


def root_of(worker, entry: dict) -> str:
    """The runtime package of a built or loaded model's module."""
    return runtime_root(entry["module"].__name__, worker.package)


# tokens drawn per step: steps of up to this width on one cache share their first tokens
STEP_HORIZON = 64


class StepOps:
    """Worker ops that prime caches and step models (mixed into the worker)."""

    def op_prime(self, req: dict) -> dict:
        """Prime a cache of T tokens and keep it, for timed samples. Clears MLX's buffer cache
        first. `save`: write the primed state to that file as well (`saved`: whether every
        cache has a state that, set into a fresh cache, hashes alike); `load`: set a fresh
        cache's state from such a file instead of prefilling (the same tokens are drawn from the
        seed); `digest`: reply with the sha256 of every cache's state."""
        mx = self.mx
        entry = self.models[req["key"]]
        device.clear_cache(mx)
        T, chunk, seed = req["T"], req.get("chunk", 512), req["seed"]
        horizon = req.get("horizon", STEP_HORIZON)
        reply = {"T": T}
        if req.get("load"):
            tokens, cache = self._tokens(entry, T, seed, horizon), self._cache(entry)
            _set_states(mx, cache, req["load"])
        else:
            tokens, cache = self._prefilled(entry, T, seed, horizon, chunk)
        if req.get("digest") or req.get("save"):
            reply["digest"] = _digest(mx, cache)
        if req.get("save"):
            reply["saved"] = _save_checked(
                mx, cache, self._cache(entry), req["save"], reply["digest"]
            )
        device.clear_cache(
            mx
        )  # the prefill's transient buffers: another worker may need the memory
        trimmable = all(
            hasattr(c, "trim") and (not hasattr(c, "is_trimmable") or c.is_trimmable())
            for c in cache
        )
        entry["primed"] = {
            "cache": cache,
            "tokens": tokens,
            "T": T,
            "trimmable": trimmable,
            "chunk": chunk,
            "seed": seed,
        }
        return {**reply, "trimmable": trimmable}

    def op_sample(self, req: dict) -> dict:
        """Time a step of L tokens on the primed cache, `loops` times (device synchronised
        around each, the cache trimmed back to T after each), and return the mean time of one
        step. The counters are taken around the timed regions only.

        The same step runs once untimed first (rewarm; `rewarm: false` when every series of
        the measurement is in this worker), because interleaved arms live in different
        processes: without it, a sample that follows another worker's would pay for that
        worker's use of the caches, and an odd number of samples cannot balance it.
        A cache that cannot be trimmed is primed anew after the step and allows one loop."""
        mx = self.mx
        entry = self.models[req["key"]]
        primed = entry.get("primed")
        if primed is None:
            raise RuntimeError("sample before prime")
        model, counters, forcing = entry["model"], entry["counters"], entry["forcing"]
        T, L = primed["T"], req["L"]
        if req.get("force") is not None and forcing is None:
            raise RuntimeError("forcing asked of a model built without forced guards")
        loops = max(1, int(req.get("loops", 1))) if primed["trimmable"] else 1
        step = primed["tokens"][:, T : T + L]
        mx.eval(step)
        if req.get("rewarm", True):
            self._untimed(entry, step, req.get("force"))
        counters.clear()
        seconds = 0.0
        for _ in range(loops):
            device.synchronize(mx)
            if forcing:
                forcing.mode = req.get("force")
            try:
                t0 = time.perf_counter()
                out = self._forward(model, step, primed["cache"])
                mx.eval(out)
                device.synchronize(mx)
                seconds += time.perf_counter() - t0
            finally:
                if forcing:
                    forcing.mode = None
            if primed["trimmable"]:
                for c in primed["cache"]:
                    c.trim(L)
        summary = counters.summary()
        if not primed["trimmable"]:
            self.op_prime(
                {"key": req["key"], "T": T, "chunk": primed["chunk"], "seed": primed["seed"]}
            )
        return {"seconds": seconds / loops, "loops": loops, "path": summary["path"], "L": L, "T": T}

    def _untimed(self, entry: dict, step, force) -> None:
        """Run the step once untimed on the primed cache and trim it back: the timed step then
        finds this process's caches warm, whichever worker ran before it."""
        mx, primed, forcing = self.mx, entry["primed"], entry["forcing"]
        if not primed["trimmable"]:
            return
        if forcing:
            forcing.mode = force
        try:
            mx.eval(self._forward(entry["model"], step, primed["cache"]))
        finally:
            if forcing:
                forcing.mode = None
        for c in primed["cache"]:
            c.trim(step.shape[1])

    def _prefilled(self, entry: dict, T: int, seed: int, horizon: int, chunk: int):
        """Seeded tokens for T + horizon positions and a fresh cache of the runtime's own class,
        prefilled with the first T of them in chunks (on the natural path)."""
        mx = self.mx
        tokens = self._tokens(entry, T, seed, horizon)
        cache = self._cache(entry)
        for start in range(0, T, chunk):
            logits = self._forward(entry["model"], tokens[:, start : min(T, start + chunk)], cache)
            mx.eval(logits, [c.state for c in cache if hasattr(c, "state")])
        return tokens, cache

    def _tokens(self, entry: dict, T: int, seed: int, horizon: int):
        mx = self.mx
        mx.random.seed(seed)
        return mx.random.randint(0, entry["vocab"], (1, T + horizon))

    def _cache(self, entry: dict):
        model = entry["model"]
        if hasattr(model, "make_cache"):
            return model.make_cache()
        cache_mod = importlib.import_module(f"{root_of(self, entry)}.models.cache")
        return [cache_mod.KVCache() for _ in model.layers]

    def _forward(self, model, tokens, cache):
        out = model(tokens, cache=cache)
        return getattr(out, "logits", out)

    def op_step(self, req: dict) -> dict:
        """Prime a fresh cache with T tokens (natural path), then run one step of L tokens."""
        if self.models[req["key"]].get("cpu"):
            with self.mx.stream(self.mx.cpu):
                return self._step(req)
        return self._step(req)

    def _step(self, req: dict) -> dict:
        mx = self.mx
        entry = self.models[req["key"]]
        model, counters, forcing = entry["model"], entry["counters"], entry["forcing"]
        force = req.get("force")
        if force is not None and forcing is None:
            raise RuntimeError("forcing asked of a model built without forced guards")
        T, L = req["T"], req["L"]
        tokens, cache = self._prefilled(
            entry, T, req["seed"], max(L, STEP_HORIZON), req.get("chunk", 512)
        )
        tokens = tokens[:, : T + L]
        counters.clear()
        if forcing:
            forcing.decisions.clear()
            forcing.mode = force
        try:
            out = self._forward(model, tokens[:, T:], cache)
            mx.eval(out)
        finally:
            if forcing:
                forcing.mode = None
        if req.get("keep"):
            self._kept = out
        reply = {"T": T, "L": L, "force": force, **counters.summary()}
        if forcing:
            reply["guards"] = [
                {"site": s, "natural": "absorbed" if a else "materialised"}
                for s, a in forcing.decisions
            ]
        if req.get("want_output"):
            reply["output"] = encode(out)
        return reply


def _save_states(mx, cache, path: str) -> bool:
    """Every cache's state into one safetensors file: array j of cache i as "i.j", an int or
    None in the metadata (runtimes differ: mlx-lm 0.32.2's KVCache state is its whole buffers
    and the offset, mlx-vlm's the filled part). False, writing nothing, when a cache has no
    state of that kind to set back."""
    arrays, meta = {}, {}
    for i, c in enumerate(cache):
        state = getattr(c, "state", None)
        if getattr(getattr(type(c), "state", None), "fset", None) is None or not isinstance(
            state, (tuple, list)
        ):
            return False
        meta[f"{i}"] = str(len(state))
        for j, v in enumerate(state):
            if isinstance(v, mx.array):
                arrays[f"{i}.{j}"] = v
            elif v is None or (isinstance(v, int) and not isinstance(v, bool)):
                meta[f"{i}.{j}"] = "none" if v is None else str(v)
            else:
                return False
    mx.save_safetensors(path, arrays, metadata=meta)
    return True


def _save_checked(mx, cache, fresh, path: str, digest: str) -> bool:
    """Save the caches' state, then set it into `fresh` caches of the same class: True when
    they hash as the primed ones did (`digest`); a state setter that rebuilds something else is
    not trusted."""
    if not _save_states(mx, cache, path):
        return False
    _set_states(mx, fresh, path)
    return _digest(mx, fresh) == digest


def _set_states(mx, cache, path: str) -> None:
    arrays, meta = mx.load(path, return_metadata=True)

    def item(key: str):
        if key in arrays:
            return arrays[key]
        return None if meta[key] == "none" else int(meta[key])

    for i, c in enumerate(cache):
        c.state = tuple(item(f"{i}.{j}") for j in range(int(meta[f"{i}"])))
    mx.eval(list(arrays.values()))


def _digest(mx, cache) -> str:
    h = hashlib.sha256()
    for c in cache:
        for v in c.state if hasattr(c, "state") else ():
            if isinstance(v, mx.array):
                raw = mx.contiguous(v).view(mx.uint8)
                mx.eval(raw)
                h.update(str((v.shape, v.dtype)).encode() + bytes(memoryview(raw)))
            else:
                h.update(repr(v).encode())
    return h.hexdigest()


def encode(arr) -> dict:
    """An MLX array as raw bytes (bit-exact), with dtype and shape."""
    mx = sys.modules["mlx.core"]
    dtype = str(arr.dtype).split(".")[-1]
    raw = arr.view(mx.uint16) if arr.dtype in (mx.bfloat16, mx.float16) else arr
    raw = mx.contiguous(raw)
    mx.eval(raw)
    return {
        "dtype": dtype,
        "shape": list(arr.shape),
        "b64": base64.b64encode(bytes(memoryview(raw))).decode(),
    }
