"""Speculative decoding inside a worker: tiny checkpoints written and loaded by the runtime's
own code, and the runtime's own generation loops (plain decoding and draft-model
speculation) run, timed and path-proven on one primed prompt.

Worker side: imports only the stdlib at module level; MLX and the runtime arrive inside the
methods. `SpeculationOps` is mixed into the worker; its ops are `write_checkpoint`,
`load_checkpoint`, `spec_prime`, `spec_run` and `spec_verify`.
The runtime's modules are imported through mlagate.worker.importers (placeholders for absent
tokenizer and hub packages, real package inits).
"""

from __future__ import annotations

import fcntl
import importlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from mlagate.worker import device, probes
from mlagate.worker.importers import REAL_INITS, AbsentImporter, run_init
from mlagate.worker.stepping import root_of, runtime_root


def _flag_rounds(flags: list[bool], n_tokens: int, num_draft: int) -> dict:
    """Drafted and accepted token counts of mlx-lm's speculative loop, from its per-token
    from_draft flags: each round drafts min(left, num_draft) tokens, yields the accepted
    ones (True), then one token of the target's own (False) unless the budget is spent."""
    i = ntoks = drafted = accepted = rounds = 0
    while ntoks < n_tokens:
        k = min(n_tokens - ntoks, num_draft)
        drafted += k
        rounds += 1
        n = 0
        while n < k and i < len(flags) and flags[i]:
            n += 1
            i += 1
        ntoks += n
        accepted += n
        if ntoks < n_tokens:
            if i >= len(flags) or flags[i]:
                raise RuntimeError(f"unexpected draft flags {flags}")
            i += 1
            ntoks += 1
    return {"drafted": drafted, "accepted": accepted, "rounds": rounds}


TOP = (
    5  # plain runs report their TOP best tokens and log-probs per position (to judge a divergence)
)


class SpeculationOps:
    """Worker ops for the speculative suite (mixed into mlagate.worker.server.Worker)."""

    _absent: AbsentImporter | None = None
    _spec: dict | None = None

    def _runtime(self, name: str, root: str | None = None):
        """A runtime module (`generate`, `utils`, `models.cache`) of the runtime package root
        (default: the worker's package), with placeholders for tokenizer and hub packages that
        are not installed."""
        root = root or self.package
        if self._absent is None:
            self._absent = AbsentImporter()
            sys.meta_path.append(self._absent)
        for package in REAL_INITS.get(name, ()):
            if importlib.util.find_spec(f"{root}.{package}") is not None:  # mlx-lm 0.31.3 has none
                run_init(importlib.import_module(f"{root}.{package}"))
        module = importlib.import_module(f"{root}.{name}")
        self._in_arm(module)
        return module

    # --- checkpoints ------------------------------------------------------------------

    def op_write_checkpoint(self, req: dict) -> dict:
        """Write a tiny checkpoint directory in the runtime's own format (config.json +
        model.safetensors through its save_config / save_model, quantised by its own
        quantize_model), atomically and under a lock; a complete one is left alone.

        The weights are the runtime's own initialisation under a seed; `perturb` adds
        seeded noise (a fraction of each tensor's standard deviation) to every weight, for
        a draft that disagrees with its target now and then.
        """
        mx = self.mx
        final = Path(req["path"])
        final.parent.mkdir(parents=True, exist_ok=True)
        with open(str(final) + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (final / "config.json").is_file():
                return {"path": str(final), "written": False}
            utils = self._runtime("utils", runtime_root(req["import"], self.package))
            module = importlib.import_module(req["import"])
            self._in_arm(module, req["import"])
            config = dict(req["config"])
            model = self._construct(module, req)
            model.set_dtype(getattr(mx, req["dtype"]))
            perturb = req.get("perturb")
            if perturb:
                _perturb(mx, model, perturb["seed"], perturb["scale"])
            mx.eval(model.parameters())
            quant = req.get("quant")
            if quant:
                model, config = utils.quantize_model(
                    model, config, quant["group_size"], quant["bits"]
                )
            staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=final.parent))
            try:
                utils.save_model(staging, model)
                utils.save_config(config, staging / "config.json")
                (staging / "mlagate.json").write_text(
                    json.dumps(
                        {
                            "writer": "mlagate",
                            "seed": req["seed"],
                            "perturb": perturb,
                            "quant": quant,
                            "dtype": req["dtype"],
                            "arm_dir": self.arm_dir,
                        },
                        indent=1,
                    )
                )
                os.rename(staging, final)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        return {"path": str(final), "written": True}

    def op_load_checkpoint(self, req: dict) -> dict:
        """Load a checkpoint directory with the runtime's own loader (utils.load_model).

        With `share` (a loaded key of the same checkpoint), the model is a second instance
        holding the very same weight arrays: loaded lazily, then given the other's
        parameters before anything is read, so a self-draft costs no second copy of a large
        checkpoint while its attention calls are counted apart from the target's.
        """
        mx = self.mx
        key = req["key"]
        root = runtime_root(req["import"], self.package) if req.get("import") else None
        utils = self._runtime("utils", root)
        share = req.get("share")
        model, config = utils.load_model(Path(req["path"]), lazy=share is not None)
        if share is not None:
            model.update(self.models[share]["model"].parameters())
        origin = self._in_arm(sys.modules[type(model).__module__])
        counters = probes.Counters()
        if counters.attach(model) == 0:
            raise RuntimeError(
                f"the checkpoint's model ({type(model).__module__}) holds no MLA attention "
                "(embed_q / unembed_out)"
            )
        mx.eval(model.parameters())
        info = {
            "key": key,
            "module_file": origin,
            "attention_instances": counters.layers,
            "quantization": config.get("quantization"),
            "path": req["path"],
            "shares_weights_with": share,
        }
        self.models[key] = {
            "model": model,
            "module": sys.modules[type(model).__module__],
            "forcing": None,
            "counters": counters,
            "info": info,
            "vocab": config["vocab_size"],
        }
        return info

    # --- generation -------------------------------------------------------------------

    def op_spec_prime(self, req: dict) -> dict:
        """A seeded prompt of P tokens; the target's and each draft's caches (the runtime's
        own make_prompt_cache) prefilled with its first P - 1 tokens in chunks. Replaces any
        earlier prompt."""
        mx = self.mx
        target = self.models[req["target"]]
        cache_mod = self._runtime("models.cache", root_of(self, target))
        self._spec = None

        device.clear_cache(mx)
        P, chunk = req["P"], req.get("chunk", 512)
        mx.random.seed(req["seed"])
        tokens = mx.random.randint(0, target["vocab"], (P + 64,)).astype(mx.uint32)
        caches = {}
        for name, key in {"target": req["target"], **req.get("drafts", {})}.items():
            model = self.models[key]["model"]
            cache = cache_mod.make_prompt_cache(model)
            if not cache_mod.can_trim_prompt_cache(cache):
                raise RuntimeError(
                    f"{key}: the runtime's cache is not trimmable; speculation needs it"
                )
            for start in range(0, P - 1, chunk):
                model(tokens[None, start : min(P - 1, start + chunk)], cache=cache)
                mx.eval([c.state for c in cache])
            caches[name] = (key, cache)
        device.clear_cache(mx)
        self._spec = {"P": P, "tokens": tokens, "caches": caches, "cache_mod": cache_mod}
        return {"P": P, "cached": P - 1}

    def _rewind(self) -> None:
        """Trim every primed cache back to P - 1 tokens."""
        spec = self._spec
        for _, cache in spec["caches"].values():
            extra = cache[0].offset - (spec["P"] - 1)
            if extra > 0:
                spec["cache_mod"].trim_prompt_cache(cache, extra)
            if cache[0].offset != spec["P"] - 1:
                raise RuntimeError(f"cache rewound to {cache[0].offset}, not {spec['P'] - 1}")

    def op_spec_run(self, req: dict) -> dict:
        """Generate N tokens greedily from the primed prompt with the runtime's own loop:
        generate_step (mode plain) or speculative_generate_step with a draft (mode spec).

        The device is synchronised around the loop; the counters of the target (and the
        draft) are taken around it. Returns the tokens, the seconds, the drafted and
        accepted counts, the paths, and (plain) per token the top-two log-prob margin and the
        TOP best tokens with their log-probs.
        """
        mx = self.mx

        spec = self._spec
        if spec is None:
            raise RuntimeError("spec_run before spec_prime")
        N, k = req["N"], req.get("num_draft", 0)
        tkey, tcache = spec["caches"]["target"]
        target = self.models[tkey]
        gen = self._runtime("generate", root_of(self, target))
        prompt = spec["tokens"][spec["P"] - 1 : spec["P"]]
        draft = None
        if req["mode"] == "spec":
            dkey, dcache = spec["caches"][req["draft"]]
            draft = self.models[dkey]
        for entry in (target, draft):
            if entry is not None:
                entry["counters"].clear()
        device.synchronize(mx)
        t0 = time.perf_counter()
        if draft is None:
            loop = gen.generate_step(prompt, target["model"], max_tokens=N, prompt_cache=tcache)
        else:
            loop = gen.speculative_generate_step(
                prompt,
                target["model"],
                draft["model"],
                num_draft_tokens=k,
                max_tokens=N,
                prompt_cache=tcache + dcache,
            )
        tokens, flags, logprobs = [], [], []
        for out in loop:
            tokens.append(int(out[0]))
            logprobs.append(out[1])
            flags.append(bool(out[2]) if len(out) > 2 else False)
        device.synchronize(mx)
        seconds = time.perf_counter() - t0
        reply = {
            "seconds": seconds,
            "tokens": tokens,
            "target": _path_record(target["counters"]),
            "absent": sorted(self._absent.used),
        }
        if draft is not None:
            reply["draft"] = _path_record(draft["counters"])
            reply.update(_flag_rounds(flags, N, k))
        else:
            lps = mx.stack([lp.reshape(-1) for lp in logprobs]).astype(mx.float32)
            order = mx.argsort(-lps, axis=-1)[:, :TOP]
            best = mx.take_along_axis(lps, order, axis=-1)
            reply["margins"] = [round(x, 6) for x in (best[:, 0] - best[:, 1]).tolist()]
            reply["top"] = [
                list(zip(ids, vals, strict=True))
                for ids, vals in zip(order.tolist(), best.tolist(), strict=True)
            ]
        self._rewind()
        return reply

    def op_spec_verify(self, req: dict) -> dict:
        """Time one target step of L tokens on the primed prompt (a verify step of width L),
        once untimed first, then rewound; the counters are taken around the timed step."""
        mx = self.mx

        spec = self._spec
        tkey, tcache = spec["caches"]["target"]
        target = self.models[tkey]
        L = req["L"]
        step = spec["tokens"][None, spec["P"] - 1 : spec["P"] - 1 + L]
        mx.eval(target["model"](step, cache=tcache))
        self._rewind()
        device.synchronize(mx)
        target["counters"].clear()
        t0 = time.perf_counter()
        mx.eval(target["model"](step, cache=tcache))
        device.synchronize(mx)
        seconds = time.perf_counter() - t0
        record = _path_record(target["counters"])
        self._rewind()
        return {"seconds": seconds, "L": L, "target": record}


def _path_record(counters) -> dict:
    """The path the attention calls since the counters were cleared took, and how many took each."""
    summary = counters.summary()
    counts = {
        path: sum(1 for c in summary["calls"] if c["path"] == path)
        for path in ("absorbed", "materialised", "split")
    }
    return {"path": summary["path"], "calls": {p: n for p, n in counts.items() if n}}


def _perturb(mx, model, seed: int, scale: float) -> None:
    """Add seeded Gaussian noise of `scale` times each floating tensor's standard deviation."""
    from mlx.utils import tree_flatten, tree_unflatten  # noqa: PLC0415

    mx.random.seed(seed)
    out = []
    for name, w in tree_flatten(model.parameters()):
        if not mx.issubdtype(w.dtype, mx.floating) or w.size < 2:
            out.append((name, w))
            continue
        noise = mx.random.normal(w.shape, dtype=mx.float32)
        std = mx.sqrt(mx.mean(mx.square(w.astype(mx.float32) - mx.mean(w.astype(mx.float32)))))
        out.append((name, (w.astype(mx.float32) + scale * std * noise).astype(w.dtype)))
    model.update(tree_unflatten(out))
