"""What an MLA class and a dispatch guard are in Python source, over `ast` only.

The one model the worker's probes, the scanner, discovery and mutate's sites read. It imports
nothing but the standard library, so the worker may import it (.importlinter).

- An **MLA class** is a class whose own code calls both the query fold (`self.embed_q(...)`)
  and the output unfold (`self.unembed_out(...)`): an MLA attention's dispatch, whether it
  defines the projections or inherits them.
- A **projection call** is `self.embed_q(...)` or `self.unembed_out(...)`; an **expansion** is
  `self.embed_q(latent, transpose=False)`, the K expansion of the materialised path.
- A **branch** is materialised when it expands the latent (an expansion, or `unembed_out` on
  an expression that some expansion expands), absorbed when it only folds or unfolds, and of
  no kind when it calls neither projection.
- A **dispatch guard** is an `if` whose two branches are of different kinds; it selects the
  absorbed path when its test is `absorbed_when`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

FOLD, UNFOLD = "embed_q", "unembed_out"
PROJECTIONS = (FOLD, UNFOLD)
ABSORBED, MATERIALISED = "absorbed", "materialised"


def _child_blocks(stmt):
    for name in ("body", "orelse", "finalbody"):
        block = getattr(stmt, name, None)
        if isinstance(block, list):
            yield block
    for handler in getattr(stmt, "handlers", ()):
        yield handler.body
    for case in getattr(stmt, "cases", ()):
        yield case.body


def statements(block):
    """Every statement under block, in source order, without entering nested functions or
    classes."""
    for stmt in block:
        yield stmt
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for child in _child_blocks(stmt):
            yield from statements(child)


def _self_call(node, receiver: str = "self") -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == receiver
    )


def self_called(node) -> set[str]:
    """The attributes of self that code under node calls (`self.embed_q(...)` gives embed_q)."""
    return {sub.func.attr for sub in ast.walk(node) if _self_call(sub)}


def mla_classes(tree: ast.Module) -> list[str]:
    """Classes that implement the dispatch: their own code calls both projections."""
    return [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and set(PROJECTIONS) <= self_called(node)
    ]


def projection_calls(stmts, receiver: str = "self") -> list[ast.Call]:
    """The projection calls under stmts, in walk order; receiver: the name that holds the
    attention (`self` in a method, the parameter a helper receives it in)."""
    return [
        node
        for stmt in stmts
        for node in ast.walk(stmt)
        if _self_call(node, receiver) and node.func.attr in PROJECTIONS
    ]


def is_expansion(call: ast.Call) -> bool:
    """embed_q(latent, transpose=False): the K expansion of the materialised path."""
    if call.func.attr != FOLD:
        return False
    flags = [kw.value for kw in call.keywords if kw.arg == "transpose"] + call.args[1:2]
    return any(isinstance(f, ast.Constant) and f.value is False for f in flags)


def expanded(stmts, receiver: str = "self") -> set[str]:
    """The latents that expansions under stmts expand (as ast.dump of the argument)."""
    calls = projection_calls(stmts, receiver)
    return {ast.dump(c.args[0]) for c in calls if is_expansion(c) and c.args}


def branch_kind(stmts, latents: set[str], receiver: str = "self") -> str | None:
    """MATERIALISED, ABSORBED or None (the branch calls neither projection); latents: what
    the class's expansions expand (expanded())."""
    calls = projection_calls(stmts, receiver)
    if not calls:
        return None
    expands = any(
        is_expansion(c) or (c.func.attr == UNFOLD and c.args and ast.dump(c.args[0]) in latents)
        for c in calls
    )
    return MATERIALISED if expands else ABSORBED


@dataclass(frozen=True)
class Guard:
    """The kinds of the two branches of a dispatch guard."""

    body: str | None
    orelse: str | None

    @property
    def absorbed_when(self) -> bool:
        """The test value that selects the absorbed branch."""
        if self.body is not None:
            return self.body == ABSORBED
        return self.orelse != ABSORBED


def guard(node: ast.If, latents: set[str], receiver: str = "self") -> Guard | None:
    """node as a dispatch guard; None when its branches are of one kind (or of none)."""
    body = branch_kind(node.body, latents, receiver)
    orelse = branch_kind(node.orelse, latents, receiver)
    if body == orelse:
        return None
    return Guard(body, orelse)


def materialises(stmts) -> bool:
    """The scanner's test that a branch materialises on its own: an expansion, or
    `self.unembed_out` on a name that says latent."""
    return any(
        is_expansion(c)
        or (c.func.attr == UNFOLD and any(
            isinstance(a, ast.Name) and "latent" in a.id for a in c.args[:1]
        ))
        for c in projection_calls(stmts)
    )  # fmt: skip


@dataclass(frozen=True)
class Site:
    """One dispatch guard of a class: the `if`, its kinds, and the method holding it (the
    outermost function of the class it lies in; '' in the class body itself)."""

    function: str
    node: ast.If
    guard: Guard


class _Finder(ast.NodeVisitor):
    """The dispatch guards of the classes named cls_name, inner `if`s before outer ones."""

    def __init__(self, cls_name: str | None, receiver: str = "self"):
        self.cls_name, self.receiver = cls_name, receiver
        self.sites: list[Site] = []
        self.latents: set[str] = set()
        self._in_class = False
        self._function = ""

    def visit_ClassDef(self, node):
        if node.name != self.cls_name:
            return
        self.latents = expanded(node.body)
        self._in_class = True
        self.generic_visit(node)
        self._in_class = False

    def visit_FunctionDef(self, node):
        if not self._in_class or self._function:
            self.generic_visit(node)
            return
        self._function = node.name
        self.generic_visit(node)
        self._function = ""

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node):
        self.generic_visit(node)
        if not self._in_class:
            return
        found = guard(node, self.latents, self.receiver)
        if found is not None:
            self.sites.append(Site(self._function, node, found))


def class_guards(tree: ast.AST, cls_name: str) -> list[Site]:
    """The dispatch guards of every class named cls_name under tree (not inside another
    class), inner `if`s before the `if`s that hold them."""
    finder = _Finder(cls_name)
    finder.visit(tree)
    return finder.sites


def function_guards(fn: ast.FunctionDef | ast.AsyncFunctionDef, receiver: str = "self"):
    """The dispatch guards (Sites) of one function read alone (a method's replacement, a helper
    it hands the attention to, in receiver): the latents are those its own expansions expand."""
    finder = _Finder(None, receiver)
    finder.latents = expanded(fn.body, receiver)
    finder._in_class = True
    finder.visit_FunctionDef(fn)
    return finder.sites


def receiver(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The name a method holds its instance in: its first positional parameter."""
    args = [*fn.args.posonlyargs, *fn.args.args]
    return args[0].arg if args else None


def handoffs(fn: ast.FunctionDef | ast.AsyncFunctionDef, receiver: str) -> dict[str, str]:
    """The functions fn hands the attention to: {name: the parameter it arrives in} for each
    call `name(..., receiver, ...)` (positional or keyword) of a plain name under fn, the
    position read against name's own definition (params: see parameter_at)."""
    found: dict[str, str] = {}
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        for i, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                break
            if isinstance(arg, ast.Name) and arg.id == receiver:
                found.setdefault(node.func.id, str(i))
        for kw in node.keywords:
            if kw.arg and isinstance(kw.value, ast.Name) and kw.value.id == receiver:
                found.setdefault(node.func.id, kw.arg)
    return found


def parameter_at(fn: ast.FunctionDef | ast.AsyncFunctionDef, where: str) -> str | None:
    """The parameter of fn that a handoff's position ('0', '1', ...) or keyword reaches."""
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    if where.isdigit():
        return params[int(where)] if int(where) < len(params) else None
    names = params + [a.arg for a in fn.args.kwonlyargs]
    return where if where in names else None
