import importlib
import json
import shutil
import sys
import textwrap

import pytest

from mlagate.worker import probes

STOCK = """
class A:
    def __call__(self, x):
        L = x.shape[1]
        if L == 1:
            q = self.embed_q(q)
        else:
            k = self.embed_q(lat, transpose=False)
            v = self.unembed_out(lat)
        if L == 1:
            out = self.unembed_out(out)
"""

INVERTED = """
class A:
    def __call__(self, x):
        if L > 1:
            k = self.embed_q(lat, False)
            v = self.unembed_out(lat)
        else:
            q = self.embed_q(q)
        if not (L > 1):
            out = self.unembed_out(out)
"""

DECISION = """
class A:
    def __call__(self, x):
        absorbed = L == 1 or L <= max_absorbed_queries(*self._dims, latent_length(lat))
        if absorbed:
            q = self.embed_q(q)
        else:
            k = self.embed_q(lat, transpose=False)
            v = self.unembed_out(lat)
        if absorbed:
            out = self.unembed_out(out)
class B:
    def __call__(self, x):
        if L == 1:
            q = self.embed_q(q)
"""


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (STOCK, [(True, "L == 1"), (True, "L == 1")]),
        (INVERTED, [(False, "L > 1"), (True, "not (L > 1)")]),
        (DECISION, [(True, "absorbed"), (True, "absorbed")]),
    ],
    ids=["stock", "inverted", "one-decision"],
)
def test_guards_are_located_with_their_polarity(source, expected):
    sites = probes.find_guards(textwrap.dedent(source), "A")
    assert [(s.absorbed_when, s.source) for s in sites] == expected


def test_other_classes_and_unrelated_ifs_are_left_alone():
    text = (
        DECISION
        + "\nclass C:\n    def f(self):\n        if L == 1:\n            return self.other(x)\n"
    )
    assert probes.find_guards(text, "C") == []
    assert len(probes.find_guards(text, "B")) == 1


@pytest.mark.parametrize(
    ("ops", "path"),
    [
        (["fold", "unfold"], "absorbed"),
        (["fold", "unfold", "fold", "unfold"], "absorbed"),
        (["expand_k", "expand_v"], "materialised"),
        (["fold", "expand_k", "unfold"], "split"),
        (["expand_k", "expand_v", "unfold"], "split"),
        (["fold"], "split"),
    ],
)
def test_classify_names_a_path_only_when_the_ops_agree(ops, path):
    assert probes.classify(ops) == path


def test_forcing_rule_overrides_only_when_asked():
    rule = probes.Forcing()
    assert rule(0, True, False) is False
    rule.mode = "absorbed"
    assert rule(0, True, False) is True and rule(1, False, True) is False
    rule.mode = "materialised"
    assert rule(0, True, True) is False
    assert rule.decisions == [(0, False), (0, False), (1, False), (0, True)]


# --- guards held in a helper: an import-patching runtime on mlx-lm 0.32.2 (real arm) -------

# Its activate() replaces DeepseekV3Attention.__call__ with helper_call, which hands the
# attention to the module-level attend(): the `if absorbed:` guards live there, and the
# decision is the exact formula with a cache-length floor.
HELPERFIX = """\
import mlx.core as mx
from mlx_lm.models import deepseek_v3
from mlx_lm.models.base import scaled_dot_product_attention

MIN_CACHE_LENGTH = 1024


def latent_length(kv_latent):
    return kv_latent.shape[-2]


def absorbs(L, r, d, cache_len):
    if cache_len < MIN_CACHE_LENGTH:
        return False
    return 2 * r <= d or L * (r * d + (2 * r - d) * cache_len) < r * d * cache_len


def attend(attn, q_nope, kv_latent, pe_scores, cache, absorbed):
    if absorbed:
        q_nope = attn.embed_q(q_nope)
        k = v = kv_latent
    else:
        k = attn.embed_q(kv_latent, transpose=False)
        v = attn.unembed_out(kv_latent)
    output = scaled_dot_product_attention(
        q_nope, k, v, cache=cache, scale=attn.scale, mask=pe_scores
    )
    if absorbed:
        output = attn.unembed_out(output)
    return output


def helper_call(self, x, mask=None, cache=None):
    B, L, D = x.shape
    if self.q_lora_rank is None:
        q = self.q_proj(x)
    else:
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
    q = q.reshape(B, L, self.num_heads, self.q_head_dim).transpose(0, 2, 1, 3)
    q_nope, q_pe = mx.split(q, [self.qk_nope_head_dim], axis=-1)
    compressed_kv = self.kv_a_proj_with_mqa(x)
    compressed_kv, k_pe = mx.split(compressed_kv, [self.kv_lora_rank], axis=-1)
    k_pe = k_pe.reshape(B, L, 1, self.qk_rope_head_dim).transpose(0, 2, 1, 3)
    kv_latent = self.kv_a_layernorm(compressed_kv)
    offset = cache.offset if cache is not None else 0
    q_pe = self.rope(q_pe, offset)
    k_pe = self.rope(k_pe, offset)
    kv_latent = mx.expand_dims(kv_latent, axis=1)
    if cache is not None:
        kv_latent, k_pe = cache.update_and_fetch(kv_latent, k_pe)
    d = self.qk_nope_head_dim + self.v_head_dim
    absorbed = L == 1 or absorbs(L, self.kv_lora_rank, d, latent_length(kv_latent))
    pe_scores = (q_pe * self.scale) @ k_pe.swapaxes(-1, -2)
    if mask is not None:
        pe_scores = mx.where(
            mask, pe_scores, mx.array(mx.finfo(pe_scores.dtype).min, pe_scores.dtype)
        )
    output = attend(self, q_nope, kv_latent, pe_scores, cache, absorbed)
    output = output.transpose(0, 2, 1, 3).reshape(B, L, -1)
    return self.o_proj(output)


def activate():
    deepseek_v3.DeepseekV3Attention.__call__ = helper_call
"""

HELPERFIX_ARM = """\
  helperfix:  # replaces the stock __call__ with one whose guards live in a helper
    runtime: mlx-lm
    pypi: mlx-lm==0.32.2
    role: patched
    activate: {module: helperfix, function: activate, install: [helperfix]}
"""


@pytest.mark.arms
def test_guards_in_a_helper_the_replaced_call_hands_the_attention_to_are_forced(
    tmp_path, real_cache
):
    from .conftest import ROOT, cli

    (tmp_path / "helperfix").mkdir()
    (tmp_path / "helperfix" / "__init__.py").write_text(HELPERFIX)
    shutil.copytree(ROOT / "patches", tmp_path / "patches")
    text = (ROOT / "matrix.yaml").read_text()
    head, sep, rest = text.partition("\narms:")
    end = rest.index("\n") + 1
    (tmp_path / "matrix.yaml").write_text(head + sep + rest[:end] + HELPERFIX_ARM + rest[end:])
    out = tmp_path / "out"
    proc = cli(
        "run", "--matrix", tmp_path / "matrix.yaml", "--module", "mlx-lm/deepseek_v3",
        "--suite", "probes", "--arm", "helperfix", "-n", "1", "--out", out,
        cwd=tmp_path, cache=real_cache,
    )  # fmt: skip
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    rows = [r for r in rows if r["evidence"] == "synthetic"]
    assert len(rows) == 2, proc.stderr[-3000:]  # deepseek-v3 and moonlight-16b
    for r in rows:
        assert r["verdict"] == "pass", (r["reason"], proc.stderr[-2000:])
        guards = r["metrics"]["guards"]
        assert [(g["source"], g["function"]) for g in guards] == [("absorbed", "attend")] * 2
        assert all(g["file"].endswith("helperfix/__init__.py") for g in guards)
        # the counters saw each forced path (the floor keeps L = 2 materialised naturally)
        assert r["metrics"]["forced"] == {"absorbed": "absorbed", "materialised": "materialised"}
        assert r["metrics"]["paths"]["L=2,T=0"] == "materialised"


# --- the same, fast: plain Python classes through the worker's own load_forced ---------------

ATTN = """\
class A:
    def __init__(self):
        self.ops = []

    def embed_q(self, q, transpose=True):
        self.ops.append("fold" if transpose else "expand_k")
        return q

    def unembed_out(self, out):
        self.ops.append("unfold" if out == "out" else "expand_v")
        return out

    def __call__(self, x):
        return x
"""
FIX = """\
from helperpkg import attn


def attend(layer, lat, absorbed):
    if absorbed:
        layer.embed_q("q")
    else:
        layer.embed_q(lat, transpose=False)
        layer.unembed_out(lat)
    if absorbed:
        layer.unembed_out("out")


def plain(layer, lat, absorbed):
    layer.embed_q("q")
    layer.unembed_out("out")


def call(self, x):
    return {helper}(self, "lat", x > 1)


attn.A.__call__ = call
"""


@pytest.fixture
def helperpkg(tmp_path, monkeypatch):
    """A fresh package helperpkg under tmp_path, importable for one test."""
    pkg = tmp_path / "helperpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield pkg
    for name in [m for m in sys.modules if m.startswith("helperpkg")]:
        del sys.modules[name]


def _load(pkg, helper: str):
    (pkg / "attn.py").write_text(ATTN)
    (pkg / "fix.py").write_text(FIX.format(helper=helper))
    importlib.import_module("helperpkg.fix")  # the activation
    return probes.load_forced("helperpkg.attn", "A")


def test_guards_in_a_helper_are_forced_and_named(helperpkg):
    module, forcing = _load(helperpkg, "attend")
    assert [(s.source, s.function, s.absorbed_when) for s in forcing.sites] == [
        ("absorbed", "attend", True),
        ("absorbed", "attend", True),
    ]
    assert forcing.where() == (
        "helperpkg.attn.A, its __call__ replaced by helperpkg.fix.call, "
        "helperpkg.fix.attend it calls"
    )
    layer = module.A()
    layer(1)  # natural: x > 1 is false, materialised
    forcing.mode = "absorbed"
    layer(1)
    forcing.mode = "materialised"
    layer(5)
    assert layer.ops == ["expand_k", "expand_v", "fold", "unfold", "expand_k", "expand_v"]


def test_a_helper_without_guards_leaves_it_unforceable_and_says_where_it_looked(helperpkg):
    _, forcing = _load(helperpkg, "plain")
    assert forcing.sites == []
    assert "helperpkg.fix.call" in forcing.where()
    assert "helperpkg.fix.plain it calls" in forcing.where()


def test_guards_in_a_helper_of_the_class_s_own_module_are_forced(helperpkg):
    own = ATTN.replace("return x", 'return attend(self, "lat", x > 1)') + FIX.split("\n\n\n")[1]
    (helperpkg / "own.py").write_text(own)
    module, forcing = probes.load_forced("helperpkg.own", "A")
    assert [s.function for s in forcing.sites] == ["attend", "attend"]
    assert forcing.where() == "helperpkg.own.A, helperpkg.own.attend it calls"
    layer = module.A()
    forcing.mode = "absorbed"
    layer(1)
    assert layer.ops == ["fold", "unfold"]
