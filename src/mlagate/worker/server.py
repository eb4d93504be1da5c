"""The worker: a subprocess that imports exactly one arm.

Runs with `python -I -m mlagate.worker.server ARM_DIR PACKAGE IN_FD OUT_FD`. It imports only the
stdlib, MLX and the runtime under test. Requests and replies are JSON lines on the two
inherited pipe descriptors (the dedicated channel); stdout and stderr are only logs.
"""

from __future__ import annotations

import base64
import importlib
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

from mlagate.worker import device, machine, probes, rollback, tracing, ulps
from mlagate.worker.speculation import SpeculationOps

PROTOCOL = 1
# the CPU the parent pins this worker to (mlagate.harness.supervisor.pinned_cpu)
PIN_ENV = "MLAGATE_WORKER_CPU"
STEP_HORIZON = (
    64  # tokens drawn per step: steps of up to this width on one cache share their first tokens
)


class Worker(SpeculationOps):  # speculative-suite ops live in mlagate.worker.speculation
    def __init__(self, arm_dir: str, package: str):
        self.arm_dir = os.path.realpath(arm_dir)
        self.package = package
        sys.path.insert(0, self.arm_dir)
        sys.meta_path.insert(0, probes.LeanImporter(self.arm_dir, package))
        import mlx.core as mx  # noqa: PLC0415  (MLX is shared by every arm; imported after the path is set)

        self.mx = mx
        self.models: dict[str, dict] = {}
        self._kept = None

    # --- ops -------------------------------------------------------------------------

    def op_hello(self, req: dict) -> dict:
        return {"protocol": PROTOCOL, "fingerprint": self.fingerprint()}

    def op_build(self, req: dict) -> dict:
        """Build a tiny whole model of a module from the runtime's own classes."""
        mx = self.mx
        import mlx.nn as nn  # noqa: PLC0415

        key = req["key"]
        if key in self.models:
            return self.models[key]["info"]
        if req.get("forced"):
            module, forcing = probes.load_forced(req["import"], req["attention"])
        else:
            module, forcing = importlib.import_module(req["import"]), None
        origin = self._in_arm(module, req["import"])
        ckpt = req.get("checkpoint")
        if ckpt:
            req = {
                **req,
                "config": json.loads((Path(ckpt) / "config.json").read_text(encoding="utf-8")),
            }
        model = self._construct(module, req)
        if ckpt and req.get("weights", True):
            self._load_checkpoint_weights(model, ckpt)
        model.eval()
        attention = [m for _, m in model.named_modules() if type(m).__name__ == req["attention"]]
        if not attention:
            raise RuntimeError(f"the built model holds no {req['attention']} instance")
        geo = req["geometry"]
        for attn in attention:
            want_q = (geo["heads"], geo["r"], geo["n"])
            want_o = (geo["heads"], geo["v"], geo["r"])
            got_q, got_o = (
                tuple(attn["embed_q"].weight.shape),
                tuple(attn["unembed_out"].weight.shape),
            )
            if ckpt:  # a checkpoint keeps its own head count; r, n and v are the geometry's
                want_q, want_o = got_q[:1] + want_q[1:], got_o[:1] + want_o[1:]
                if "scales" in attn["embed_q"]:  # packed 4-bit: the last axis is not n
                    want_q, want_o = want_q[:2] + got_q[2:], want_o[:2] + got_o[2:]
            if got_q != want_q or got_o != want_o:
                raise RuntimeError(
                    f"geometry not applied: embed_q {got_q} (want {want_q}), unembed_out {got_o} "
                    f"(want {want_o}); check the module's config keys"
                )
        score_scale = (
            1 if ckpt else req.get("score_scale") or 1
        )  # trained weights are peaked already
        if score_scale != 1:
            for attn in attention:
                attn["embed_q"].weight = attn["embed_q"].weight * score_scale
        dtype = getattr(mx, req["dtype"])
        model.set_dtype(dtype)
        quant = None if ckpt else req.get("quant")  # a checkpoint keeps its own quantisation
        if quant:
            nn.quantize(model, group_size=quant["group_size"], bits=quant["bits"])
        counters = probes.Counters()
        counters.attach(model)
        mx.eval(model.parameters())
        info = {
            "key": key,
            "module_file": origin,
            "attention_instances": len(attention),
            "forced": bool(forcing),
            "guards": [vars(s) for s in forcing.sites] if forcing else [],
            "checkpoint": ckpt,
        }
        self.models[key] = {
            "model": model,
            "module": module,
            "forcing": forcing,
            "counters": counters,
            "info": info,
            "vocab": req["config"].get("vocab_size", 256),
        }
        return info

    def _load_checkpoint_weights(self, model, path: str) -> None:
        """The checkpoint's weights, read by the runtime's own loader (utils.load_model, lazily),
        given to `model` (the same classes, or the forced copy of the module): quantised as the
        checkpoint is, then updated with its parameters."""
        import mlx.nn as nn  # noqa: PLC0415

        real, config = self._runtime("utils").load_model(Path(path), lazy=True)
        quant = config.get("quantization")
        if quant:
            held = {name for name, m in real.named_modules() if hasattr(m, "scales")}
            nn.quantize(
                model,
                group_size=quant["group_size"],
                bits=quant["bits"],
                class_predicate=lambda name, m: name in held,
            )
        model.update(real.parameters())

    def _in_arm(self, module, name: str | None = None) -> str:
        """The module's file; a module imported from outside this worker's arm is refused."""
        origin = os.path.realpath(module.__file__)
        if not origin.startswith(self.arm_dir + os.sep):
            raise RuntimeError(
                f"{name or module.__name__} was imported from {origin}, outside the arm "
                f"{self.arm_dir}"
            )
        return origin

    def _construct(self, module, req: dict):
        """The module's model class built from req's config under req's seed: the runtime's own
        initialisation."""
        args_cls = getattr(module, req["args"])
        config = dict(req["config"])
        args = args_cls.from_dict(config) if hasattr(args_cls, "from_dict") else args_cls(**config)
        self.mx.random.seed(req["seed"])
        return getattr(module, req["model"])(args)

    def op_release(self, req: dict) -> dict:
        """Drop every model and primed cache and return MLX's cached buffers to the device, so
        the next case (maybe in another worker) finds the memory free."""
        import gc  # noqa: PLC0415

        self.models.clear()
        self._kept = None
        gc.collect()
        device.clear_cache(self.mx)
        return {}

    def op_save_weights(self, req: dict) -> dict:
        """Write a built model's weights (safetensors) so another arm can load the very same
        ones."""
        self.models[req["key"]]["model"].save_weights(req["path"])
        return {"path": req["path"]}

    def op_load_weights(self, req: dict) -> dict:
        """Replace a built model's weights by another arm's; every name must match (strict)."""
        entry = self.models[req["key"]]
        entry["model"].load_weights(req["path"], strict=True)
        self.mx.eval(entry["model"].parameters())
        return {"loaded": req["path"]}

    def op_reference(self, req: dict) -> dict:
        """A float64 copy of a built model on the CPU: its weights dequantised and upcast, nothing
        re-drawn.

        The copy is built forced-capable and unquantised; it is the high-precision reference
        of the same weights the tested model uses.
        """
        mx = self.mx
        from mlx.utils import tree_flatten, tree_unflatten  # noqa: PLC0415

        src = self.models[req["source"]]
        build = dict(req["build"], key=req["key"], dtype="float32", quant=None, forced=True)
        with mx.stream(mx.cpu):
            self.op_build(build)
            ref = self.models[req["key"]]
            flat = dict(tree_flatten(src["model"].parameters()))
            weights = []
            for name, value in flat.items():
                prefix, leaf = name.rsplit(".", 1)
                quantized = prefix + ".scales" in flat
                if quantized and leaf in ("scales", "biases"):
                    continue
                if quantized and leaf == "weight":
                    layer = _get(src["model"], prefix)
                    value = mx.dequantize(
                        value,
                        flat[prefix + ".scales"],
                        flat.get(prefix + ".biases"),
                        group_size=layer.group_size,
                        bits=layer.bits,
                    )
                weights.append((name, value.astype(mx.float64)))
            ref["model"].update(tree_unflatten(weights))
            ref["model"].set_dtype(mx.float64)
            mx.eval(ref["model"].parameters())
        ref["cpu"] = True
        return ref["info"]

    def op_compare(self, req: dict) -> dict:
        """Errors of tested outputs against a reference, in ULPs of a dtype at the reference's
        magnitude.

        The unit is one ULP of `dtype` at max|reference| (the output's magnitude), so an
        element near zero is not counted in its own tiny ULPs. Returns max, p99 and mean
        per output, their pairwise delta, and the path each run took.
        """
        mx = self.mx
        paths = {}
        outs = {}
        for name, spec in req["outputs"].items():
            reply, out = self._run(spec)
            paths[name] = reply["path"]
            outs[name] = out
        reply, ref = self._run(req["ref"])
        paths["reference"] = reply["path"]
        with mx.stream(mx.cpu):
            ref = ref.astype(mx.float64)
            outs = {name: out.astype(mx.float64) for name, out in outs.items()}
            magnitude = mx.max(mx.abs(ref)).item()
            ulp = ulps.ulp(magnitude, ulps.BITS[req["dtype"]])
            stats = {"magnitude": magnitude, "ulp": ulp, "paths": paths}
            for name, out in outs.items():
                stats[name] = ulps.err_stats(mx, mx.abs(out - ref) / ulp)
            names = list(outs)
            if len(names) == 2:
                stats["delta"] = ulps.err_stats(mx, mx.abs(outs[names[0]] - outs[names[1]]) / ulp)
        return stats

    def _run(self, spec: dict):
        reply = self.op_step({**spec, "want_output": False, "keep": True})
        return reply, self._kept

    def op_prime(self, req: dict) -> dict:
        """Prime a cache of T tokens and keep it, for timed samples. Clears MLX's buffer cache
        first."""
        mx = self.mx
        entry = self.models[req["key"]]
        device.clear_cache(mx)
        T, chunk = req["T"], req.get("chunk", 512)
        tokens, cache = self._prefilled(
            entry, T, req["seed"], req.get("horizon", STEP_HORIZON), chunk
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
            "seed": req["seed"],
        }
        return {"T": T, "trimmable": trimmable}

    def op_sample(self, req: dict) -> dict:
        """Time a step of L tokens on the primed cache, `loops` times (device synchronised
        around each, the cache trimmed back to T after each), and return the mean time of one
        step. The counters are taken around the timed regions only.

        The same step runs once untimed first (rewarm), because interleaved arms live in
        different processes: without it, a sample that follows another worker's would pay
        for that worker's use of the caches, and an odd number of samples cannot balance it.
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
        mx.random.seed(seed)
        tokens = mx.random.randint(0, entry["vocab"], (1, T + horizon))
        cache = self._cache(entry)
        for start in range(0, T, chunk):
            logits = self._forward(entry["model"], tokens[:, start : min(T, start + chunk)], cache)
            mx.eval(logits, [c.state for c in cache if hasattr(c, "state")])
        return tokens, cache

    def _cache(self, entry: dict):
        model = entry["model"]
        if hasattr(model, "make_cache"):
            return model.make_cache()
        cache_mod = importlib.import_module(f"{self.package}.models.cache")
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

    # --- speculative scripts (pool equivalence, trim after rejection, transactions) ------

    def op_script(self, req: dict) -> dict:
        """Run named token scripts (steps, verify + rollback through the runtime's own API) on one
        built model and compare pairs of them in the worker (mlagate.worker.rollback)."""
        try:
            return rollback.run_pairs(self, req)
        except rollback.RollbackRefused as exc:
            raise RuntimeError(f"rollback refused: {exc}") from exc

    # --- environment -----------------------------------------------------------------

    def fingerprint(self) -> dict:
        mx = self.mx
        device = mx.default_device()
        backend = "cpu"
        name = platform.processor() or platform.machine()
        if device.type == mx.gpu:
            backend = "metal" if mx.metal.is_available() else "cuda"
            try:
                info = mx.device_info() if hasattr(mx, "device_info") else mx.metal.device_info()
                name = info.get("device_name", name)
            except Exception:  # noqa: BLE001  (device_info is optional across MLX versions)
                pass
        return {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "mlx": mx.__version__,
            "backend": backend,
            "device": name,
            "blas": blas_in_use(),
            "mlx_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("MLX_")},
            "ld_preload": os.environ.get("LD_PRELOAD", ""),
            "cpus": cpus(),
            "arm_dir": self.arm_dir,
            **machine.fixed(),
        }


def _get(model, dotted: str):
    for part in dotted.split("."):
        model = model[int(part)] if part.isdigit() else model[part]
    return model


def blas_in_use() -> str:
    """The BLAS libraries mapped into this process (Linux), else what the platform implies."""
    if sys.platform == "darwin":
        return "accelerate"
    try:
        with open("/proc/self/maps", encoding="utf-8") as fh:
            libs = {line.split()[-1] for line in fh if len(line.split()) >= 6}
    except OSError:
        return "unknown"
    names = sorted(
        {
            os.path.basename(p)
            for p in libs
            if any(k in os.path.basename(p).lower() for k in ("blas", "lapack", "mkl", "blis"))
        }
    )
    return ", ".join(names) if names else "none found (MLX's bundled reference kernels)"


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


def serve(worker: Worker, rfd: int, wfd: int) -> None:
    with os.fdopen(rfd, "r", encoding="utf-8") as rx, os.fdopen(wfd, "w", encoding="utf-8") as tx:
        for line in rx:
            req = json.loads(line)
            op = req.get("op")
            t0 = time.perf_counter()
            try:
                handler = getattr(worker, f"op_{op}")
                reply = {"ok": True, "result": handler(req)}
            except Exception as exc:  # noqa: BLE001  (every failure goes back on the channel)
                reply = {
                    "ok": False,
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(),
                    "runtime_at": tracing.runtime_frame(exc, worker.arm_dir),
                }
            reply["seconds"] = time.perf_counter() - t0
            tx.write(json.dumps(reply) + "\n")
            tx.flush()
            if op == "exit":
                return


def pin(env: dict) -> None:
    """Pin this process to the CPU the parent chose (PIN_ENV), before MLX starts a thread."""
    cpu = env.get(PIN_ENV)
    if cpu is not None:
        os.sched_setaffinity(0, {int(cpu)})


def cpus() -> str | None:
    """The CPUs this process may run on, as "1" or "0,1"; None where the platform cannot say."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return ",".join(map(str, sorted(os.sched_getaffinity(0))))


def main(argv: list[str]) -> None:
    arm_dir, package, rfd, wfd = argv[0], argv[1], int(argv[2]), int(argv[3])
    pin(os.environ)
    worker = Worker(arm_dir, package)
    worker.op_exit = lambda req: {}
    serve(worker, rfd, wfd)


if __name__ == "__main__":
    main(sys.argv[1:])
