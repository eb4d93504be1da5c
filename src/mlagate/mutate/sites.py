"""Where mutants go: the absorbed-path dispatch of an MLA class, found with `ast`.

A dispatch is a method of the attention class with `if` guards around the query fold
(`self.embed_q(q)`) and the output unfold (`self.unembed_out(out)`). Its decision is the
guards' test, or, when the test is a name, the expression last bound to that name
(`absorbed = L == 1 or use_absorbed(L, dims, latent_length(kv))`). The query length is
found as the scanner finds it (mlagate.scan.analysis.Function); what a dispatch guard is,
mlagate.guardmodel. A helper the decision calls
(`use_absorbed`, `max_absorbed_queries`) is followed into its file through the relative
import that brings it in. No line number is used to locate anything.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from mlagate import guardmodel as gm
from mlagate.modulefiles import source_file
from mlagate.scan.analysis import Function, identifiers

__all__ = [
    "Dispatch",
    "Guard",
    "Helper",
    "dispatches",
    "find_class",
    "helpers",
    "identifiers",
    "imported_from",
    "length_names",
    "statements",
]


@dataclass
class Guard:
    node: ast.If
    role: str  # fold | unfold


@dataclass
class Dispatch:
    """One method's absorbed-path decision and the guards that read it."""

    qualname: str
    fn: ast.FunctionDef
    decision: ast.expr
    guards: list[Guard]
    lengths: set[str]
    length_base: dict[str, str] = field(
        default_factory=dict
    )  # L -> source of the array it came from


@dataclass
class Helper:
    """A function the decision calls, defined in a file of the same package."""

    path: Path  # file holding it
    fn: ast.FunctionDef
    call: ast.Call  # the call in the decision
    length_param: str | None  # the parameter the query length is passed to
    cache_param: str | None  # the one Optional / default-None parameter (the cache length)


def _methods(cls: ast.ClassDef):
    for stmt in gm.statements(cls.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield stmt


def find_class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name), None)


def _guard_role(node: ast.If, latents: set[str]) -> str | None:
    """fold or unfold when one branch of node is the absorbed one, else None."""
    guard = gm.guard(node, latents)
    if guard is None:
        return None
    absorbed = node.body if guard.body == gm.ABSORBED else node.orelse
    calls = [c.func.attr for c in gm.projection_calls(absorbed) if not gm.is_expansion(c)]
    if gm.FOLD in calls:
        return "fold"
    return "unfold" if gm.UNFOLD in calls else None


def _shape_base(value: ast.expr) -> ast.expr | None:
    """x for `x.shape`, `x.shape[k]` or `x.shape[a:b]`."""
    if isinstance(value, ast.Subscript):
        value = value.value
    if isinstance(value, ast.Attribute) and value.attr == "shape":
        return value.value
    return None


def _length_bases(fn: ast.FunctionDef, lengths: set[str]) -> dict[str, str]:
    """For each query-length name, the array whose shape it was read from."""
    bases: dict[str, str] = {}
    for stmt in gm.statements(fn.body):
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
            continue
        base = _shape_base(stmt.value)
        if base is None:
            continue
        target = stmt.targets[0]
        names = target.elts if isinstance(target, ast.Tuple) else [target]
        for elt in names:
            if isinstance(elt, ast.Name) and elt.id in lengths:
                bases.setdefault(elt.id, ast.unparse(base))
    return bases


def _decision(fn: ast.FunctionDef, guard: ast.If) -> ast.expr:
    if not isinstance(guard.test, ast.Name):
        return guard.test
    bound = None
    for stmt in gm.statements(fn.body):
        if stmt is guard:
            break
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == guard.test.id for t in stmt.targets
        ):
            bound = stmt.value
    return bound if bound is not None else guard.test


def dispatches(tree: ast.Module, cls_name: str) -> list[Dispatch]:
    cls = find_class(tree, cls_name)
    if cls is None:
        return []
    latents = gm.expanded(cls.body)
    found = []
    for fn in _methods(cls):
        scope = Function(fn)
        guards = []
        for stmt in gm.statements(fn.body):
            scope.bind(stmt)
            if isinstance(stmt, ast.If):
                role = _guard_role(stmt, latents)
                if role:
                    guards.append(Guard(stmt, role))
        if not guards:
            continue
        decision = _decision(fn, guards[0].node)
        lengths = set(scope.lengths)
        found.append(
            Dispatch(
                f"{cls_name}.{fn.name}", fn, decision, guards, lengths, _length_bases(fn, lengths)
            )
        )
    return found


def length_names(node: ast.AST, lengths: set[str]) -> list[ast.Name]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in lengths]


# --- helpers the decision calls ---------------------------------------------------------


def imported_from(tree: ast.Module, name: str, path: Path) -> Path | None:
    """The file that `from .x import name` (relative) in tree brings name from."""
    for node in tree.body:
        if (
            isinstance(node, ast.ImportFrom)
            and node.level >= 1
            and any(a.name == name and a.asname is None for a in node.names)
        ):
            folder = path.parent
            for _ in range(node.level - 1):
                folder = folder.parent
            base = folder.joinpath(*(node.module or "").split(".")) if node.module else folder
            found = source_file(base)
            if found is not None:
                return found
    return None


def _optional_param(fn: ast.FunctionDef) -> str | None:
    args = fn.args.posonlyargs + fn.args.args
    defaults = dict(
        zip(
            [a.arg for a in args][len(args) - len(fn.args.defaults) :],
            fn.args.defaults,
            strict=True,
        )
    )
    hits = [
        a.arg
        for a in args
        if (isinstance(defaults.get(a.arg), ast.Constant) and defaults[a.arg].value is None)
        or (a.annotation is not None and "Optional" in ast.unparse(a.annotation))
    ]
    return hits[0] if len(hits) == 1 else None


def helpers(tree: ast.Module, path: Path, dispatch: Dispatch) -> list[Helper]:
    found = []
    for call in ast.walk(dispatch.decision):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
            continue
        name = call.func.id
        local = next(
            (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None
        )
        where = path if local is not None else imported_from(tree, name, path)
        if where is None:
            continue
        htree = tree if local is not None else ast.parse(where.read_text(encoding="utf-8"))
        fn = local or next(
            (n for n in htree.body if isinstance(n, ast.FunctionDef) and n.name == name), None
        )
        if fn is None:
            continue
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        length_param = None
        for i, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                break
            if isinstance(arg, ast.Name) and arg.id in dispatch.lengths and i < len(params):
                length_param = params[i]
        found.append(Helper(where, fn, call, length_param, _optional_param(fn)))
    return found


def statements(fn: ast.FunctionDef):
    return gm.statements(fn.body)
