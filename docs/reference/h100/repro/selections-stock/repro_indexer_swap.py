"""The sparse indexer selects other keys in speculative rounds than in decoding the kept tokens

Written by `mlagate repro` for the case speculative_transaction::mlx-lm/deepseek_v32::mlx-lm-0.32.2::deepseek-v3.2-exp::float32::cuda (configuration selections).
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
 "attention": "DeepseekV32Attention",
 "beyond_topk": 19,
 "case": "speculative_transaction::mlx-lm/deepseek_v32::mlx-lm-0.32.2::deepseek-v3.2-exp::float32::cuda",
 "config": {
  "first_k_dense_replace": 1,
  "hidden_size": 2048,
  "index_head_dim": 128,
  "index_n_heads": 16,
  "index_topk": 256,
  "intermediate_size": 256,
  "kv_lora_rank": 512,
  "model_type": "deepseek_v32",
  "moe_intermediate_size": 64,
  "n_routed_experts": 4,
  "num_attention_heads": 128,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 2,
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
  "id": "deepseek-v3.2-exp",
  "n": 128,
  "profile": "full",
  "r": 512,
  "rope": 64,
  "v": 128
 },
 "import": "mlx_lm.models.deepseek_v32",
 "layers": 2,
 "model": "Model",
 "module": "mlx-lm/deepseek_v32",
 "rounds": 8,
 "seed": 0,
 "seeds": [
  3,
  4
 ],
 "widths": [
  3,
  4,
  8
 ]
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


import inspect
import random

SEEN = {}  # (run, indexer, position) -> the key positions it selected
RUN = [None]
INDEXERS = {}


def watch_indexers(module):
    """Record, per run, the top-k every sparse indexer of the module returns at each position."""
    watched = []
    for name, cls in list(vars(module).items()):
        if not (isinstance(cls, type) and name.endswith("Indexer") and "__call__" in vars(cls)):
            continue
        call = cls.__call__

        def recording(self, *args, _call=call, **kwargs):
            bound = inspect.signature(_call).bind(self, *args, **kwargs)
            cache = bound.arguments.get("cache")
            offset = getattr(cache, "offset", 0) if cache is not None else 0
            out = _call(self, *args, **kwargs)
            if isinstance(out, mx.array):
                who = INDEXERS.setdefault(id(self), len(INDEXERS))
                rows = out.reshape(out.shape[0], -1, out.shape[-1])[0].tolist()
                for i, row in enumerate(rows):
                    SEEN[(RUN[0], who, offset + i)] = tuple(sorted(row))
            return out

        cls.__call__ = recording
        watched.append(name)
    if not watched:
        raise SystemExit(f"no indexer class in {CASE['import']}: nothing selects")
    print(f"watching {', '.join(watched)}")


def speculative(model, cm, prompt, rng):
    """Verify rounds of the suite's widths, j of L accepted, the rest trimmed through the
    runtime's trim_prompt_cache, then a decode: the kept tokens."""
    cache = cm.make_prompt_cache(model)
    if not cm.can_trim_prompt_cache(cache):
        raise SystemExit("the runtime cannot trim this model's cache: no rollback to measure")
    logits(model, prompt, cache)
    kept, rounds = [], []
    vocab = CASE["config"]["vocab_size"]
    for r in range(CASE["rounds"]):
        L = CASE["widths"][r % len(CASE["widths"])]
        drafted = [rng.randrange(vocab) for _ in range(L)]
        j = rng.randint(0, L)
        logits(model, drafted, cache)
        if L - j:
            cm.trim_prompt_cache(cache, L - j)
        kept += drafted[:j]
        if j < L or rng.random() < 0.5:
            fix = rng.randrange(vocab)
            logits(model, [fix], cache)
            kept.append(fix)
        rounds.append((L, j))
    return kept, rounds


def check():
    """Each position's selections during speculative rounds (verify, accept j, trim) should be
    those of decoding the kept tokens one at a time from the same primed cache."""
    module, cm = importlib.import_module(CASE["import"]), cache_module()
    watch_indexers(module)
    model = build_model(module)
    T = CASE["config"]["index_topk"] + CASE["beyond_topk"]
    differ, compared = [], 0
    for seed in CASE["seeds"]:
        prompt = tokens(T, seed)
        RUN[0] = ("speculative", seed)
        kept, rounds = speculative(model, cm, prompt, random.Random(seed))
        RUN[0] = ("plain", seed)
        plain = cm.make_prompt_cache(model)
        logits(model, prompt, plain)
        for t in kept:
            logits(model, [t], plain)
        print(f"seed {seed}: cache {T}, rounds (L, accepted) {rounds}, {len(kept)} kept")
        for who in range(len(INDEXERS)):
            for pos in range(T, T + len(kept)):
                a = SEEN.get((("speculative", seed), who, pos))
                b = SEEN.get((("plain", seed), who, pos))
                compared += 1
                if a != b:
                    swapped = sorted(set(a or ()) ^ set(b or ()))
                    differ.append(f"seed {seed} indexer {who} position {pos}: {swapped[:4]}")
    for line in differ[:5]:
        print(f"differs: {line} (key positions in one selection only)")
    if differ:
        return True, (
            f"{len(differ)} of {compared} (indexer, position) selections of the speculative "
            f"rounds differ from decoding the kept tokens one at a time (first: {differ[0]})"
        )
    return False, f"{compared} of {compared} (indexer, position) selections equal decoding"


if __name__ == "__main__":
    versions()
    finish(*check())
