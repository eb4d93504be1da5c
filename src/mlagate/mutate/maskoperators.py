"""The mask operators: plausible one-line mistakes in an attention mask, found with `ast` in a
module's own file and in the mask helpers it imports (`from .base import
create_attention_mask`: every function of that file whose name says mask), never by line
number.

A **mask expression** is the value assigned to a name that says mask (mask, sparse_mask,
causal, allowed, visible; or validity: a name whose last word is valid, as glm5_next's
`valid`, `pool_valid`), or to a name a function hands `mx.where` as its condition (glm5_next's
`candidates`: the pools a query may select).

- mask_drop_term: one term of a combined mask dropped (`a & b` made `b`, and `a`);
- mask_offset: a mask's offset shifted by one (in a function that says mask: the offset in an
  `arange`, or the one handed to another mask function, made `offset + 1`, and `offset - 1`);
- mask_compare: `<=` and `<` (or `>=` and `>`) swapped in a mask comparison;
- mask_none: no mask passed where one was (`f(x, mask)` made `f(x, None)`, `mask=mask` made
  `mask=None`).

Terms about batch padding or a sliding window (a name that says padding or window, or the body
of an `if` about one) are left alone, as are builtins that only read a mask (`isinstance(mask,
str)`): the gate runs one sequence without a window, so their mutants would be equivalent by
construction. So are MoE routing masks (a term that names experts): not attention masks.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

from mlagate.mutate import sites
from mlagate.mutate.edits import _Builder, _Edit, _segment

MASK_OPERATORS = {
    "mask_drop_term": "one term of a combined attention mask dropped (a & b made b, or a)",
    "mask_offset": "an attention mask's offset shifted by one (offset made offset + 1, or - 1)",
    "mask_compare": "<= and < (or >= and >) swapped in an attention mask's comparison",
    "mask_none": "no mask passed where one was (the argument made None)",
}
MASK_WORDS = ("mask", "causal", "allowed", "visible")
VALIDITY = "valid"  # a name's last word: a validity array (valid, pool_valid), not validate_*
_SWAP = {ast.Lt: "<=", ast.LtE: "<", ast.Gt: ">=", ast.GtE: ">"}


def _says_mask(name: str) -> bool:
    low = name.lower()
    return any(w in low for w in MASK_WORDS) or low.split("_")[-1] == VALIDITY


def _functions(tree: ast.Module):
    """(qualified name, function) of every function of a file, methods included."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef):
                    yield f"{node.name}.{fn.name}", fn


def _mask_values(fn: ast.FunctionDef):
    """The mask expressions of one function."""
    conditions = _where_conditions(fn)
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and (_says_mask(t.id) or t.id in conditions)
            for t in node.targets
        ):
            yield node.value


def _where_conditions(fn: ast.FunctionDef) -> set[str]:
    """Names the function hands `mx.where` as its condition: masks whatever they are called."""
    return {
        n.args[0].id
        for n in ast.walk(fn)
        if isinstance(n, ast.Call)
        and _mx_op(n)
        and n.func.attr == "where"
        and n.args
        and isinstance(n.args[0], ast.Name)
    }


def mask_files(site: Path, path: Path, tree: ast.Module) -> list[tuple[Path, list]]:
    """The module's own file, then each file its relatively imported mask helpers live in
    (with only the functions there that say mask), then the runtime's models/cache.py (its
    module-level mask functions and KVCache.make_mask: the cache a dense module gets)."""
    out = [(path, list(_functions(tree)))]
    cache = _cache_file(path)
    for node in tree.body:
        if not (isinstance(node, ast.ImportFrom) and node.level >= 1):
            continue
        for alias in node.names:
            if not _says_mask(alias.name):
                continue
            other = sites.imported_from(tree, alias.name, path)
            if other is None or other == path or any(other == p for p, _ in out):
                continue
            fns = [(q, f) for q, f in _functions(ast.parse(other.read_text("utf-8")))]
            out.append((other, [(q, f) for q, f in fns if _says_mask(q.split(".")[-1])]))
    if cache is not None and all(cache != p for p, _ in out):
        fns = _functions(ast.parse(cache.read_text("utf-8")))
        keep = [
            (q, f) for q, f in fns if q == "KVCache.make_mask" or ("." not in q and _says_mask(q))
        ]
        out.append((cache, keep))
    return out


def _cache_file(path: Path) -> Path | None:
    """models/cache.py of the package that holds the module (models/x.py or models/x/y.py)."""
    for folder in (path.parent, path.parent.parent):
        if folder.name == "models" and (folder / "cache.py").is_file():
            return folder / "cache.py"
    return None


def mask_mutants(b: _Builder, wanted: set[str], module: str, site: Path, path: Path, done: set):
    """Every mask mutant of one module; a helper file shared by several modules (base.py) is
    mutated once per arm, run with the first module that imports it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for file, fns in mask_files(site, path, tree):
        if str(file) in done:
            continue
        done.add(str(file))
        text = file.read_text(encoding="utf-8")
        for where, fn in fns:
            for value in _mask_values(fn):
                _edits(b, wanted, module, file, where, text, value)
            if "mask_none" in wanted:
                _mask_none(b, module, file, where, text, fn)
            if "mask_offset" in wanted and _says_mask(where.split(".")[-1]):
                _offset_arguments(b, module, file, where, text, fn)


def _batch_only(node: ast.AST) -> bool:
    """A term about batch padding or a sliding window (a single-sequence run without a window
    never reaches it, so its mutants would be equivalent by construction), or about MoE experts
    (a routing mask, not an attention mask: longcat's `topk_indices >= self.n_routed_experts`)."""
    return any(
        (isinstance(n, ast.Name) and ("padding" in n.id or "window" in n.id))
        or (isinstance(n, (ast.Name, ast.Attribute)) and "expert" in _ident(n))
        for n in ast.walk(node)
    )


def _ident(n: ast.AST) -> str:
    return n.id if isinstance(n, ast.Name) else n.attr


def _edits(b: _Builder, wanted: set[str], module: str, file: Path, where: str, text, value):
    add = lambda op, node, new: b.add(op, module, file, where, text, [_Edit(node, new)], node)  # noqa: E731
    for node in ast.walk(value):
        if _batch_only(node):
            continue
        if (
            "mask_drop_term" in wanted
            and isinstance(node, ast.BinOp)
            and isinstance(node.op, (ast.BitAnd, ast.BitOr))
        ):
            add("mask_drop_term", node, _segment(text, node.right))
            add("mask_drop_term", node, _segment(text, node.left))
        elif (
            "mask_compare" in wanted
            and isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and type(node.ops[0]) in _SWAP
        ):
            new = f"{_segment(text, node.left)} {_SWAP[type(node.ops[0])]} "
            add("mask_compare", node, new + _segment(text, node.comparators[0]))


def _offset_arguments(b: _Builder, module: str, file: Path, where: str, text: str, fn) -> None:
    """In a function that makes a mask: the offset in an `arange` it builds indices with, and
    the offset it hands to another mask function (`create_causal_mask(N, offset)`,
    `offset=self.offset`), each shifted by one."""
    batch = _under_batch_ifs(fn)
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call) or id(node) in batch:
            continue
        callee = (
            node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        )
        if _is_arange(node):
            found = [n for a in node.args for n in ast.walk(a) if _names_offset(n)]
        elif _says_mask(callee):
            found = [a for a in node.args if _names_offset(a)]
            found += [k.value for k in node.keywords if k.arg == "offset"]
        else:
            continue
        for n in found:
            seg = _segment(text, n)
            for sign in ("+", "-"):
                b.add("mask_offset", module, file, where, text, [_Edit(n, f"({seg} {sign} 1)")], n)


def _under_batch_ifs(fn) -> set[int]:
    """Nodes inside the body of an `if` about batch padding or a sliding window."""
    out: set[int] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and _batch_only(node.test):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def _is_arange(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Attribute) and node.func.attr == "arange")
        or (isinstance(node.func, ast.Name) and node.func.id == "arange")
    )


def _names_offset(n: ast.AST) -> bool:
    return (isinstance(n, ast.Name) and "offset" in n.id) or (
        isinstance(n, ast.Attribute) and n.attr == "offset"
    )


def _mask_none(b: _Builder, module: str, file: Path, where: str, text: str, fn) -> None:
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call) or _mx_op(node) or _builtin(node):
            continue
        args = [a for a in node.args if isinstance(a, ast.Name) and _says_mask(a.id)]
        args += [
            k.value
            for k in node.keywords
            if k.arg
            and _says_mask(k.arg)
            and not (isinstance(k.value, ast.Constant) and k.value.value is None)
        ]
        for a in [a for a in args if not _batch_only(a)]:
            b.add("mask_none", module, file, where, text, [_Edit(a, "None")], node)


def _mx_op(node: ast.Call) -> bool:
    """mx.where(mask, ...): an array op, not a mask handed to attention."""
    f = node.func
    return isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "mx"


def _builtin(node: ast.Call) -> bool:
    """isinstance(mask, str) and the like read a mask; they do not hand it on."""
    return isinstance(node.func, ast.Name) and node.func.id in dir(builtins)
