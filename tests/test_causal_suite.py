"""The causal suite is shown able to fail: over the fake sparse-indexer runtime (tests/fixtures/
fakepool-tree, top-k 8, pools of 4) the correct module passes on all three paths; a planted
short-context mask (below the top-k every cached key is selected, later tokens of a wide step
too) fails it and passes pool_equivalence, which primes past the top-k; a planted dropped first
key (wide steps and decoding alike) is seen by the short-context mask check. The mask operators
of `mlagate mutate` are found with ast and killed by the suite."""

import json
import shutil
import subprocess

import pytest

from mlagate.mutate import killmatrix, operators

from .conftest import FIXTURES, ROOT, cli

MATRIX = FIXTURES / "fake-causal.yaml"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("causal")
    cache = tmp_path_factory.mktemp("cache")
    args = ["run", "--matrix", MATRIX, "--out", out, "--suite", "causal"]
    proc = cli(*args, "--suite", "pool_equivalence", cache=cache)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    return {(r["suite"], r["module"]): r for r in rows}


def test_the_correct_module_passes_on_every_path(run):
    good = run[("causal", "fake/pooled")]
    assert good["verdict"] == "pass", good["reason"]
    cases = good["metrics"]["cases"]
    assert set(cases) == {
        f"{check}/{path}"
        for check in ("causality", "prefill_decode")
        for path in ("natural", "absorbed", "materialised")
    }
    assert all(c["pairs"] > 0 and c["broken"] == 0 for c in cases.values())
    assert good["metrics"]["shape"]["verify_caches"] == [3, 11]  # below and past the top-k 8


def test_a_short_context_mask_that_sees_later_tokens_fails_and_names_where(run):
    bad = run[("causal", "fake/shortmask")]
    assert bad["verdict"] == "fail"
    reason = bad["reason"]
    assert (
        "changing token 1 changed the logits at position 0" in reason and "path=natural" in reason
    )
    assert "T=0" in reason and "prefill-vs-decode" in reason
    assert bad["failure"]["kinds"] == ["causality_broken", "prefill_decode_mismatch"]
    rep = bad["metrics"]["reproducers"][0]
    assert rep["check"] == "causality" and rep["j"] == 1 and rep["T"] == 0 and "replay" in rep
    verify = [k for k in bad["metrics"]["cases"] if k.startswith("causality/")]
    assert all(bad["metrics"]["cases"][k]["broken"] for k in verify)
    blind = run[("pool_equivalence", "fake/shortmask")]
    assert blind["verdict"] == "pass", "past the top-k the planted module is the correct one"


def test_a_dropped_first_key_below_the_top_k_is_seen_by_the_short_context_check(run):
    bad = run[("causal", "fake/dropfirst")]
    assert bad["verdict"] == "fail"
    assert "(below the top-k 8) does not select keys [0]" in bad["reason"]
    assert bad["failure"]["kind"] == "sparse_mask_not_causal"
    assert bad["metrics"]["cases"]["causality/natural"]["broken"] == 0  # nothing later moves it


# --- the mask operators -----------------------------------------------------------------------

BASE = """
import mlx.core as mx


def create_causal_mask(N, offset=0, window_size=None):
    rinds = mx.arange(offset + N)
    linds = mx.arange(offset, offset + N)
    mask = linds[:, None] >= rinds[None]
    if window_size is not None:
        mask = mask & (linds[:, None] < rinds[None] + window_size)
    return mask


def create_attention_mask(h, cache=None):
    return cache.make_mask(h.shape[1])


def unrelated(x, y):
    causal = x < y
    return causal
"""
CACHE = """
from .base import create_causal_mask


def create_attention_mask(N, offset, window_size=None):
    if window_size is not None:
        return create_causal_mask(N, offset, window_size=window_size)
    return create_causal_mask(N, offset)


class KVCache:
    def make_mask(self, N):
        return create_attention_mask(N, offset=self.offset)


class RotatingKVCache:
    def make_mask(self, N):
        return create_attention_mask(N, offset=self.offset)
"""
MODULE = """
import mlx.core as mx

from .base import create_attention_mask


class A:
    def __call__(self, x, mask=None, cache=None, padding_mask=None):
        if isinstance(mask, str):
            mask = None
        sparse_mask = self.indexer(x, mask, padding_mask)
        if mask is not None:
            sparse_mask = sparse_mask & mask
        scores = mx.where(sparse_mask, x, -1e9)
        return self.sdpa(scores, mask=sparse_mask, scale=None)


class Model:
    def __call__(self, h, cache=None):
        mask = create_attention_mask(h, cache)
        return self.layer(h, mask, cache)
"""


def _site(tmp_path):
    site = tmp_path / "site"
    for rel, body in {
        "rt/__init__.py": "",
        "rt/models/__init__.py": "",
        "rt/models/base.py": BASE,
        "rt/models/cache.py": CACHE,
        "rt/models/a.py": MODULE,
        "rt/models/b.py": MODULE.replace("class A", "class B"),
    }.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(body)
    return site


def test_mask_operators_find_every_site_by_ast(tmp_path):
    site = _site(tmp_path)
    mods = [("rt/a", "rt.models.a", "A"), ("rt/b", "rt.models.b", "B")]
    mutants = operators.generate_many("p", site, mods, list(operators.MASK_OPERATORS))
    ids = [m.id for m in mutants if m.module == "rt/a"]
    assert "mask_drop_term: sparse_mask & mask -> mask @ rt/models/a.py::A.__call__" in ids
    assert "mask_drop_term: sparse_mask & mask -> sparse_mask @ rt/models/a.py::A.__call__" in ids
    assert (
        "mask_none: self.indexer(x, mask, padding_mask) -> self.indexer(x, None, padding_mask) @ "
        "rt/models/a.py::A.__call__" in ids
    )
    assert any(i.startswith("mask_none: self.sdpa(scores, mask=sparse_mask") for i in ids)
    assert any(i.startswith("mask_none: self.layer(h, mask, cache)") for i in ids)
    assert not any("mx.where(None" in m.after for m in mutants)  # an array op, not a handed mask
    assert (
        "mask_compare: linds[:, None] >= rinds[None] -> linds[:, None] > rinds[None] @ "
        "rt/models/base.py::create_causal_mask" in ids
    )
    offsets = [i for i in ids if i.startswith("mask_offset")]
    assert len([i for i in offsets if "base.py::create_causal_mask" in i]) == 6  # 3 uses x +-1
    # the window branch's call is left alone: only the plain call's offset, shifted both ways
    assert len([i for i in offsets if "cache.py::create_attention_mask" in i]) == 2
    assert not any("isinstance(None" in m.after for m in mutants)  # a builtin reads the mask
    assert not any("self.indexer(x, mask, None)" in m.after for m in mutants)  # padding
    assert any(
        "self.offset -> (self.offset + 1) @ rt/models/cache.py::KVCache.make_mask" in i
        for i in offsets
    )
    assert not any("RotatingKVCache" in i or "window_size" in i for i in ids)
    assert not any("unrelated" in i for i in ids)  # a function that does not say mask
    # the shared helper files are mutated once, with the first module; b's own file has its own
    assert {m.file for m in mutants if m.module == "rt/b"} == {"rt/models/b.py"}
    for i, m in enumerate(mutants):  # each patch applies and compiles
        copy = tmp_path / f"m{i}"
        shutil.copytree(site, copy)
        (tmp_path / f"m{i}.patch").write_text(m.patch)
        subprocess.run(["git", "apply", "-p1", str(tmp_path / f"m{i}.patch")], cwd=copy, check=True)
        compile((copy / m.file).read_text(), m.file, "exec")
    (site / "rt/models/a.py").write_text("# shifted\n\n" + MODULE)
    again = operators.generate_many("p", site, mods, list(operators.MASK_OPERATORS))
    assert [m.id for m in again] == [m.id for m in mutants]  # no line numbers in the ids


VALIDITY = """
import mlx.core as mx


def select(pool_valid, ends, positions, scores):
    candidates = pool_valid[:, None] & (ends[:, None] <= positions[None])
    return mx.where(candidates, scores, -1e9)


class C:
    def validate_speculation(self, n):
        ok = n < self.size
        return ok

    def __call__(self, idx, n):
        valid = (idx >= 0) & (idx < n)
        valid_lengths = idx < n
        return self.sdpa(idx, mask=valid[:, None]), valid_lengths


class MoE:
    def __call__(self, topk_indices):
        mask = topk_indices >= self.n_routed_experts
        return mx.where(mask, 0, topk_indices)
"""


def test_validity_arrays_and_where_conditions_are_masks(tmp_path):
    """glm5_next's masks are called valid / pool_valid, or are only handed to mx.where as its
    condition (candidates); validate_* and valid_lengths are not masks, nor is a MoE routing
    mask (a term that names experts)."""
    site = _site(tmp_path)
    (site / "rt/models/c.py").write_text(VALIDITY)
    mutants = operators.generate_many(
        "p", site, [("rt/c", "rt.models.c", "C")], list(operators.MASK_OPERATORS)
    )
    ids = {m.id for m in mutants if m.file == "rt/models/c.py"}
    assert ids == {
        "mask_drop_term: pool_valid[:, None] & (ends[:, None] <= positions[None]) -> "
        "ends[:, None] <= positions[None] @ rt/models/c.py::select",
        "mask_drop_term: pool_valid[:, None] & (ends[:, None] <= positions[None]) -> "
        "pool_valid[:, None] @ rt/models/c.py::select",
        "mask_compare: ends[:, None] <= positions[None] -> ends[:, None] < positions[None] @ "
        "rt/models/c.py::select",
        "mask_drop_term: (idx >= 0) & (idx < n) -> idx < n @ rt/models/c.py::C.__call__",
        "mask_drop_term: (idx >= 0) & (idx < n) -> idx >= 0 @ rt/models/c.py::C.__call__",
        "mask_compare: idx >= 0 -> idx > 0 @ rt/models/c.py::C.__call__",
        "mask_compare: idx < n -> idx <= n @ rt/models/c.py::C.__call__",
        "mask_none: self.sdpa(idx, mask=valid[:, None]) -> self.sdpa(idx, mask=None) @ "
        "rt/models/c.py::C.__call__",
    }


@pytest.mark.mutate
def test_the_causal_suite_kills_the_fake_runtimes_mask_mutant(tmp_path):
    """pooled.py's mask comparisons: a pool window is `visible` once complete (`<=` made `<`
    hides a query's own window in the step it completes), and a token is `chosen` only inside a
    complete window (`tok < P * kpool` made `<=`: a condition of mx.where, so a mask): the
    causal suite kills both."""
    out = tmp_path / "out"
    proc = cli(
        "mutate",
        "--matrix",
        FIXTURES / "fake-mask-mutate.yaml",
        *("--operator", "mask_compare", "--out", out, "-n", "1"),
        cache=tmp_path / "cache",
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    doc = killmatrix.load(out / "kill-matrix.json")
    assert doc["complete"] and doc["suites"] == ["causal"]
    ms = doc["mutants"]
    assert sorted(m["before"] for m in ms) == [
        "((mx.arange(P) + 1) * self.kpool)[ None ] <= pos + 1",
        "tok < P * self.kpool",
    ]
    assert all(
        m["operator"] == "mask_compare" and m["status"] == "killed" and m["killed_by"] == ["causal"]
        for m in ms
    )


@pytest.mark.arms
def test_a_real_sparse_module_passes_on_every_path(tmp_path, run_cli, real_cache):
    """mlx-lm 0.32.2 + patch, deepseek_v32: forceable, with an indexer whose top-k (16 at quick
    shapes) the prompt and the longest caches pass."""
    proc = run_cli(
        *("run", "--suite", "causal", "--module", "mlx-lm/deepseek_v32"),
        *("--arm", "mlx-lm-0.32.2-patched", "--out", tmp_path),
        cwd=ROOT,
        cache=real_cache,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    (row,) = [json.loads(p.read_text()) for p in (tmp_path / "results").glob("*.json")]
    assert row["verdict"] == "pass", row["reason"]
    cases = row["metrics"]["cases"]
    assert len(cases) == 6 and all(c["pairs"] and not c["broken"] for c in cases.values())
    assert row["metrics"]["shape"]["caches"] == [0, 15, 35]
