"""Where the pool operators go: a sparse indexer's pool-length guard and its pool's rollback.

Found with `ast` from the attention class the matrix registers, never by line number:

- the **indexer class** is the class assigned to `self.indexer` in the attention class, or
  in the nearest base class that assigns one (`self.indexer = HyV4Indexer(config)`,
  `self.indexer = None if shared else Glm5NextIndexer(...)`), followed through relative
  imports into its own file;
- the **pool positions** are the entries of the layer's cache list that the attention passes
  to its indexer (`self.indexer(x, qr, mask, cache=cache[1])`, or a name bound to
  `cache[2]` first); the attention's own latent cache is position 0;
- the **caches** come from the module's `make_cache`: the container call
  (`CacheList(KVCache(), KVCache(), PoolingCache(kpool), ...)`) whose arguments reach the
  pool positions; the container class, and the class of each pool argument, are followed
  through relative imports (or the default of an enclosing function's parameter) into the
  file that defines them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from mlagate.mutate import sites

ROLLBACK_METHODS = ("trim", "commit_speculation")  # what a rejection calls on a cache


@dataclass(frozen=True)
class ClassRef:
    path: Path
    node: ast.ClassDef

    @property
    def key(self) -> tuple[str, str]:
        return str(self.path), self.node.name

    def method(self, name: str) -> ast.FunctionDef | None:
        return next(
            (n for n in self.node.body if isinstance(n, ast.FunctionDef) and n.name == name), None
        )


@dataclass
class PoolSites:
    """The indexer classes and the pool caches of one module's attention class."""

    indexers: list[ClassRef] = field(default_factory=list)
    positions: set[int] = field(default_factory=set)
    containers: list[ClassRef] = field(default_factory=list)  # hold the pool among other caches
    pools: list[ClassRef] = field(default_factory=list)  # a pool's own class, not the latent's


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def resolve_class(tree: ast.Module, path: Path, name: str, depth: int = 0) -> ClassRef | None:
    """The class `name` means in the file `path`: defined there, or brought in by a relative
    `from .x import name` (followed again if that file imports it in turn)."""
    local = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if local is not None:
        return ClassRef(path, local)
    where = sites.imported_from(tree, name, path)
    if where is None or depth > 4:
        return None
    return resolve_class(_parse(where), where, name, depth + 1)


def _chain(cls: ClassRef) -> list[tuple[ClassRef, ast.Module]]:
    """cls and its base classes (first base first), each with the tree of its file."""
    out, seen = [], set()
    todo = [cls]
    while todo:
        ref = todo.pop(0)
        if ref.key in seen:
            continue
        seen.add(ref.key)
        tree = _parse(ref.path)
        out.append((ref, tree))
        for base in ref.node.bases:
            if isinstance(base, ast.Name):
                found = resolve_class(tree, ref.path, base.id)
                if found is not None:
                    todo.append(found)
    return out


def _is_self_attr(node: ast.AST, attr: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == attr
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def self_attr(node: ast.AST) -> str | None:
    """X for `self.X`."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.attr if node.value.id == "self" else None
    return None


def _indexer_classes(ref: ClassRef, tree: ast.Module) -> list[ClassRef]:
    """Classes called in an assignment to self.indexer in this class's own methods."""
    found = []
    for fn in ref.node.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        for stmt in ast.walk(fn):
            if not isinstance(stmt, ast.Assign):
                continue
            if not any(_is_self_attr(t, "indexer") for t in stmt.targets):
                continue
            for call in ast.walk(stmt.value):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
                    cls = resolve_class(tree, ref.path, call.func.id)
                    if cls is not None and cls.key not in {c.key for c in found}:
                        found.append(cls)
    return found


def _cache_index(node: ast.AST) -> int | None:
    """i for `cache[i]` (any name holding 'cache')."""
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and "cache" in node.value.id
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, int)
        and not isinstance(node.slice.value, bool)
    ):
        return node.slice.value
    return None


def _pool_positions(fn: ast.FunctionDef) -> set[int]:
    """Cache-list positions passed to self.indexer(...) in fn, directly or through a name."""
    bound: dict[str, int] = {}
    for stmt in ast.walk(fn):
        if isinstance(stmt, ast.Assign) and (i := _cache_index(stmt.value)) is not None:
            for t in stmt.targets:
                if isinstance(t, ast.Name):
                    bound[t.id] = i
    positions = set()
    for call in ast.walk(fn):
        if not (isinstance(call, ast.Call) and _is_self_attr(call.func, "indexer")):
            continue
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            i = _cache_index(arg)
            if i is None and isinstance(arg, ast.Name):
                i = bound.get(arg.id)
            if i is not None:
                positions.add(i)
    return positions


def _functions_with_scope(tree: ast.Module):
    """Every function of tree with the functions enclosing it (outermost first)."""

    def walk(node, scope):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield child, scope
                yield from walk(child, [*scope, child])
            else:
                yield from walk(child, scope)

    yield from walk(tree, [])


def _param_default(scope: list[ast.FunctionDef], name: str) -> str | None:
    """The class name a parameter of an enclosing function defaults to (`pool_cache=PoolCache`)."""
    for fn in reversed(scope):
        args = fn.args.posonlyargs + fn.args.args
        names = [a.arg for a in args][len(args) - len(fn.args.defaults) :]
        defaults = dict(zip(names, fn.args.defaults, strict=True))
        kw = zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True)
        defaults.update({a.arg: d for a, d in kw if d is not None})
        if isinstance(defaults.get(name), ast.Name):
            return defaults[name].id
    return None


def _called_class(tree, path, scope, node: ast.AST) -> ClassRef | None:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        return None
    name = node.func.id
    cls = resolve_class(tree, path, name)
    if cls is None and (default := _param_default(scope, name)) is not None:
        cls = resolve_class(tree, path, default)
    return cls


def find(tree: ast.Module, path: Path, cls_name: str) -> PoolSites:
    out = PoolSites()
    cls = sites.find_class(tree, cls_name)
    if cls is None:
        return out
    chain = _chain(ClassRef(path, cls))
    for ref, rtree in chain:  # the nearest class that assigns self.indexer decides
        out.indexers = _indexer_classes(ref, rtree)
        if out.indexers:
            break
    for ref, _ in chain:
        for fn in ref.node.body:
            if isinstance(fn, ast.FunctionDef):
                out.positions |= _pool_positions(fn)
    if not out.indexers or not out.positions or 0 in out.positions:
        return out
    need = max(out.positions)
    for fn, scope in _functions_with_scope(tree):
        if fn.name != "make_cache":
            continue
        for call in ast.walk(fn):
            if not (isinstance(call, ast.Call) and len(call.args) > need):
                continue
            container = _called_class(tree, path, [*scope, fn], call)
            if container is None or container.method("trim") is None:
                continue
            if container.key not in {c.key for c in out.containers}:
                out.containers.append(container)
            latent = _called_class(tree, path, [*scope, fn], call.args[0])
            for i in sorted(out.positions):
                pool = _called_class(tree, path, [*scope, fn], call.args[i])
                if pool is None or (latent is not None and pool.key == latent.key):
                    continue
                if pool.key not in {p.key for p in out.pools}:
                    out.pools.append(pool)
    return out
