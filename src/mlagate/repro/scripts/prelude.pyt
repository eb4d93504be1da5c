"""$title

Written by `mlagate repro` for the case $case (configuration $config).
Needs only the runtime and MLX: `pip install "$requirement" "$mlx"`.
Builds the runtime's own Model from its own ModelArgs with tiny seeded random weights
(CASE below: the config, geometry and seed the suite used), and drives it through the runtime's
own caches. Exit 1 and a line "REPRODUCED: ..." when the defect shows; exit 0 and
"NOT REPRODUCED: ..." when the runtime behaves as expected.
"""

import importlib
import json
import math
import sys
import traceback

import mlx.core as mx

CASE = json.loads(r'''$case_json''')
ROOT = CASE["import"].split(".")[0]


def build_model(module=None):
    module = module or importlib.import_module(CASE["import"])
    args_cls = getattr(module, CASE["args"])
    config = dict(CASE["config"])
    args = args_cls.from_dict(config) if hasattr(args_cls, "from_dict") else args_cls(**config)
    mx.random.seed(CASE["seed"])
    model = getattr(module, CASE["model"])(args)
    model.eval()
    if CASE.get("dtype", "float32") != "float32":
        model.set_dtype(getattr(mx, CASE["dtype"]))
    mx.eval(model.parameters())
    return model


def logits(model, toks, cache):
    """One row's logits for a step of token ids (a runtime's output object or array)."""
    out = model(mx.array([toks]), cache=cache)
    out = getattr(out, "logits", out)[0]
    mx.eval(out)
    return out


def cache_module():
    return importlib.import_module(f"{ROOT}.models.cache")


def tokens(n, seed):
    key = mx.random.key(CASE["seed"] * 1000 + seed)
    return mx.random.randint(0, CASE["config"]["vocab_size"], (n,), key=key).tolist()


def leaves(caches):
    out = []
    for c in caches:
        inner = getattr(c, "caches", None)
        out.extend(leaves(inner) if isinstance(inner, (list, tuple)) else [c])
    return out


def kinds(caches):
    return sorted({type(c).__name__ for c in leaves(caches)})


def ulps(reference, tested):
    """The largest difference, in float32 ULPs at the reference's largest |logit|."""
    reference, tested = reference.astype(mx.float32), tested.astype(mx.float32)
    scale = mx.max(mx.abs(reference)).item()
    unit = 2.0 ** (math.floor(math.log2(scale)) - 23) if scale > 0 else 2.0**-149
    return mx.max(mx.abs(reference - tested)).item() / unit


def raised_at(exc):
    """Where the runtime raised: the innermost frame's file name and line."""
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}"


def versions():
    runtime = importlib.import_module(ROOT)
    print(f"runtime: {ROOT} {getattr(runtime, '__version__', '?')} ({runtime.__file__})")
    print(f"mlx: {mx.__version__}, backend: {mx.default_device()}")
    print(f"python: {sys.version.split()[0]} on {sys.platform}")
    shown = {k: CASE[k] for k in ("module", "geometry", "seed")}
    print(f"case: {json.dumps(shown)}")


def finish(reproduced, what):
    print(("REPRODUCED: " if reproduced else "NOT REPRODUCED: ") + what, flush=True)
    sys.exit(1 if reproduced else 0)


