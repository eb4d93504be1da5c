"""The scan of one Rust file, read with tree-sitter and its Rust grammar: the same rules as for
Python (mlagate.scan.facts reads the conditions) on a runtime written against MLX's C++ API.

- An MLA type: an `impl` whose methods call both `self.embed_q.<method>(...)` and
  `self.unembed_out.<method>(...)`.
- Query-length names: bound from a query's shape in the same function, read through any
  shape accessor (Scope._shape_of: `x.shape()`, `x.dims3()?`, `<crate>::array_shape(x)`,
  `x.shape().to_vec()`) in an index or tuple form (`let l = x.shape()[1]`, `let shape =
  array_shape(x); let l = shape[1]`, `let (b, l, _) = (shape[0], shape[1], shape[2])`,
  `let (b, l, _) = x.dims3()?`, `let &[b, l, _] = x.shape() else { .. }`, `x.dim(1)`), and
  names assigned from them.
- Cache-length names: `cache.offset()`, `offset + l`, axis 1 or 2 of a cache or latent tensor.
- Constants: `const NAME: T = 8;` anywhere in the file.
"""

from __future__ import annotations

from mlagate.scan import facts as F
from mlagate.scan.analysis import ABSORB_NAMES, QUERY_NAMES

_PARSER = None
_NOT_QUERY = ("self", "cache", "mask", "state")
_CACHE_TENSORS = ("cache", "latent", "keys")
_COMPARE = {"==", "!=", "<", "<=", ">", ">="}
_TUPLE_POSITION = {2: 1, 3: 1, 4: 2}
# methods that return an array's shape, and conversions that keep it (mlx-rs, candle, tch)
_SHAPE_METHODS = {"shape", "dims", "dimensions", "size", "dims3", "dims4", "size3", "size4"}
_CONVERSIONS = {"to_vec", "as_slice", "as_ref", "clone", "unwrap", "expect", "to_owned"}


def parser():
    """The tree-sitter parser for Rust (built once)."""
    global _PARSER
    if _PARSER is None:
        import tree_sitter
        import tree_sitter_rust

        _PARSER = tree_sitter.Parser(tree_sitter.Language(tree_sitter_rust.language()))
    return _PARSER


def _text(node) -> str:
    return node.text.decode("utf-8", errors="replace")


def _int(node) -> int | None:
    if node is None or node.type != "integer_literal":
        return None
    digits = _text(node).replace("_", "")
    for suffix in ("usize", "isize", "u128", "i128", "u64", "i64", "u32", "i32", "u16", "i16"):
        digits = digits.removesuffix(suffix)
    digits = digits.removesuffix("u8").removesuffix("i8")
    return int(digits) if digits.isdigit() else None


def _unwrap(node):
    """The expression inside parentheses, `?`, `as` casts and references."""
    while node is not None and node.type in (
        "parenthesized_expression",
        "try_expression",
        "type_cast_expression",
        "reference_expression",
    ):
        node = node.child_by_field_name("value") or node.named_children[0]
    return node


def _walk(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _self_calls(node) -> list[tuple[str, object]]:
    """(projection, call) of every `self.embed_q.m(...)` / `self.unembed_out.m(...)`."""
    found = []
    for n in _walk(node):
        if n.type != "call_expression":
            continue
        fn = n.child_by_field_name("function")
        if fn is None or fn.type != "field_expression":
            continue
        inner = fn.child_by_field_name("value")
        if (
            inner is not None
            and inner.type == "field_expression"
            and _text(inner.child_by_field_name("value")) == "self"
            and _text(inner.child_by_field_name("field")) in ("embed_q", "unembed_out")
        ):
            found.append((_text(inner.child_by_field_name("field")), n))
    return found


def _materialises(nodes) -> bool:
    """A branch expands the latent: embed_q called with `false` (the transposed K expansion),
    or unembed_out on a latent."""
    for node in nodes:
        for name, call in _self_calls(node):
            args = call.child_by_field_name("arguments")
            words = [_text(a) for a in args.named_children] if args is not None else []
            if name == "embed_q" and "false" in words:
                return True
            if name == "unembed_out" and any("latent" in w for w in words[:1]):
                return True
    return False


def _path(nodes) -> str | None:
    calls = [c for n in nodes for c in _self_calls(n)]
    if not calls:
        return None
    return "materialised" if _materialises(nodes) else "absorbed"


def gates(nodes) -> str:
    names = set()
    for node in nodes:
        for n in _walk(node):
            if n.type in ("identifier", "field_identifier"):
                names.add(_text(n))
    if names & ABSORB_NAMES or any("absorb" in n for n in names):
        return "absorbed"
    return "pooling" if any("pool" in n.lower() for n in names) else "other"


def _cache_offset(call) -> bool:
    """`cache.offset()`, `KeyValueCache::offset(cache)`, `cache.as_ref().map_or(0, |c|
    c.offset())`: the cached length."""
    fn = call.child_by_field_name("function")
    if fn is None:
        return False
    last = _text(fn).rsplit(".", 1)[-1].rsplit("::", 1)[-1]
    text = _text(call)
    if last == "offset":
        return "cache" in text.lower()
    return last in ("map_or", "map_or_else", "unwrap_or", "map") and (
        "offset" in text and "cache" in text.lower()
    )


class Scope:
    """What one Rust function binds (the Python analysis's Function, for tree-sitter nodes)."""

    def __init__(self, fn, consts: dict[str, int]):
        self.consts = consts
        self.params = set()
        params = fn.child_by_field_name("parameters")
        for p in params.named_children if params is not None else ():
            pat = p.child_by_field_name("pattern")
            if pat is not None and pat.type == "identifier":
                name = _text(pat)
                if not any(w in name for w in _NOT_QUERY):
                    self.params.add(name)
        self.shapes: set[str] = set()  # names bound to a query's shape
        self.lengths: set[str] = set()
        self.cache_lengths: set[str] = set()
        self.widths: set[str] = set()
        self.flags: dict[str, tuple | None] = {}

    def _query_like(self, node) -> bool:
        node = _unwrap(node)
        return (
            node is not None
            and node.type == "identifier"
            and (_text(node) in self.params or _text(node) in QUERY_NAMES)
        )

    def _shape_of(self, node):
        """x for a shape accessor of x, else None: a method (`x.shape()`, `x.dims()`,
        `x.dims3()?`, `x.size()`), a free function whose name says shape (`array_shape(x)`,
        `mlxcel_core::array_shape(&x)`, `ops::shape(&x)`), either followed by a conversion
        (`.to_vec()`, `.as_slice()`, `.clone()`, `.unwrap()`)."""
        node = _unwrap(node)
        if node is None or node.type != "call_expression":
            return None
        fn = node.child_by_field_name("function")
        args = node.child_by_field_name("arguments")
        if fn is None or args is None:
            return None
        if fn.type == "field_expression":
            method = _text(fn.child_by_field_name("field"))
            receiver = fn.child_by_field_name("value")
            if method in _CONVERSIONS and (method == "expect" or not args.named_children):
                return self._shape_of(receiver)
            if method in _SHAPE_METHODS and not args.named_children:
                return receiver
            return None
        if fn.type in ("identifier", "scoped_identifier"):
            name = _text(fn).rsplit("::", 1)[-1]
            if "shape" in name.lower() and len(args.named_children) == 1:
                return args.named_children[0]
        return None

    def _axis(self, node):
        """(tensor, axis) for `x.shape()[k]`, `shape[k]` (shape a query's) or `x.dim(k)`."""
        node = _unwrap(node)
        if node is None:
            return None, None
        if node.type == "index_expression":
            base, idx = node.named_children[0], node.named_children[-1]
            if _unwrap(base).type == "identifier" and _text(_unwrap(base)) in self.shapes:
                return "query-shape", _int(idx)
            return self._shape_of(base), _int(idx)
        if node.type == "call_expression":
            fn = node.child_by_field_name("function")
            args = node.child_by_field_name("arguments")
            if fn is not None and fn.type == "field_expression" and args is not None:
                if _text(fn.child_by_field_name("field")) == "dim" and args.named_children:
                    a = args.named_children[0]
                    k = _int(a)
                    if a.type == "unary_expression" and _int(a.named_children[0]) is not None:
                        k = -_int(a.named_children[0])
                    return fn.child_by_field_name("value"), k
        return None, None

    def is_length(self, node) -> bool:
        node = _unwrap(node)
        if node is None:
            return False
        if node.type == "identifier":
            return _text(node) in self.lengths
        base, k = self._axis(node)
        if base == "query-shape":
            return k == 1
        return base is not None and k in (1, -2) and self._query_like(base)

    def is_cache_length(self, node) -> bool:
        node = _unwrap(node)
        if node is None:
            return False
        if node.type == "identifier":
            return _text(node) in self.cache_lengths
        if node.type == "binary_expression" and _text(node.child_by_field_name("operator")) == "+":
            return self.is_cache_length(node.child_by_field_name("left")) or self.is_cache_length(
                node.child_by_field_name("right")
            )
        if node.type == "call_expression" and _cache_offset(node):
            return True
        base, k = self._axis(node)
        if base is None or base == "query-shape" or k not in (1, 2, -2):
            return False
        base = _unwrap(base)
        return base.type == "identifier" and any(w in _text(base) for w in _CACHE_TENSORS)

    def reads_width(self, node) -> bool:
        for n in _walk(node):
            if n.type == "identifier" and (_text(n) in self.lengths or _text(n) in self.widths):
                return True
            if n.type in ("index_expression", "call_expression") and self.is_length(n):
                return True
        return False

    def bind(self, let) -> None:
        pattern, value = let.child_by_field_name("pattern"), let.child_by_field_name("value")
        if pattern is None or value is None:
            return
        pattern = pattern.named_children[0] if pattern.type == "reference_pattern" else pattern
        if pattern.type in ("tuple_pattern", "slice_pattern"):
            elts = [c for c in pattern.children if c.type not in ("(", ")", "[", "]", ",")]
            shaped = self._shape_of(value)
            if shaped is not None and self._query_like(shaped):
                pos = _TUPLE_POSITION.get(len(elts))
                if pos is not None and elts[pos].type == "identifier":
                    self.lengths.add(_text(elts[pos]))
                return
            value = _unwrap(value)
            if value.type == "tuple_expression" and len(value.named_children) == len(elts):
                for p, v in zip(elts, value.named_children, strict=True):
                    if p.type == "identifier":
                        self._bind(_text(p), v)
            return
        if pattern.type == "mut_pattern":
            pattern = pattern.named_children[-1]
        if pattern.type == "identifier":
            self._bind(_text(pattern), value)

    def _bind(self, name: str, value) -> None:
        shaped = self._shape_of(value)
        if shaped is not None and self._query_like(shaped):
            self.shapes.add(name)
        elif self.is_length(value):
            self.lengths.add(name)
        elif self.is_cache_length(value):
            self.cache_lengths.add(name)
        else:
            if self.reads_width(value):
                self.widths.add(name)
            pair = self.facts(value)
            self.flags[name] = pair if self.flags.get(name, pair) == pair else None

    def facts(self, node) -> tuple:
        node = _unwrap(node) if node.type != "unary_expression" else node
        if node.type == "unary_expression" and _text(node.children[0]) == "!":
            return F.negation(self.facts(node.named_children[0]))
        if node.type == "binary_expression":
            op = _text(node.child_by_field_name("operator"))
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            if op in ("&&", "||"):
                pairs = [self.facts(left), self.facts(right)]
                return (F.conjunction if op == "&&" else F.disjunction)(pairs)
            if op in _COMPARE:
                return self._compare(left, op, right)
        if node.type == "identifier":
            return self.flags.get(_text(node)) or F.NONE
        return F.NONE

    def _constant(self, node) -> int | None:
        node = _unwrap(node)
        if node is None:
            return None
        if node.type in ("identifier", "scoped_identifier"):
            return self.consts.get(_text(node).rsplit("::", 1)[-1])
        return _int(node)

    def _quantity(self, node) -> str | None:
        if self.is_length(node):
            return F.WIDTH
        return F.CACHE if self.is_cache_length(node) else None

    def _compare(self, left, op, right) -> tuple:
        return F.compare_sides(
            self._quantity(left), op, self._quantity(right), self._constant(left),
            self._constant(right),
        )  # fmt: skip
