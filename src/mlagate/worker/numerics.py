"""Numerics inside a worker: a float64 CPU reference of a built model (op `reference`) and the
errors of tested outputs against it, in ULPs (op `compare`, through mlagate.worker.ulps).

`NumericsOps` is mixed into the worker (mlagate.worker.server.Worker). It uses the worker's
`mx`, `models`, `op_build` (mlagate.worker.building) and `op_step` with its kept output
(mlagate.worker.stepping). Imports only the stdlib at module level.
"""

from __future__ import annotations

from mlagate.worker import ulps


class NumericsOps:
    """Worker ops for the high-precision reference and ULP errors (mixed into the worker)."""

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


def _get(model, dotted: str):
    for part in dotted.split("."):
        model = model[int(part)] if part.isdigit() else model[part]
    return model
