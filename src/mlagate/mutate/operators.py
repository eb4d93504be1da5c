"""Domain mutation operators over an MLA dispatch and the helpers its decision calls.

Each mutant is one source edit, kept as a unified diff (a/ b/ paths relative to the arm's
site/, applied with `git apply -p1` like any arm patch). Its id names the operator, the
text before and after and the function holding it, never a line number, so it stays the
same from run to run and can be argued equivalent in matrix.yaml.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass
from pathlib import Path

from mlagate.mutate import poolsites, sites

OPERATORS = {
    "boundary": "relational boundary on the absorbed-path decision (< and <= swapped, or ==)",
    "off_by_one": "the threshold one lower or one higher (L + 1 or L - 1 where the decision "
    "compares L)",
    "drop_cache": "the cache length dropped from a cache-aware formula (its asymptotic form)",
    "revert_fold": "the query-fold guard reverted to L == 1 (the two guards decide differently)",
    "revert_unfold": "the output-unfold guard reverted to L == 1 (the two guards decide "
    "differently)",
    "wrong_axis": "the decision reads the batch axis instead of the query length",
    "topk_widen": "a sparse indexer's single-query top-k gather widened to L <= k (every query "
    "given query 0's selection)",
    "pool_guard_drop": "a sparse indexer's pool-length guard dropped (top-k past the pool)",
    "pool_no_trim": "a sparse indexer's pool not rolled back when a rejection trims the cache",
}
POOL_OPERATORS = ("pool_guard_drop", "pool_no_trim")
_OPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "=="}
_SWAPS = {
    "<": ("<=", "=="),
    "<=": ("<", "=="),
    ">": (">=", "=="),
    ">=": (">", "=="),
    "==": ("<=", ">="),
}


@dataclass
class Mutant:
    id: str
    operator: str
    arm: str
    module: str  # the matrix module whose cases run it
    file: str  # path under site/, posix
    where: str  # function holding the edit
    before: str
    after: str
    patch: str  # unified diff

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class _Edit:
    node: ast.AST
    text: str


def _offsets(text: str) -> list[int]:
    """Byte offset of each line start (ast columns are UTF-8 byte offsets)."""
    starts, pos = [0], 0
    for line in text.encode("utf-8").splitlines(keepends=True):
        pos += len(line)
        starts.append(pos)
    return starts


def _apply(text: str, edits: list[_Edit]) -> str:
    data, starts = text.encode("utf-8"), _offsets(text)
    for start, end, new in sorted(((*_span(starts, e.node), e.text) for e in edits), reverse=True):
        data = data[:start] + new.encode("utf-8") + data[end:]
    return data.decode("utf-8")


def _segment(text: str, node: ast.AST) -> str:
    return " ".join((ast.get_source_segment(text, node) or ast.unparse(node)).split())


class _Builder:
    """Collects the mutants of one arm; ids stay unique (#2, #3 for repeats)."""

    def __init__(self, arm: str, site: Path):
        self.arm, self.site = arm, site
        self.mutants: list[Mutant] = []
        self._seen: dict[str, int] = {}

    def add(
        self,
        operator: str,
        module: str,
        path: Path,
        where: str,
        text: str,
        edits: list[_Edit],
        node: ast.AST,
    ) -> None:
        after_text = _apply(text, edits)
        if after_text == text:
            return
        rel = path.relative_to(self.site).as_posix()
        before = _segment(text, node)
        after = " ".join(_after_segment(text, edits, node).split())
        base = f"{operator}: {before} -> {after} @ {rel}::{where}"
        self._seen[base] = self._seen.get(base, 0) + 1
        mid = base if self._seen[base] == 1 else f"{base} #{self._seen[base]}"
        diff = "".join(
            difflib.unified_diff(
                text.splitlines(keepends=True),
                after_text.splitlines(keepends=True),
                f"a/{rel}",
                f"b/{rel}",
                n=3,
            )
        )
        self.mutants.append(
            Mutant(mid, operator, self.arm, module, rel, where, before, after, diff)
        )


def _span(starts: list[int], node: ast.AST) -> tuple[int, int]:
    return starts[node.lineno - 1] + node.col_offset, starts[
        node.end_lineno - 1
    ] + node.end_col_offset


def _after_segment(text: str, edits: list[_Edit], node: ast.AST) -> str:
    """node's source with the edits inside it applied."""
    data, starts = text.encode("utf-8"), _offsets(text)
    lo, hi = _span(starts, node)
    seg = data[lo:hi]
    for e in sorted(edits, key=lambda e: _span(starts, e.node), reverse=True):
        s, t = _span(starts, e.node)
        if lo <= s and t <= hi:
            seg = seg[: s - lo] + e.text.encode("utf-8") + seg[t - lo :]
    return seg.decode("utf-8")


def _compares(node: ast.AST, names: set[str]):
    for c in ast.walk(node):
        if (
            isinstance(c, ast.Compare)
            and len(c.ops) == 1
            and type(c.ops[0]) in _OPS
            and sites.length_names(c, names)
        ):
            yield c


def _boundary(
    b: _Builder, module: str, path: Path, where: str, text: str, node: ast.AST, names: set[str]
) -> None:
    for c in _compares(node, names):
        left, right = _segment(text, c.left), _segment(text, c.comparators[0])
        for op in _SWAPS[_OPS[type(c.ops[0])]]:
            b.add("boundary", module, path, where, text, [_Edit(c, f"{left} {op} {right}")], c)


def _off_by_one(
    b: _Builder, module: str, path: Path, where: str, text: str, node: ast.AST, names: set[str]
) -> None:
    for c in _compares(node, names):
        if isinstance(c.comparators[0], ast.Constant) or isinstance(c.left, ast.Constant):
            continue  # L == 1: the single-query short-cut, not a threshold
        name = sites.length_names(c, names)[0]
        for sign in ("+", "-"):
            b.add(
                "off_by_one", module, path, where, text, [_Edit(name, f"({name.id} {sign} 1)")], c
            )


def generate(
    arm: str, site: Path, module: str, import_path: str, cls_name: str, operators=None
) -> list[Mutant]:
    """The mutants of one module's dispatch in an installed arm (site/), and of its helpers."""
    return generate_many(arm, site, [(module, import_path, cls_name)], operators)


def generate_many(
    arm: str, site: Path, modules: list[tuple[str, str, str]], operators=None
) -> list[Mutant]:
    """Mutants of several modules of one arm; a helper's mutants are made once, run with the
    first module whose decision calls it."""
    wanted = set(operators or OPERATORS)
    b = _Builder(arm, Path(site))
    helper_done: set[tuple[str, str]] = set()
    pool_done: set[tuple[str, str, str]] = set()
    for module, import_path, cls_name in modules:
        path = _module_file(Path(site), import_path)
        if path is None:
            continue
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        for d in sites.dispatches(tree, cls_name):
            _module_mutants(b, wanted, module, path, text, d)
            for h in sites.helpers(tree, path, d):
                _drop_cache(b, wanted, module, h, path, text, d)
                key = (str(h.path), h.fn.name)
                if key not in helper_done:
                    helper_done.add(key)
                    _helper_mutants(b, wanted, module, h)
        if wanted & set(POOL_OPERATORS):
            _pool_mutants(b, wanted, module, poolsites.find(tree, path, cls_name), pool_done)
    return b.mutants


def _module_file(site: Path, import_path: str) -> Path | None:
    base = site.joinpath(*import_path.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_mutants(
    b: _Builder, wanted: set[str], module: str, path: Path, text: str, d: sites.Dispatch
) -> None:
    where, names = d.qualname, d.lengths
    if "boundary" in wanted:
        _boundary(b, module, path, where, text, d.decision, names)
    if "off_by_one" in wanted:
        _off_by_one(b, module, path, where, text, d.decision, names)
    found = sites.length_names(d.decision, names)
    length = found[0].id if found else next(iter(sorted(names)), None)
    for g in d.guards:
        op = f"revert_{g.role}"
        if op in wanted and length and not isinstance(g.node.test, ast.Compare):
            b.add(
                op, module, path, where, text, [_Edit(g.node.test, f"{length} == 1")], g.node.test
            )
    if "topk_widen" in wanted:
        _topk_widen(b, module, path, text, d)
    if "wrong_axis" in wanted and found and all(n.id in d.length_base for n in found):
        edits = [_Edit(n, f"{d.length_base[n.id]}.shape[0]") for n in found]
        b.add("wrong_axis", module, path, where, text, edits, d.decision)


def _topk_widen(b: _Builder, module: str, path: Path, text: str, d: sites.Dispatch) -> None:
    """`if L == 1:` around a gather of query 0's selection (`topk_indices[:, :, 0]`) made
    `if L <= topk_indices.shape[-1]:`, the top-k count of that selection."""
    for stmt in sites.statements(d.fn):
        test = getattr(stmt, "test", None)
        if not (isinstance(stmt, ast.If) and isinstance(test, ast.Compare) and len(test.ops) == 1):
            continue
        single = (
            isinstance(test.ops[0], ast.Eq)
            and isinstance(test.left, ast.Name)
            and test.left.id in d.lengths
        )
        selection = _selection(stmt.body)
        if single and _const(test.comparators[0]) == 1 and selection:
            b.add(
                "topk_widen",
                module,
                path,
                d.qualname,
                text,
                [_Edit(test, f"{test.left.id} <= {selection}.shape[-1]")],
                test,
            )


def _selection(stmts) -> str | None:
    """The name of a top-k selection subscripted in stmts (`topk_indices[...]`)."""
    for stmt in stmts:
        for n in ast.walk(stmt):
            if (
                isinstance(n, ast.Subscript)
                and isinstance(n.value, ast.Name)
                and "topk" in n.value.id
            ):
                return n.value.id
    return None


def _const(node) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def _drop_cache(
    b: _Builder,
    wanted: set[str],
    module: str,
    h: sites.Helper,
    path: Path,
    text: str,
    d: sites.Dispatch,
) -> None:
    if "drop_cache" in wanted and h.cache_param:
        arg = _cache_argument(h)
        if arg is not None and not (isinstance(arg, ast.Constant) and arg.value is None):
            b.add("drop_cache", module, path, d.qualname, text, [_Edit(arg, "None")], h.call)


def _helper_mutants(b: _Builder, wanted: set[str], module: str, h: sites.Helper) -> None:
    if h.length_param is None:
        return
    htext = h.path.read_text(encoding="utf-8")
    fn = next(
        n for n in ast.parse(htext).body if isinstance(n, ast.FunctionDef) and n.name == h.fn.name
    )
    names = {h.length_param}
    if "boundary" in wanted:
        _boundary(b, module, h.path, fn.name, htext, fn, names)
    if "off_by_one" in wanted:
        _off_by_one(b, module, h.path, fn.name, htext, fn, names)


def _cache_argument(h: sites.Helper) -> ast.expr | None:
    for kw in h.call.keywords:
        if kw.arg == h.cache_param:
            return kw.value
    params = [a.arg for a in h.fn.args.posonlyargs + h.fn.args.args]
    if any(isinstance(a, ast.Starred) for a in h.call.args):
        # *dims fills the leading parameters: the cache length is the last positional argument
        last = h.call.args[-1]
        return None if isinstance(last, ast.Starred) or params[-1] != h.cache_param else last
    idx = params.index(h.cache_param)
    return h.call.args[idx] if idx < len(h.call.args) else None


# --- the sparse indexer's pool: its length guard and its rollback ---------------------------


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
