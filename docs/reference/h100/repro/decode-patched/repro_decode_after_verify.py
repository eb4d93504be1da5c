"""Plain decoding on a long cache slows after materialising verify steps

Written by `mlagate repro` for the case speculative::mlx-lm/deepseek_v3::mlx-lm-0.32.2-patched::deepseek-v3::float32::cuda (configuration decode_after_verify).
Needs only the runtime and MLX: `pip install "mlx-lm==0.32.2" "mlx[cuda]==0.32.4"`.
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
 "case": "speculative::mlx-lm/deepseek_v3::mlx-lm-0.32.2-patched::deepseek-v3::float32::cuda",
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
 "contexts": [
  1024,
  4096,
  16384
 ],
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
 "new_tokens": 32,
 "num_draft": 3,
 "seed": 0,
 "slower_than": 0.2
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


import statistics
import time


def rate(loop, caches, base):
    """Tokens a second of one of the runtime's generation loops run to its end; each cache
    trimmed back to base tokens after."""
    start = time.perf_counter()
    n = sum(1 for _ in loop)
    if hasattr(mx, "synchronize"):
        mx.synchronize()
    seconds = time.perf_counter() - start
    for cache in caches:
        cache_module().trim_prompt_cache(cache, cache[0].offset - base)
    return n / seconds


def check():
    """Plain decoding on a long cache should keep its speed once the runtime's speculative loop
    (verify steps of width num_draft + 1, the stock arm materialising each) ran on the same cache.
    The suite's order: each plain run after a speculative run; before, plain runs after plain
    runs only, the cache never verified."""
    T, n, k = CASE["contexts"][-1], CASE["new_tokens"], CASE["num_draft"]
    cm, slower = cache_module(), CASE["slower_than"]
    gen = importlib.import_module(f"{ROOT}.generate")
    model = build_model()
    prompt = mx.array(tokens(T, 1))
    target, draft = cm.make_prompt_cache(model), cm.make_prompt_cache(model)
    for cache in (target, draft):
        for i in range(0, T - 1, 1024):
            model(prompt[None, i : min(T - 1, i + 1024)], cache=cache)
            mx.eval([c.state for c in cache])
    last = prompt[T - 1 :]

    def plain():
        loop = gen.generate_step(last, model, max_tokens=n, prompt_cache=target)
        return rate(loop, [target], T - 1)

    def speculative():
        loop = gen.speculative_generate_step(
            last, model, model, num_draft_tokens=k, max_tokens=n, prompt_cache=target + draft
        )
        return rate(loop, [target, draft], T - 1)

    for _ in range(2):
        plain()
    before = [plain() for _ in range(5)]
    speculative()
    after = []
    for _ in range(5):
        speculative()
        after.append(plain())
    b, a = statistics.median(before), statistics.median(after)
    said = (
        f"plain decoding of {n} tokens at cache {T - 1} ({CASE['geometry']['heads']} heads, "
        f"{CASE['dtype']}): {b:.0f} tok/s after plain runs (runs {min(before):.0f} to "
        f"{max(before):.0f}), {a:.0f} tok/s each right after a speculative run of {n} tokens "
        f"with verify steps of {k + 1} (runs {min(after):.0f} to {max(after):.0f}; {a / b - 1:+.0%})"
    )
    print(said)
    return a < b * (1 - slower), said + f"; slower than {slower:.0%} counts"


if __name__ == "__main__":
    versions()
    finish(*check())
