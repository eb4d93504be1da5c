"""The pool operators: a sparse indexer's pool-length guard dropped, and its pool not rolled
back when a rejection trims the cache (places found by mlagate.mutate.poolsites)."""

from __future__ import annotations

import ast

from mlagate.mutate import poolsites
from mlagate.mutate.edits import _Builder, _Edit, _segment
from mlagate.mutate.poolbatchoperators import batch_form


def _pool_mutants(
    b: _Builder, wanted: set[str], module: str, found: poolsites.PoolSites, done: set
) -> None:
    """A class shared by several modules (deepseek_v32's Indexer, the runtime's CacheList) is
    mutated once per arm, run with the first module that uses it."""

    def first(op: str, ref: poolsites.ClassRef) -> bool:
        key = (op, *ref.key)
        if key in done:
            return False
        done.add(key)
        return True

    if "pool_guard_drop" in wanted:
        for ref in found.indexers:
            if first("pool_guard_drop", ref):
                _pool_guard_drop(b, module, ref)
    if "pool_no_trim" not in wanted or not found.positions or 0 in found.positions:
        return
    for ref in found.containers:
        if first("pool_no_trim", ref):
            _container_no_trim(b, module, ref)
    for ref in found.pools:
        if first("pool_no_trim", ref):
            _pool_no_trim(b, module, ref)
        batch = batch_form(ref)  # the pool's batch form rolls back per row
        if batch is not None and first("pool_no_trim", batch):
            _pool_no_trim(b, module, batch)


def _mentions_topk(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Name) and "topk" in n.id.lower())
        or (isinstance(n, ast.Attribute) and "topk" in n.attr.lower())
        for n in ast.walk(node)
    )


def _methods(ref: poolsites.ClassRef):
    for fn in ref.node.body:
        if isinstance(fn, ast.FunctionDef):
            yield fn


def _pool_guard_drop(b: _Builder, module: str, ref: poolsites.ClassRef) -> None:
    """In the indexer class: `if <pool length> <= <top-k>: return ...` (the dense fallback
    while the pool holds no more than top-k keys) made `if False:`, and `min(<top-k>, <pool
    length>)` (the selection bounded by the pool) made `<top-k>`."""
    text = ref.path.read_text(encoding="utf-8")
    for fn in _methods(ref):
        where = f"{ref.node.name}.{fn.name}"
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.If)
                and isinstance(node.test, ast.Compare)
                and len(node.test.ops) == 1
                and isinstance(node.test.ops[0], (ast.Lt, ast.LtE, ast.Gt, ast.GtE))
                and _mentions_topk(node.test.left) != _mentions_topk(node.test.comparators[0])
                and isinstance(node.body[-1], ast.Return)
            ):
                edit = _Edit(node.test, "False")
                b.add("pool_guard_drop", module, ref.path, where, text, [edit], node.test)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "min"
                and len(node.args) == 2
                and not node.keywords
                and _mentions_topk(node.args[0]) != _mentions_topk(node.args[1])
            ):
                topk = next(a for a in node.args if _mentions_topk(a))
                edit = _Edit(node, _segment(text, topk))
                b.add("pool_guard_drop", module, ref.path, where, text, [edit], node)


def _container_no_trim(b: _Builder, module: str, ref: poolsites.ClassRef) -> None:
    """The container's trim (`for c in self.caches: c.trim(n)`) made to roll back only its
    first cache (the attention's latent): the indexer's pool keeps the rejected tokens."""
    fn = ref.method("trim")
    text = ref.path.read_text(encoding="utf-8")
    for node in ast.walk(fn):
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Attribute):
            if isinstance(node.iter.value, ast.Name) and node.iter.value.id == "self":
                edit = _Edit(node.iter, f"{_segment(text, node.iter)}[:1]")
                where = f"{ref.node.name}.trim"
                b.add("pool_no_trim", module, ref.path, where, text, [edit], node.iter)


def _pool_no_trim(b: _Builder, module: str, ref: poolsites.ClassRef) -> None:
    """In the pool's own class, each statement of a rollback method (trim, commit_speculation)
    that cuts or decrements its own state (`self.remainder -= n`, `self.pooled =
    self.pooled[:, :n]`) made `pass`: that part of the pool is not rolled back."""
    text = ref.path.read_text(encoding="utf-8")
    for name in poolsites.ROLLBACK_METHODS:
        fn = ref.method(name)
        if fn is None:
            continue
        for node in ast.walk(fn):
            if _rolls_back(node):
                where = f"{ref.node.name}.{name}"
                b.add("pool_no_trim", module, ref.path, where, text, [_Edit(node, "pass")], node)


def _rolls_back(node: ast.AST) -> bool:
    if isinstance(node, ast.AugAssign):
        return poolsites.self_attr(node.target) is not None
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
        return False
    attr = poolsites.self_attr(node.targets[0])
    return attr is not None and any(poolsites.self_attr(n) == attr for n in ast.walk(node.value))
