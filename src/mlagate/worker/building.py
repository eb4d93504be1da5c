"""Building models inside a worker: the module's tiny model from the runtime's own classes
(or a real checkpoint through the runtime's own loader), and its weights saved for, or loaded
from, another arm.

`BuildOps` is mixed into the worker (mlagate.worker.server.Worker); its ops are `build`,
`save_weights` and `load_weights`. It uses the worker's `mx`, `models` and `arm_dir`, and
`_runtime` (mlagate.worker.speculation). Imports only the stdlib at module level.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

from mlagate.worker import probes
from mlagate.worker.stepping import runtime_root


class BuildOps:
    """Worker ops that build models and move their weights (mixed into the worker)."""

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
            "searched": forcing.where() if forcing else "",  # where the guards were looked for
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

        root = runtime_root(type(model).__module__, self.package)  # the module's own runtime
        real, config = self._runtime("utils", root).load_model(Path(path), lazy=True)
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
