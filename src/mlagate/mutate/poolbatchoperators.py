"""pool_batch_guard: the batch guards of a sparse indexer's pool reuse dropped, in the batch form
of the module's pool cache (mlx-vlm 0.7.10: `BatchPoolingCache`), found with `ast` only.

mlx-vlm 0.6.17's glm5_next reused its pool at a decode step only when "the cache has a pool,
there is no padding, and the batch shape matches" (`_pool is not None and _no_pad and
_pool[0].shape[0] == B`). The patched arms keep no such pool: mlx-vlm 0.7.10 keeps each row's
pools in a batch pool cache, which enforces the same three terms per row; mlx-lm 0.32.2's
deepseek_v32 keeps no pool at all. The terms, as the batch pool cache spells them:

- no padding: a row's logical tokens start after its left padding (`starts = [min(pad, L) for
  pad in self.left_padding]`); the start made `0`, so padding is pooled as tokens;
- batch shape: the metadata's batch-size check (`if not (len(self.left_padding) == ... == B):
  raise`) made `if False:`, and in `filter` (a row leaving the batch) each statement that keeps
  a state or per-row count with its row (`self.pooled = self.pooled[batch_indices]`,
  `self._pool_lengths = [self._pool_lengths[i] for i in idx_list]`) made `pass`;
- has a pool: a test of whether the pool exists (`if self.pooled is None:`) made to always
  find one (`False`; `is not None` made `True`).

The batch form is the class of the same file that the pool class's `merge` hands its caches to
(`return BatchPoolingCache.merge(caches, prefix_lens)`). Only its methods the indexer calls on
a cache it is handed (`pool_cache.accumulate_windows`, `update_and_fetch`) and `filter` (what
a batch generator calls when a request finishes) are edited. The pool length (the selection
bounded by the pools there are) is pool_guard_drop's.
"""

from __future__ import annotations

import ast

from mlagate.mutate import poolsites
from mlagate.mutate.edits import _Builder, _Edit, _segment
from mlagate.mutate.servingoperators import BATCH_NAMES, _says_padding

OPERATOR = {
    "pool_batch_guard": "a batch pool cache's reuse guard dropped: padding pooled as tokens, "
    "the batch shape not checked or not kept by filter, a missing pool taken as present",
}
FILTER = "filter"


def pool_batch_mutants(b: _Builder, module: str, found: poolsites.PoolSites, done: set) -> None:
    """A batch pool class shared by several modules is mutated once per arm."""
    called = _indexer_calls(found.indexers)
    for pool in found.pools:
        batch = batch_form(pool)
        if batch is None or batch.key in done:
            continue
        done.add(batch.key)
        text = batch.path.read_text(encoding="utf-8")
        for fn in batch.node.body:
            if isinstance(fn, ast.FunctionDef) and (fn.name in called or fn.name == FILTER):
                _edit_method(b, module, batch, text, fn)


def batch_form(pool: poolsites.ClassRef) -> poolsites.ClassRef | None:
    """The class of pool's file that its `merge` hands the caches to (`Batch*.merge(...)`)."""
    merge = pool.method("merge")
    if merge is None:
        return None
    tree = ast.parse(pool.path.read_text(encoding="utf-8"))
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for node in ast.walk(merge):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in classes
            and node.value.id.startswith("Batch")
        ):
            return poolsites.ClassRef(pool.path, classes[node.value.id])
    return None


def _indexer_calls(indexers: list[poolsites.ClassRef]) -> set[str]:
    """Method names the indexer classes call on a name that says cache (`pool_cache.x(...)`)."""
    out = set()
    for ref in indexers:
        for node in ast.walk(ref.node):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and "cache" in node.func.value.id.lower()
            ):
                out.add(node.func.attr)
    return out


def _edit_method(b: _Builder, module: str, ref, text: str, fn: ast.FunctionDef) -> None:
    where = f"{ref.node.name}.{fn.name}"

    def add(node: ast.AST, new: str) -> None:
        b.add("pool_batch_guard", module, ref.path, where, text, [_Edit(node, new)], node)

    for node in ast.walk(fn):
        if isinstance(node, ast.ListComp) and _padding_start(node):
            add(node.elt, "0")
        elif isinstance(node, ast.If) and _batch_check(node):
            add(node.test, "False")
        elif isinstance(node, ast.If) and _pool_test(node.test) is not None:
            add(node.test, _pool_test(node.test))
        elif fn.name == FILTER and _keeps_row(text, node):
            add(node, "pass")


def _padding_start(comp: ast.ListComp) -> bool:
    """`[min(pad, L) for pad in self.left_padding]`: a row's first logical token."""
    gen = comp.generators[0]
    elt = comp.elt
    return (
        _says_padding(gen.iter)
        and isinstance(elt, ast.Call)
        and isinstance(elt.func, ast.Name)
        and elt.func.id == "min"
        and any(isinstance(a, ast.Name) for a in elt.args)
        and {a.id for a in elt.args if isinstance(a, ast.Name)}
        & {n.id for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
        != set()
    )


def _batch_check(node: ast.If) -> bool:
    """`if not (len(...) == ... == B): raise ...`: the batch-size check of the metadata."""
    names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
    return isinstance(node.body[0], ast.Raise) and "len" in names and bool(names & set(BATCH_NAMES))


def _pool_test(test: ast.AST) -> str | None:
    """`self.pooled is None` -> "False", `is not None` -> "True": a missing pool taken as there."""
    if not (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        return None
    attr = poolsites.self_attr(test.left)
    if attr is None or "pool" not in attr:
        return None
    return {ast.Is: "False", ast.IsNot: "True"}.get(type(test.ops[0]))


def _keeps_row(text: str, node: ast.AST) -> bool:
    """`self.x = self.x[batch_indices]` or `self.x = [self.x[i] for i in idx]` in filter."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
        return False
    attr = poolsites.self_attr(node.targets[0])
    return (
        attr is not None
        and any(
            isinstance(n, ast.Subscript) and poolsites.self_attr(n.value) == attr
            for n in ast.walk(node.value)
        )
        and _segment(text, node.targets[0]) != _segment(text, node.value)
    )
