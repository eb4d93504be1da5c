"""At the cost model's widest absorbed width the absorbed path is far slower than the materialised one

Written by `mlagate repro` for the case crossover::mlx-lm/deepseek_v3::mlx-lm-0.32.2::deepseek-v3::bfloat16::cuda (configuration formula_width).
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
 "cache": 8192,
 "case": "crossover::mlx-lm/deepseek_v3::mlx-lm-0.32.2::deepseek-v3::bfloat16::cuda",
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
 "dtype": "bfloat16",
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
 "samples": 15,
 "seed": 0,
 "tolerance": 0.1
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


import ast
import importlib.util
import types


class _Force(ast.NodeTransformer):
    """Each `L == 1` becomes `FORCE == "absorbed" or (FORCE != "materialised" and L == 1)`."""

    def __init__(self):
        self.count = 0

    def visit_Compare(self, node):
        if (
            isinstance(node.left, ast.Name)
            and node.left.id == "L"
            and len(node.ops) == 1
            and isinstance(node.ops[0], ast.Eq)
            and getattr(node.comparators[0], "value", None) == 1
        ):
            self.count += 1
            force = ast.Name("FORCE", ast.Load())
            return ast.BoolOp(
                ast.Or(),
                [
                    ast.Compare(force, [ast.Eq()], [ast.Constant("absorbed")]),
                    ast.BoolOp(
                        ast.And(),
                        [ast.Compare(force, [ast.NotEq()], [ast.Constant("materialised")]), node],
                    ),
                ],
            )
        return node


def forced_module():
    """A copy of the runtime's module whose attention takes the path FORCE names ("absorbed",
    "materialised"; None: its own choice): each `L == 1` of its __call__ asks FORCE first, and
    a `use_absorbed` rule the module imports answers FORCE where it is set (the rest of the
    runtime's code untouched)."""
    spec = importlib.util.find_spec(CASE["import"])
    tree = ast.parse(open(spec.origin, encoding="utf-8").read(), spec.origin)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == CASE["attention"])
    call = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__call__")
    force = _Force()
    force.visit(call)
    if not force.count:
        raise SystemExit(f"no `L == 1` guard in {CASE['attention']}.__call__: cannot force it")
    name = CASE["import"] + "_forced"
    module = types.ModuleType(name)
    module.__file__, module.__package__ = spec.origin, CASE["import"].rpartition(".")[0]
    module.FORCE = None
    sys.modules[name] = module
    exec(compile(ast.fix_missing_locations(tree), spec.origin, "exec"), module.__dict__)
    rule = module.__dict__.get("use_absorbed")
    if callable(rule):
        module.use_absorbed = lambda *a, **k: (
            module.FORCE == "absorbed" if module.FORCE else rule(*a, **k)
        )
    print(
        f"forced: {force.count} `L == 1` guard(s) of {CASE['attention']}.__call__"
        + (" and its use_absorbed rule" if callable(rule) else "")
    )
    return module


import statistics
import time


def absorbed_wins(L, T, r, n, v):
    """The cost model the fix computes (exact integers): per head the absorbed path costs
    L*r*d + 2*L*T*r and the materialised one T*r*d + L*T*d, d = n + v, T after the step."""
    d = n + v
    return 2 * r <= d or L * (r * d + (2 * r - d) * T) < r * d * T


def widest_absorbed(T_before, r, n, v):
    L = 1
    while absorbed_wins(L + 1, T_before + L + 1, r, n, v):
        L += 1
    return L


def timed(model, module, cache, toks, force):
    """One step of toks on the primed cache on the forced path, then the cache trimmed back."""
    module.FORCE = force
    try:
        start = time.perf_counter()
        mx.eval(model(mx.array([toks]), cache=cache))
        return time.perf_counter() - start
    finally:
        module.FORCE = None
        cache_module().trim_prompt_cache(cache, len(toks))


def check():
    """At the formula's widest absorbed width on a warm cache the two paths cost the same
    operations, so the absorbed path should be at most the suite's tolerance slower there."""
    geo, T, tol, samples = CASE["geometry"], CASE["cache"], CASE["tolerance"], CASE["samples"]
    module = forced_module()
    model = build_model(module)
    cache = cache_module().make_prompt_cache(model)
    prompt = tokens(T, 1)
    for i in range(0, T, 2048):
        logits(model, prompt[i : i + 2048], cache)
    b = widest_absorbed(T, geo["r"], geo["n"], geo["v"])
    widths = [w for w in (32, 64, 128) if w < b] + [b]
    print(f"cache {T}, {geo['heads']} heads, r/n/v {geo['r']}/{geo['n']}/{geo['v']}, "
          f"{CASE['dtype']}: the formula absorbs up to L = {b}")
    change = {}
    for L in widths:
        toks = tokens(L, 2 + L)
        for force in ("absorbed", "materialised", "absorbed", "materialised"):
            timed(model, module, cache, toks, force)
        pairs = []
        for i in range(samples):
            order = ("absorbed", "materialised") if i % 2 == 0 else ("materialised", "absorbed")
            t = {f: timed(model, module, cache, toks, f) for f in order}
            pairs.append(t["absorbed"] / t["materialised"] - 1)
        change[L] = statistics.median(pairs)
        print(f"L = {L}: absorbed vs materialised {change[L]:+.1%} (median of {samples} pairs, "
              f"{min(pairs):+.1%}..{max(pairs):+.1%})")
    if change[b] > tol:
        return True, (
            f"at the formula's widest absorbed width L = {b} (cache {T}, {geo['heads']} heads) the "
            f"absorbed path is {change[b]:+.1%} slower than the materialised one (tolerance "
            f"{tol:.0%}): the cost model keeps steps on the slower path on {mx.default_device()}"
        )
    return False, (
        f"at the formula's widest absorbed width L = {b} (cache {T}, {geo['heads']} heads) the "
        f"absorbed path is {change[b]:+.1%} against the materialised one (tolerance {tol:.0%})"
    )


if __name__ == "__main__":
    versions()
    finish(*check())
