"""pool_batch_guard (mlagate.mutate.poolbatchoperators): the batch pool cache's reuse guards,
found with ast from the attention class through its indexer and make_cache."""

import shutil
import subprocess
from pathlib import Path

from mlagate.mutate import operators

CACHE = """
class KVCache:
    def trim(self, n):
        self.offset -= n


class PoolCache:
    def trim(self, n):
        self.remainder -= n

    @classmethod
    def merge(cls, caches):
        return BatchPoolCache.merge(caches)


class BatchPoolCache:
    def accumulate_windows(self, kv, offset):
        B, L, D = kv.shape
        if not (len(self.left_padding) == len(self.done) == B):
            raise ValueError("metadata must match the batch")
        starts = [min(pad, L) for pad in self.left_padding]
        sizes = [max(pad, L) for pad in self.left_padding]
        return starts, sizes

    def update_and_fetch(self, px):
        if self.pooled is None:
            return px
        if self.buf is None:
            return px
        return self.pooled

    def filter(self, batch_indices):
        idx = list(batch_indices)
        if self.pooled is not None:
            self.pooled = self.pooled[batch_indices]
        self.done = [self.done[i] for i in idx]
        self.ratio = self.ratio

    def extend(self, other):
        if self.pooled is None:
            self.pooled = other.pooled

    def commit_speculation(self, lengths):
        self.done = [d + n for d, n in zip(self.done, lengths)]

    def make_mask(self, n):
        starts = [min(pad, n) for pad in self.left_padding]
        return starts


class CacheList:
    def __init__(self, *caches):
        self.caches = caches

    def trim(self, n):
        for c in self.caches:
            c.trim(n)
"""
ATT = """
from .cache import CacheList, KVCache, PoolCache


class Indexer:
    def __call__(self, x, pool_cache=None):
        ready = pool_cache.accumulate_windows(x, 0)
        return pool_cache.update_and_fetch(ready)


class Att:
    def __init__(self, args):
        self.indexer = Indexer(args)

    def __call__(self, x, cache=None):
        return self.indexer(x, cache[1])


class Model:
    def make_cache(self):
        return [CacheList(KVCache(), PoolCache())]
"""
WHERE = " @ rt/models/cache.py::BatchPoolCache."
EXPECTED = [
    "pool_batch_guard: not (len(self.left_padding) == len(self.done) == B) -> False"
    + WHERE
    + "accumulate_windows",
    "pool_batch_guard: min(pad, L) -> 0" + WHERE + "accumulate_windows",
    "pool_batch_guard: self.pooled is None -> False" + WHERE + "update_and_fetch",
    "pool_batch_guard: self.pooled is not None -> True" + WHERE + "filter",
    "pool_batch_guard: self.done = [self.done[i] for i in idx] -> pass" + WHERE + "filter",
    "pool_batch_guard: self.pooled = self.pooled[batch_indices] -> pass" + WHERE + "filter",
]


def _site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    files = {"rt/__init__.py": "", "rt/models/__init__.py": "", "rt/models/cache.py": CACHE,
             "rt/models/att.py": ATT}  # fmt: skip
    for rel, body in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(body)
    return site


def _generate(site: Path, ops=("pool_batch_guard",)):
    return operators.generate("a", site, "rt/att", "rt.models.att", "Att", list(ops))


def test_pool_batch_guard_finds_the_three_terms_by_ast(tmp_path):
    """The batch form is the class PoolCache.merge hands its caches to; only the methods the
    indexer calls on its pool cache and filter are edited: not the `max` comprehension, not the
    buffer's `is None` (not a pool), not extend or make_mask, not `self.ratio = self.ratio`."""
    site = _site(tmp_path)
    mutants = _generate(site)
    assert sorted(m.id for m in mutants) == sorted(EXPECTED)
    assert {m.module for m in mutants} == {"rt/att"}
    cache = site / "rt" / "models" / "cache.py"
    cache.write_text("# moved\n\n\n" + cache.read_text())
    assert sorted(m.id for m in _generate(site)) == sorted(EXPECTED)  # ids survive moved lines
    for i, m in enumerate(mutants):
        copy = tmp_path / f"m{i}"
        shutil.copytree(site, copy)
        (tmp_path / f"m{i}.patch").write_text(m.patch)
        subprocess.run(["git", "apply", "-p1", str(tmp_path / f"m{i}.patch")], cwd=copy, check=True)
        compile((copy / m.file).read_text(), m.file, "exec")


def test_pool_batch_guard_needs_a_batch_form_and_stays_apart(tmp_path):
    """A pool class without merge has no batch form: no mutant; the other operators make none of
    these; a batch pool class two modules share is mutated once."""
    site = _site(tmp_path)
    assert _generate(site, operators.POOL_OPERATORS + ("pad_drop",)) != []
    assert [m.id for m in _generate(site, ["pool_no_trim"])] == [
        "pool_no_trim: self.caches -> self.caches[:1] @ rt/models/cache.py::CacheList.trim",
        "pool_no_trim: self.remainder -= n -> pass @ rt/models/cache.py::PoolCache.trim",
        "pool_no_trim: self.done = [d + n for d, n in zip(self.done, lengths)] -> pass"
        + WHERE
        + "commit_speculation",  # the batch form's per-row rollback
    ]
    mods = [("rt/att", "rt.models.att", "Att"), ("rt/att2", "rt.models.att", "Att")]
    twice = operators.generate_many("a", site, mods, ["pool_batch_guard"])
    assert [m.module for m in twice] == ["rt/att"] * len(EXPECTED)
    cache = site / "rt" / "models" / "cache.py"
    cache.write_text(cache.read_text().replace("def merge(cls, caches)", "def merged(cls, caches)"))
    assert _generate(site) == []
