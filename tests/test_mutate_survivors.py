"""Three serving survivors argued equivalent (matrix.yaml `mutants: equivalent`), each shown on the
real arm's own classes built as the suites build them (the shipped matrix's quick-profile
config, the runtime's own initialisation):

- glm5_next's `BatchPoolingCache.filter` not keeping `buf_gate` with its rows: `buf_gate` is
  allocated as zeros and filled only with the indexer's gates, `x @ index_kpool_compress_gate.T`;
  the runtime initialises that gate to zeros, so every row of `buf_gate` is zero, and the kept
  rows read the same zeros whichever rows the buffer holds.
- bailing_hybrid's `attn_cache.offset` made `offset[:1]` (the first row's): the offset is read by
  the linear-attention (GLA) layers only, and no suite builds one: the one-layer model of every
  serving suite and the deeper model of the speculative suites (`layers`) hold global (MLA)
  layers only (and one sequence's offset is an int, for which the mutant's expression is the
  offset itself).
- mlx-vlm's `native_batch_linear` batch-size guard `x.shape[0] == 1` made `!= 1` (argued on the
  CPU backend only): it picks between `singleton_quantized_linear` and `exact_quantized_linear`
  for a half-precision input whose width is a multiple of 512; both return None for float
  weights, and for quantized ones (equivalence's bfloat16 q4g64) they agree bitwise on the CPU.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mlagate import matrix as matrix_mod
from mlagate.arm import arms
from mlagate.paths import default_path
from mlagate.repro.writing import _Tiny

SHIPPED = matrix_mod.load(default_path())

PROBE = r"""
import json, sys
site, package, module_name, args_name, model_name, config, seed = json.loads(sys.argv[1])
from mlagate.worker.probes import LeanImporter
sys.path.insert(0, site)
sys.meta_path.insert(0, LeanImporter(site, package))
import importlib
import mlx.core as mx
module = importlib.import_module(module_name)
args_cls = getattr(module, args_name)
args = args_cls.from_dict(config) if hasattr(args_cls, "from_dict") else args_cls(**config)
mx.random.seed(seed)
model = getattr(module, model_name)(args)
model.eval()
out = {}
exec(sys.stdin.read())
print(json.dumps(out))
"""


def probe(arm: str, module: str, code: str, layers: int | None = None) -> dict:
    m = SHIPPED.modules[module]
    tiny = _Tiny(SHIPPED, module, m.geometries[0], "quick", arm)
    install = arms.materialise(SHIPPED.arms[arm], SHIPPED.runtimes[m.runtime])
    spec = [
        str(install.site),
        SHIPPED.runtimes[m.runtime].package,
        m.import_path,
        m.args,
        m.model,
        tiny.config(arm, layers),
        11,
    ]
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(spec)],
        input=code,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.arms
def test_glm5_next_buf_gate_holds_only_zeros_in_every_row():
    got = probe(
        "mlx-vlm-0.7.10",
        "mlx-vlm/glm5_next",
        """
indexers = [m for _, m in model.named_modules() if hasattr(m, "index_kpool_compress_gate")]
out["indexers"] = len(indexers)
out["gate_abs_max"] = max(mx.max(mx.abs(m.index_kpool_compress_gate)).item() for m in indexers)
x = mx.random.normal((3, 12, indexers[0].index_kpool_compress_gate.shape[1]))
_, gates = indexers[0]._project_keys(x)
out["gates_abs_max"] = mx.max(mx.abs(gates)).item()
out["gates_shape"] = list(gates.shape)
""",
    )
    assert got["indexers"] >= 1
    assert got["gate_abs_max"] == 0.0, "the runtime's gate is not zero: the argument fails"
    assert got["gates_abs_max"] == 0.0 and got["gates_shape"][0] == 3, got


@pytest.mark.arms
def test_bailing_hybrid_offset_is_read_by_gla_layers_only_none_in_a_batch():
    code = """
lm = model.model
out["global"] = [bool(layer.is_global) for layer in lm.layers]
cache = importlib.import_module("mlx_lm.models.cache").make_prompt_cache(model)
model(mx.array([[1, 2, 3, 4, 5]]), cache=cache)
attn_cache = cache[lm._attn_idx]
mutated = attn_cache.offset[:1] if isinstance(attn_cache.offset, mx.array) else attn_cache.offset
out["offset"], out["mutated"] = attn_cache.offset, mutated
"""
    batched = probe("mlx-lm-0.32.2-patched", "mlx-lm/bailing_hybrid", code)
    assert batched["global"] and all(batched["global"]), batched  # serving_*: MLA layers only
    layers = SHIPPED.suites["speculative_transaction"].gates["layers"]
    deep = probe("mlx-lm-0.32.2-patched", "mlx-lm/bailing_hybrid", code, layers=layers)
    assert len(deep["global"]) >= layers and all(deep["global"]), deep  # no GLA layer either
    # and one sequence's offset is an int: the mutant's expression (the kill matrix's `after`)
    # is the offset itself
    assert deep["offset"] == deep["mutated"] == 5, deep


@pytest.mark.arms
def test_native_batch_linear_kernels_agree_bitwise_on_the_cpu():
    """The two kernels the mutated guard chooses between, on glm5_next's own projections at the
    equivalence suite's quantization (bfloat16 and float16, q4g64), every batch of 1 to 3 and
    width 2 to DECODE_BLOCK_SIZE; and None from both for float weights."""
    gates = SHIPPED.suites["equivalence"].gates
    assert "q4g64" in gates["quant"] and "bfloat16" in gates["dtypes"]
    got = probe(
        "mlx-vlm-0.7.10",
        "mlx-vlm/glm5_next",
        """
import mlx.nn as nn
qv = importlib.import_module("mlx_vlm.models.quantized_verifier")
block = importlib.import_module("mlx_vlm.models.linear").DECODE_BLOCK_SIZE
linears = [m for _, m in model.named_modules() if isinstance(m, nn.Linear)]
out["widths"] = sorted({m.weight.shape[1] for m in linears})
out["float_none"] = all(
    qv.singleton_quantized_linear(m, mx.zeros((1, 2, m.weight.shape[1]))) is None
    and qv.exact_quantized_linear(m, mx.zeros((1, 2, m.weight.shape[1]))) is None
    for m in linears
)
model.set_dtype(mx.bfloat16)
nn.quantize(model, group_size=64, bits=4)
quantized = [m for _, m in model.named_modules() if isinstance(m, nn.QuantizedLinear)]
compared, differ = 0, []
for m in quantized:
    width = m.weight.shape[1] * 32 // m.bits
    if width % 512:
        continue
    for dtype in (mx.bfloat16, mx.float16):
        for B in (1, 2, 3):
            for L in range(2, block + 1):
                x = mx.random.normal((B, L, width)).astype(dtype)
                a, b = qv.singleton_quantized_linear(m, x), qv.exact_quantized_linear(m, x)
                compared += 1
                if not mx.array_equal(a, b).item():
                    differ.append([width, str(dtype), B, L])
out["compared"], out["differ"] = compared, differ
""",
    )
    assert got["float_none"], got
    assert any(w % 512 == 0 for w in got["widths"]), got  # the guard's branch is reachable
    assert got["compared"] > 0 and got["differ"] == [], got
