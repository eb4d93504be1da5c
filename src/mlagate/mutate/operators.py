"""Domain mutation operators over an MLA dispatch and the helpers its decision calls.

Each mutant is one source edit, kept as a unified diff (a/ b/ paths relative to the arm's
site/, applied with `git apply -p1` like any arm patch). Its id names the operator, the
text before and after and the function holding it, never a line number, so it stays the
same from run to run and can be argued equivalent in matrix.yaml.
"""

from __future__ import annotations

import ast
from pathlib import Path

from mlagate.modulefiles import module_file
from mlagate.mutate import poolsites, sites
from mlagate.mutate.edits import Mutant, _after_segment, _Builder, _Edit, _segment  # noqa: F401
from mlagate.mutate.maskoperators import MASK_OPERATORS, mask_mutants
from mlagate.mutate.poolbatchoperators import OPERATOR as POOL_BATCH
from mlagate.mutate.poolbatchoperators import pool_batch_mutants
from mlagate.mutate.pooloperators import _pool_mutants
from mlagate.mutate.servingoperators import SERVING_OPERATORS, serving_mutants

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
    **MASK_OPERATORS,
    **SERVING_OPERATORS,
    **POOL_BATCH,
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
    mask_done: set[str] = set()
    serving_done: set[str] = set()
    for module, import_path, cls_name in modules:
        path = module_file(Path(site), import_path)
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
        if wanted & set(POOL_BATCH):
            pool_batch_mutants(b, module, poolsites.find(tree, path, cls_name), pool_done)
        if wanted & set(MASK_OPERATORS):
            mask_mutants(b, wanted, module, Path(site), path, mask_done)
        if wanted & set(SERVING_OPERATORS):
            serving_mutants(b, wanted, module, path, serving_done)
    return b.mutants


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
