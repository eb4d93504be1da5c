"""Serving configurations inside a worker: rows run batched through the runtime's own batch
caches, caches quantized through its own entry points, and prompt caches reused through its
own functions, each compared in the worker with the same tokens run as one plain sequence.

`ServingOps` is mixed into the worker (mlagate.worker.server.Worker); its ops are `serve`
(batched or single rows, quantized or not) and `reuse` (a prompt cache saved and loaded, or
trimmed back to a shared prefix, then continued). Only small verdict evidence crosses the
pipe: per row and step, the error in ULPs, the path each side took, and the cache classes
that held the tokens.

How each runtime batches (its own code, found by what it has):
- mlx-vlm: `generate.ar._make_cache(model, left_padding, kv_bits=..., kv_group_size=...)`
  (its caches' batch forms: BatchKVCache, BatchQuantizedKVCache, BatchPoolingCache, a cache's
  own to_batch()), left-padded prompts, and the per-row padding mask passed as
  `attention_mask` with the prompt, as its batched generation passes the processor's mask;
  decode and verify steps pass none.
- mlx-lm: `generate._merge_caches` over one `make_prompt_cache(model)` a row, right-padded
  prompts with each cache's `prepare(lengths=, right_padding=)` and `finalize()` after the
  prefill (its PromptProcessingBatch.prompt); the model builds the mask from the cache.
Quantization: the runtime's `maybe_quantize_kv_cache` (mlx-lm `generate`, mlx-vlm
`generate.common`) after each call, from the first token (quantized_kv_start 0).

Imports only the stdlib at module level; MLX and the runtime arrive through the worker.
"""

from __future__ import annotations

import importlib
import inspect
import sys

from mlagate.worker.importers import REAL_INITS, AbsentImporter, run_init
from mlagate.worker.rollback import leaves
from mlagate.worker.rowrejection import refusing
from mlagate.worker.stepping import root_of
from mlagate.worker.ulps import BITS, ulp

# Packages mlx-vlm's generate/ar.py (where _make_cache lives) imports at the top for servers,
# progress bars and media; batching token ids never calls them. Placeholders only where absent.
SERVING_ABSENT_OK = (
    "transformers",
    "huggingface_hub",
    "numpy",
    "tqdm",
    "requests",
    "cv2",
    "soundfile",
    "scipy",
    "av",
    "datasets",
    "fastapi",
    "uvicorn",
)


class NotServable(RuntimeError):
    """The runtime has no way to serve this configuration (an entry point it lacks)."""


class Side:
    """One side of a comparison: its logits per (row, step), paths and cache classes."""

    def __init__(self):
        self.logits: dict[tuple[int, int], object] = {}
        self.paths: dict[tuple[int, int], str] = {}
        self.classes: set[str] = set()
        self.error: dict | None = None
        self.untrimmable: list[str] = []  # caches the runtime cannot trim: rejection not run
        self.per_row: dict[str, str] = {}  # route: why a per-row rejection was not expressible


class ServingOps:
    """Worker ops of the serving configurations (mixed into the worker)."""

    _serving_absent = None

    def _serving_runtime(self, entry: dict, name: str):
        """A runtime module by name, or None where the runtime has no such module."""
        root = root_of(self, entry)
        if ServingOps._serving_absent is None:
            ServingOps._serving_absent = AbsentImporter(SERVING_ABSENT_OK)
            sys.meta_path.append(ServingOps._serving_absent)
        if importlib.util.find_spec(f"{root}.{name.split('.')[0]}") is None:
            return None
        for package in REAL_INITS.get(name.split(".")[0], ()):
            if importlib.util.find_spec(f"{root}.{package}") is not None:
                run_init(importlib.import_module(f"{root}.{package}"))
        try:
            module = importlib.import_module(f"{root}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith(root):
                return None
            raise
        self._in_arm(module)
        return module

    def _cache_module(self, entry: dict):
        return importlib.import_module(f"{root_of(self, entry)}.models.cache")

    def _batching(self, entry: dict) -> str:
        """How the runtime batches ("batching" in a reply): "vlm" (_make_cache, left padding,
        attention_mask) or "lm" (_merge_caches, right padding, prepare/finalize)."""
        ar = self._serving_runtime(entry, "generate.ar")
        if ar is not None and hasattr(ar, "_make_cache"):
            return "vlm"
        gen = self._serving_runtime(entry, "generate")
        if gen is not None and hasattr(gen, "_merge_caches"):
            return "lm"
        raise NotServable("the runtime has neither generate.ar._make_cache nor _merge_caches")

    def _quantizer(self, entry: dict):
        for name in ("generate.common", "generate"):
            mod = self._serving_runtime(entry, name)
            if mod is not None and hasattr(mod, "maybe_quantize_kv_cache"):
                return mod.maybe_quantize_kv_cache
        raise NotServable("the runtime has no maybe_quantize_kv_cache")

    # --- op serve ------------------------------------------------------------------------

    def op_serve(self, req: dict) -> dict:
        """Rows (token lists, ragged) prefilled, then `steps` of new tokens per row (a step:
        {"tokens": [[row 0], [row 1], ...], "trim": k}: k tokens dropped after it through the
        runtime's trim; a list of counts per row with a "route": a per-row rejection,
        mlagate.worker.rowrejection; "keep": [rows]: the others leave the batch before it), run
        `batched` or each row alone, with `quant` ({bits, group_size}) or not, on rotating
        caches with `max_kv_size`; compared per row and step with `reference` (the same tokens,
        each row alone, plain unless reference_quant). Both sides run under `force`."""
        entry = self.models[req["key"]]
        if req.get("force") is not None and entry["forcing"] is None:
            raise RuntimeError("forcing asked of a model built without forced guards")
        try:
            tested = self._side(entry, req, req.get("batched", True), req.get("quant"))
        except NotServable as exc:
            return {"not_servable": str(exc)}
        return self._compare(tested, self._reference(entry, req, tested), req)

    def _reference(self, entry: dict, req: dict, tested: Side) -> Side:
        """The plain run of the rows (row after row, each step after step; never rotating). After
        a tested side that raised, only up to the last (row, step) it holds: what lies past it
        has nothing to be compared with (nothing where it holds none). A whole run is kept with
        the model for the next configuration of the same rows, steps and force (the same run:
        the serving suites never load other weights into a built model)."""
        quant, req = req.get("reference_quant"), {**req, "max_kv_size": None}
        if tested.error is not None:
            if not tested.logits:
                return Side()
            return self._side(entry, req, False, quant, until=max(tested.logits))
        kept = entry.setdefault("plain_runs", {})
        key = repr([req.get(k) for k in ("rows", "steps", "force", "dtype", "reference_quant")])
        if key not in kept:
            kept[key] = self._side(entry, req, False, quant)
        return kept[key]

    def _side(self, entry: dict, req: dict, batched: bool, quant: dict | None, until=None) -> Side:
        """One side's run; single rows end after the (row, step) `until` when given."""
        side = Side()
        try:
            if batched:
                self._run_batched(entry, req, quant, side)
            else:
                for row in range(len(req["rows"]) if until is None else until[0] + 1):
                    last = until[1] if until is not None and row == until[0] else None
                    self._run_single(entry, req, row, quant, side, last)
        except NotServable:
            raise
        except Exception as exc:  # noqa: BLE001  (the runtime raised: evidence, not a crash)
            from mlagate.worker import tracing  # noqa: PLC0415

            side.error = {
                "error": f"{type(exc).__name__}: {exc}",
                "at": tracing.runtime_frame(exc, self.arm_dir),
            }
        return side

    def _call(self, entry: dict, tokens, cache, force, side: Side, where, **kw):
        """One forward under force; the path the counters saw recorded for each (row, step) of
        `where`."""
        mx, counters, forcing = self.mx, entry["counters"], entry["forcing"]
        counters.clear()
        if forcing:
            forcing.mode = force
        try:
            out = entry["model"](tokens, cache=cache, **kw)
        finally:
            if forcing:
                forcing.mode = None
        logits = getattr(out, "logits", out)
        mx.eval(logits)
        path = counters.summary()["path"]
        for key in where:
            side.paths[key] = path
        side.classes |= {type(c).__name__ for c in leaves(cache)}
        return logits

    def _run_single(self, entry: dict, req: dict, row: int, quant, side: Side, last=None) -> None:
        """One row alone: its prefill (step 0) and its steps, up to step `last` when given."""
        mx, force = self.mx, req.get("force")
        cache = self._prompt_cache(entry, req)
        quantize = self._quantizer(entry) if quant else None
        prompt = mx.array([req["rows"][row]], dtype=mx.int32)
        side.logits[(row, 0)] = self._call(entry, prompt, cache, force, side, [(row, 0)])[0]
        if quantize:
            quantize(cache, 0, quant["group_size"], quant["bits"])
        for s, step in enumerate(req["steps"][:last], start=1):
            if row not in step.get("keep", [row]):
                break
            tokens = mx.array([step["tokens"][row]], dtype=mx.int32)
            txn = self.open_rejection(entry, cache, step, side)
            side.logits[(row, s)] = self._call(entry, tokens, cache, force, side, [(row, s)])[0]
            if quantize:
                quantize(cache, 0, quant["group_size"], quant["bits"])
            if "route" in step:
                self.reject_rows(entry, cache, step, [row], txn, side, batched=False)
            elif step.get("trim"):
                self._trim(entry, cache, step["trim"], side)

    def _run_batched(self, entry: dict, req: dict, quant, side: Side) -> None:
        mx, force, rows = self.mx, req.get("force"), req["rows"]
        keys = [(r, 0) for r in range(len(rows))]
        lengths = [len(r) for r in rows]
        width = max(lengths)
        pads = [width - n for n in lengths]
        if self._batching(entry) == "vlm":
            self._batched_rotating(req)
            cache = self._serving_runtime(entry, "generate.ar")._make_cache(
                entry["model"],
                pads,
                **(
                    {"kv_bits": quant["bits"], "kv_group_size": quant["group_size"]}
                    if quant
                    else {}
                ),
            )
            tokens = mx.array([[0] * p + r for p, r in zip(pads, rows, strict=True)], mx.int32)
            mask = mx.array([[0] * p + [1] * n for p, n in zip(pads, lengths, strict=True)])
            kw = {"attention_mask": mask} if _takes_mask(entry["model"]) else {}
            out = self._call(entry, tokens, cache, force, side, keys, **kw)
            for r, p in enumerate(pads):
                side.logits[(r, 0)] = out[r, p:]
            quantize = None
        else:
            gen = self._serving_runtime(entry, "generate")
            cache = gen._merge_caches([self._prompt_cache(entry, req) for _ in rows])
            tokens = mx.array([r + [0] * p for p, r in zip(pads, rows, strict=True)], mx.int32)
            if max(pads):
                for c in cache:
                    c.prepare(lengths=lengths, right_padding=pads)
            out = self._call(entry, tokens, cache, force, side, keys)
            if max(pads):
                for c in cache:
                    c.finalize()
            for r, n in enumerate(lengths):
                side.logits[(r, 0)] = out[r, :n]
            quantize = self._quantizer(entry) if quant else None
            if quantize:
                quantize(cache, 0, quant["group_size"], quant["bits"])
        alive = list(range(len(rows)))
        for s, step in enumerate(req["steps"], start=1):
            if "keep" in step:
                alive = self._leave(entry, cache, alive, step["keep"])
            tokens = mx.array([step["tokens"][r] for r in alive], dtype=mx.int32)
            txn = self.open_rejection(entry, cache, step, side)
            out = self._call(entry, tokens, cache, force, side, [(r, s) for r in alive])
            for i, r in enumerate(alive):
                side.logits[(r, s)] = out[i]
            if quantize:
                quantize(cache, 0, quant["group_size"], quant["bits"])
            if "route" in step:
                cache = self.reject_rows(entry, cache, step, alive, txn, side, batched=True)
                if cache is None:
                    break
            elif step.get("trim"):
                self._trim(entry, cache, step["trim"], side)

    def _leave(self, entry: dict, cache, alive: list, keep: list) -> list:
        """Rows not in `keep` leave the batch (their requests finished) through each layer
        cache's own `filter`, as the runtime's batch generator filters (mlx-vlm with an int32
        array of the batch positions kept, mlx-lm with a list)."""
        kept = [r for r in alive if r in keep]
        positions = [alive.index(r) for r in kept]
        if self._batching(entry) == "vlm":
            positions = self.mx.array(positions, self.mx.int32)
        for c in cache:
            c.filter(positions)
        return kept

    def _trim(self, entry: dict, cache, n: int, side: Side) -> None:
        """Drop the last n tokens through the runtime's trim_prompt_cache, else each cache's
        trim; a cache without trim (or that says it cannot be trimmed) leaves the tokens in
        place and is recorded: the rejection is not expressible there."""
        refused = refusing(cache, ("trim",), trimmable=True)
        if refused:
            side.untrimmable = refused
            return
        self.drop(entry, cache, n)

    def _compare(self, tested: Side, ref: Side, req: dict) -> dict:
        mx, bits = self.mx, BITS[req.get("dtype", "float32")]
        rows = []
        for key in sorted(ref.logits):
            if key not in tested.logits:
                continue
            R = ref.logits[key].astype(mx.float32)
            T = tested.logits[key].astype(mx.float32)
            unit = ulp(mx.max(mx.abs(R)).item(), bits)
            per = (mx.max(mx.abs(T - R), axis=-1) / unit).tolist()
            worst = max(per)
            rows.append(
                {
                    "row": key[0],
                    "step": key[1],
                    "ulps": worst,
                    "first": next((i for i, e in enumerate(per) if e > 0), None),
                    "tested_path": tested.paths.get(key),
                    "reference_path": ref.paths.get(key),
                }
            )
        return {
            "rows": rows,
            "errors": {"tested": tested.error, "reference": ref.error},
            "classes": {"tested": sorted(tested.classes), "reference": sorted(ref.classes)},
            "batching": self._batching_or_none(req),
            "untrimmable": sorted(set(tested.untrimmable) | set(ref.untrimmable)),
            "per_row_rejection": dict(sorted({**ref.per_row, **tested.per_row}.items())),
        }

    def _batching_or_none(self, req: dict) -> str | None:
        try:
            return self._batching(self.models[req["key"]])
        except NotServable:
            return None


def _takes_mask(model) -> bool:
    """Whether the model's call takes the caller's padding mask (`attention_mask`, named or
    through **kwargs, as mlx-vlm's language models do)."""
    params = inspect.signature(type(model).__call__).parameters
    return "attention_mask" in params or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
    )
