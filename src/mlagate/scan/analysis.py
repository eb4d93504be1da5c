"""The guard analysis of a Python file, over `ast` only: what
a branch condition says about the query width and the cache length, and what a branch gates.

- which classes are MLA classes and which `if`s are dispatch guards: mlagate.guardmodel.
- constants(): module-level names bound once to an int literal (`MAX_ABSORBED = 8`).
- Function: what one function binds (query-length names, cache-length names, names bound to a
  condition) and the facts of a condition (mlagate.scan.facts: `L == 1`, `1 == L`, `S <= 1`,
  `x.shape[1] == 1`, `not q_len > 1`, `L <= MAX_ABSORBED`, `T < 1024`, a name bound to such a
  test, `and` / `or` / `not` of them, ...).
- gates(): absorbed, pooling or other, from the names a branch reads.

Query-length names are those bound from a shape in the same function: position 1 of a
3-tuple (B, L, D), position 2 of a 4-tuple (B, H, L, D), position 1 of a 2-tuple, or
`.shape[1]` / `.shape[-2]`, and names assigned from them. Cache-length names: `cache.offset`,
`offset + L`, axis 1 or 2 of a cache or latent tensor's shape, a `*length(...)` call on such a
tensor (`latent_length(kv_latent)`), and names assigned from them.
No regular expression reads the source.
"""

from __future__ import annotations

import ast

from mlagate.guardmodel import statements
from mlagate.scan import facts as F

__all__ = ["Function", "constants", "gates", "identifiers", "statements"]

SINGLE, MULTI = "single", "multi"
ABSORB_NAMES = {"embed_q", "unembed_out", "w_kc", "w_vc", "q_absorb", "o_absorb"}


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


_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def constants(tree: ast.Module) -> dict[str, int]:
    """Module-level names bound once to an int literal (`MAX_ABSORBED = 8`)."""
    seen: dict[str, int | None] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], _const(stmt.value)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target, value = stmt.target, _const(stmt.value)
        else:
            continue
        if isinstance(target, ast.Name):
            seen[target.id] = value if target.id not in seen else None
    return {k: v for k, v in seen.items() if v is not None}


def _cachey(node) -> bool:
    """A name or attribute chain that names a cache (`cache`, `self.cache`, `past_cache`)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute) and "cache" in node.attr.lower():
            return True
        node = node.value
    return isinstance(node, ast.Name) and "cache" in node.id.lower()


_CACHE_TENSORS = ("cache", "latent", "keys")


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


class Function:
    """What one function binds: query-length names, cache-length names and names bound to
    width tests."""

    def __init__(self, fn, consts: dict[str, int] | None = None, widths: bool = True):
        args = fn.args
        self.params = {
            a.arg
            for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)
            if not any(w in a.arg for w in _NOT_QUERY)
        }
        self.consts = consts or {}
        self.lengths: set[str] = set()
        self.cache_lengths: set[str] = set()
        self.widths: set[str] = set()  # names bound to an expression that reads the width
        self.track_widths = widths  # off where no decision is compared (a file without MLA)
        self.flags: dict[str, tuple | None] = {}

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
        if self.is_cache_length(value):
            self.cache_lengths.add(target.id)
            return
        if self.track_widths and self.reads_width(value):
            self.widths.add(target.id)
        pair = self.facts(value)
        if target.id in self.flags and self.flags[target.id] != pair:
            self.flags[target.id] = None
        else:
            self.flags[target.id] = pair

    def is_length(self, node) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.lengths
        return _shape_index(node) in (1, -2) and self.query_like(node.value.value)

    def is_cache_length(self, node) -> bool:
        """The cached length: `cache.offset`, a name bound to it, `offset + L`, or axis 1 / 2
        of a cache or latent tensor's shape."""
        if isinstance(node, ast.Name):
            return node.id in self.cache_lengths
        if isinstance(node, ast.Attribute) and node.attr == "offset":
            return _cachey(node.value)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.is_cache_length(node.left) or self.is_cache_length(node.right)
        if isinstance(node, ast.IfExp):  # `cache.offset if cache is not None else 0`
            return self.is_cache_length(node.body) or self.is_cache_length(node.orelse)
        if _shape_index(node) in (1, 2, -2):
            base = node.value.value
            return isinstance(base, ast.Name) and any(w in base.id for w in _CACHE_TENSORS)
        if isinstance(node, ast.Call) and "length" in _called_name(node).lower() and node.args:
            base = node.args[0]  # `latent_length(kv_latent)`: a length read off a cache tensor
            return isinstance(base, ast.Name) and any(w in base.id for w in _CACHE_TENSORS)
        return False

    def reads_width(self, node) -> bool:
        """The expression reads the query width (a length name, a width flag, a query's
        shape)."""
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and (sub.id in self.lengths or sub.id in self.widths):
                return True
            if isinstance(sub, ast.Subscript) and self.is_length(sub):
                return True
        return False

    def facts(self, node) -> tuple:
        """(facts when true, facts when false) of a condition: mlagate.scan.facts."""
        if isinstance(node, ast.Compare):
            lefts = [node.left, *node.comparators[:-1]]
            return F.conjunction(
                [
                    self._compare(a, op, b)
                    for a, op, b in zip(lefts, node.ops, node.comparators, strict=True)
                ]
            )
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return F.negation(self.facts(node.operand))
        if isinstance(node, ast.BoolOp):
            pairs = [self.facts(v) for v in node.values]
            return (F.conjunction if isinstance(node.op, ast.And) else F.disjunction)(pairs)
        if isinstance(node, ast.Name):
            return self.flags.get(node.id) or F.NONE
        return F.NONE

    def kind(self, node) -> str | None:
        """SINGLE when the test being true implies one query, MULTI when its being false
        does."""
        true, false = self.facts(node)
        if F.restriction(true) == F.SINGLE:
            return SINGLE
        return MULTI if F.restriction(false) == F.SINGLE else None

    def _quantity(self, node) -> str | None:
        if self.is_length(node):
            return F.WIDTH
        return F.CACHE if self.is_cache_length(node) else None

    def _constant(self, node) -> int | None:
        if isinstance(node, ast.Name):
            return self.consts.get(node.id)
        return _const(node)

    def _compare(self, left, op, right) -> tuple:
        op = _OPS.get(type(op))
        if op is None:
            return F.NONE
        return F.compare_sides(
            self._quantity(left), op, self._quantity(right), self._constant(left),
            self._constant(right),
        )  # fmt: skip


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
