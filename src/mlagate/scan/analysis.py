"""The guard analysis of mlagate.scan.guards, over `ast` only: which classes are MLA dispatches,
which branch conditions restrict a path to exactly one query or new token, and what such a branch
gates.

- mla_classes(): every class whose own code calls both the query fold (`self.embed_q(...)`) and
  the output unfold (`self.unembed_out(...)`).
- Function: what one function binds (query-length names, names bound to a single- or
  multi-query test) and the kind of a test (`L == 1`, `1 == L`, `S <= 1`, `x.shape[1] == 1`,
  `not q_len > 1`, a name bound to such a test, ...).
- gates(): absorbed, pooling or other, from the names a branch reads.

Query-length names are those bound from a shape in the same function: position 1 of a
3-tuple (B, L, D), position 2 of a 4-tuple (B, H, L, D), position 1 of a 2-tuple, or
`.shape[1]` / `.shape[-2]`, and names assigned from them. No regular expression reads the
source.
"""

from __future__ import annotations

import ast

SINGLE, MULTI = "single", "multi"
ABSORB_NAMES = {"embed_q", "unembed_out", "w_kc", "w_vc", "q_absorb", "o_absorb"}


def _called_attrs(cls: ast.ClassDef) -> set[str]:
    return {
        node.func.attr
        for node in ast.walk(cls)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
    }


def mla_classes(tree: ast.Module) -> list[str]:
    """Classes that implement the dispatch: their own code calls both projections."""
    return [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and {"embed_q", "unembed_out"} <= _called_attrs(node)
    ]


# --- single-query conditions ------------------------------------------------------------


def _const(node) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _shape_index(node) -> int | None:
    """k for `<expr>.shape[k]` with a literal k (negative allowed)."""
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "shape"
    ):
        idx = node.slice
        if (
            isinstance(idx, ast.UnaryOp)
            and isinstance(idx.op, ast.USub)
            and _const(idx.operand) is not None
        ):
            return -_const(idx.operand)
        return _const(idx)
    return None


def _is_shape(node) -> bool:
    if isinstance(node, ast.Attribute) and node.attr == "shape":
        return True
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "shape"
        and isinstance(node.slice, ast.Slice)
    )


_TUPLE_POSITION = {2: 1, 3: 1, 4: 2}
QUERY_NAMES = {
    "x",
    "h",
    "hidden",
    "hidden_states",
    "inputs",
    "input_ids",
    "inputs_embeds",
    "tokens",
    "q",
    "query",
    "queries",
    "q_nope",
    "q_pe",
}
_NOT_QUERY = ("self", "cache", "mask", "state")


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


class Function:
    """What one function binds: query-length names and names bound to single/multi tests."""

    def __init__(self, fn):
        args = fn.args
        self.params = {
            a.arg
            for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)
            if not any(w in a.arg for w in _NOT_QUERY)
        }
        self.lengths: set[str] = set()
        self.flags: dict[str, str | None] = {}

    def query_like(self, node) -> bool:
        return isinstance(node, ast.Name) and (node.id in self.params or node.id in QUERY_NAMES)

    def bind(self, stmt) -> None:
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                self._bind(target, stmt.value)

    def _bind(self, target, value) -> None:
        if isinstance(target, ast.Tuple) and _is_shape(value):
            base = value if isinstance(value, ast.Attribute) else value.value
            pos = _TUPLE_POSITION.get(len(target.elts))
            if (
                pos is not None
                and isinstance(target.elts[pos], ast.Name)
                and self.query_like(base.value)
            ):
                self.lengths.add(target.elts[pos].id)
            return
        if not isinstance(target, ast.Name):
            return
        if self.is_length(value):
            self.lengths.add(target.id)
            return
        kind = self.kind(value)
        if target.id in self.flags and self.flags[target.id] != kind:
            self.flags[target.id] = None
        else:
            self.flags[target.id] = kind

    def is_length(self, node) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.lengths
        return _shape_index(node) in (1, -2) and self.query_like(node.value.value)

    def kind(self, node) -> str | None:
        """SINGLE when the test being true implies one query, MULTI when it implies more."""
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            return self._compare(node.left, node.ops[0], node.comparators[0])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self.kind(node.operand)
            return {SINGLE: MULTI, MULTI: SINGLE}.get(inner)
        if isinstance(node, ast.BoolOp):
            kinds = [self.kind(v) for v in node.values]
            if isinstance(node.op, ast.And):
                hits = {k for k in kinds if k}
                return hits.pop() if len(hits) == 1 else None
            return kinds[0] if len(set(kinds)) == 1 and kinds[0] else None
        if isinstance(node, ast.Name):
            return self.flags.get(node.id)
        return None

    def _compare(self, left, op, right) -> str | None:
        if self.is_length(right) and not self.is_length(left):
            left, right = right, left
            op = {ast.Lt: ast.Gt(), ast.Gt: ast.Lt(), ast.LtE: ast.GtE(), ast.GtE: ast.LtE()}.get(
                type(op), op
            )
        if not self.is_length(left):
            return None
        c = _const(right)
        if c is None:
            return None
        table = {
            (ast.Eq, 1): SINGLE,
            (ast.LtE, 1): SINGLE,
            (ast.Lt, 2): SINGLE,
            (ast.NotEq, 1): MULTI,
            (ast.Gt, 1): MULTI,
            (ast.GtE, 2): MULTI,
        }
        return table.get((type(op), c))


# --- what a branch gates ----------------------------------------------------------------


def identifiers(stmts) -> set[str]:
    names = set()
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.Name):
                names.add(node.id)
    return names


def gates(stmts) -> str:
    """absorbed, pooling or other: what the single-query branch does."""
    names = identifiers(stmts)
    if names & ABSORB_NAMES or any("absorb" in n for n in names):
        return "absorbed"
    if any("pool" in n.lower() for n in names):
        return "pooling"
    return "other"
