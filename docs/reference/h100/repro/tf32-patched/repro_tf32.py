"""MLX CUDA computes float32 matmuls in TF32

Written by `mlagate repro` for the case equivalence::mlx-lm/deepseek_v3::mlx-lm-0.32.2-patched::deepseek-v3::float32::cuda (configuration tf32).
Needs only the runtime and MLX: `pip install "mlx-lm==0.32.2" "mlx[cpu]==0.32.4"`.
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

CASE = json.loads(r'''{
 "args": "ModelArgs",
 "attention": "DeepseekV3Attention",
 "budget_ulps": 256,
 "case": "equivalence::mlx-lm/deepseek_v3::mlx-lm-0.32.2-patched::deepseek-v3::float32::cuda",
 "config": {
  "first_k_dense_replace": 1,
  "hidden_size": 2048,
  "intermediate_size": 256,
  "kv_lora_rank": 512,
  "model_type": "deepseek_v3",
  "moe_intermediate_size": 64,
  "n_routed_experts": 4,
  "num_attention_heads": 128,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 1,
  "num_key_value_heads": 128,
  "q_lora_rank": 1536,
  "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64,
  "v_head_dim": 128,
  "vocab_size": 1024
 },
 "dtype": "float32",
 "geometry": {
  "heads": 128,
  "id": "deepseek-v3",
  "n": 128,
  "profile": "full",
  "r": 512,
  "rope": 64,
  "v": 128
 },
 "import": "mlx_lm.models.deepseek_v3",
 "model": "Model",
 "module": "mlx-lm/deepseek_v3",
 "prompt": 24,
 "seed": 0
}''')
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


def check():
    """A float32 matmul on the default device should agree with a float64 reference within
    float32 rounding; the tiny model's float32 logits there should agree with the CPU's."""
    if CASE["dtype"] != "float32":
        raise SystemExit(f"this check is for float32, not {CASE['dtype']}")
    geo, budget = CASE["geometry"], CASE["budget_ulps"]
    worst = 0.0
    for rows, inner, cols in ((64, geo["r"], geo["heads"] * geo["n"]), (64, geo["r"], 1024)):
        a = mx.random.normal((rows, inner), key=mx.random.key(CASE["seed"] + inner))
        b = mx.random.normal((inner, cols), key=mx.random.key(CASE["seed"] + cols))
        out = a @ b
        mx.eval(out)
        with mx.stream(mx.cpu):
            ref = a.astype(mx.float64) @ b.astype(mx.float64)
            got = ulps(ref, out)
        print(f"float32 matmul ({rows}x{inner}) @ ({inner}x{cols}) on {mx.default_device()}: "
              f"{got:g} float32 ULPs from float64 ({got / 8192:.3g} TF32 ULPs)")
        worst = max(worst, got)
    model = build_model()
    toks = tokens(CASE["prompt"], 1)
    here = logits(model, toks, None)
    with mx.stream(mx.cpu):
        cpu = logits(model, toks, None)
    apart = ulps(cpu, here)
    print(f"{CASE['model']} logits of a {len(toks)}-token prompt, {mx.default_device()} vs the "
          f"CPU: {apart:g} float32 ULPs at max |logits|")
    if worst > budget:
        return True, (
            f"float32 matmuls on {mx.default_device()} are {worst:g} float32 ULPs from float64 "
            f"(budget {budget}; one TF32 ULP is 8192): they are computed in reduced precision "
            f"(TF32), and the model's logits move by {apart:g} ULPs against the CPU"
        )
    return False, (
        f"float32 matmuls on {mx.default_device()} are within {worst:g} float32 ULPs of float64 "
        f"(budget {budget}); the model's logits are {apart:g} ULPs from the CPU's"
    )


if __name__ == "__main__":
    versions()
    finish(*check())
