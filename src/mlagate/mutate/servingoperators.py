"""The serving operators: one-line mistakes that only batched or quantized serving can see,
found with `ast` in a module's own file, in the helpers it imports relatively (`from ..linear
import linear`: the imported functions and those they call in that file), in the mask helpers
(`create_causal_mask`) and in the runtime's batch caches (`models/cache.py`: each `Batch*`
class's mask methods (`make_mask`), `prepare` and `finalize`), never by line number.

- pad_drop: a padding term dropped (`mask & (left_padding <= rinds)` made `mask`, `offset -
  left_padding` made `offset`, a batch cache's `self.left_padding += padding` made `pass`), or no
  padding handed on (`left_padding=self.left_padding` made `left_padding=None`, the indexer's
  `padding_mask` argument made `None`);
- pad_shift: a padding comparison off by one (`left_padding <= rinds` made `<`);
- row_offset: a cache's per-row offset array replaced by its first row, broadcast to every
  row (`cache.offset` made `cache.offset[:1]` where it is an array; a plain int stays);
- batch_guard: a batch-size test flipped (`x.shape[0] == 1` made `!= 1`, `B == 1` likewise);
- quant_tuple: the quantized tuple form read at the wrong element (`kv_latent[0]` made
  `kv_latent[1]` where the code tests for a tuple).
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

from mlagate.mutate import sites
from mlagate.mutate.edits import _Builder, _Edit, _segment
from mlagate.mutate.maskoperators import _cache_file, _functions, _says_mask

SERVING_OPERATORS = {
    "pad_drop": "a batch padding term dropped, or no padding handed on (made None)",
    "pad_shift": "a batch padding comparison off by one (<= and < swapped)",
    "row_offset": "a cache's per-row offset array replaced by its first row",
    "batch_guard": "a batch-size test flipped (== 1 and != 1 swapped)",
    "quant_tuple": "a quantized cache's tuple read at the wrong element",
}
BATCH_NAMES = ("B", "batch", "batch_size", "bsz")
BATCH_METHODS = ("prepare", "finalize")  # where a batch cache counts its padding (and *mask*)
_FLIP = {ast.Eq: "!=", ast.NotEq: "=="}
_SHIFT = {ast.Lt: "<=", ast.LtE: "<", ast.Gt: ">=", ast.GtE: ">"}


def _says_padding(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Name) and "padding" in n.id)
        or (isinstance(n, ast.Attribute) and "padding" in n.attr)
        for n in ast.walk(node)
    )


def serving_files(path: Path, tree: ast.Module) -> list[tuple[Path, list]]:
    """The module's own file (every function), each relatively imported file with the functions
    imported from it and those they call there, and models/cache.py's module-level mask
    functions with each Batch* class's mask methods, prepare and finalize (not
    BatchRotatingKVCache's: a sliding-window cache, which no MLA module of the matrix builds)."""
    out = [(path, list(_functions(tree)))]
    by_file: dict[Path, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            for alias in node.names:
                other = sites.imported_from(tree, alias.name, path)
                if other is not None and other != path:
                    by_file.setdefault(other, set()).add(alias.name)
    cache = _cache_file(path)
    for other, names in by_file.items():
        if other == cache:
            continue
        fns = dict(_functions(ast.parse(other.read_text("utf-8"))))
        keep = _called_closure(fns, names) | {q for q in fns if _says_mask(q.split(".")[-1])}
        out.append((other, [(q, fns[q]) for q in fns if q in keep]))
    if cache is not None:
        fns = _functions(ast.parse(cache.read_text("utf-8")))
        keep = [
            (q, f)
            for q, f in fns
            if ("." not in q and _says_mask(q))
            or (
                q.startswith("Batch")
                and "Rotating" not in q
                and (q.split(".")[-1] in BATCH_METHODS or _says_mask(q.split(".")[-1]))
            )
        ]
        out.append((cache, keep))
    return out


def _called_closure(fns: dict, names: set[str]) -> set[str]:
    """names and the module-level functions of the same file they call, transitively."""
    seen, todo = set(), [n for n in names if n in fns]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for n in ast.walk(fns[name]):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in fns:
                todo.append(n.func.id)
    return seen


def serving_mutants(b: _Builder, wanted: set[str], module: str, path: Path, done: set[str]) -> None:
    """Every serving mutant of one module; a file shared by several modules (base.py,
    cache.py, linear.py) is mutated once per arm, run with the first module that reaches it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for file, fns in serving_files(path, tree):
        if str(file) in done:
            continue
        done.add(str(file))
        text = file.read_text(encoding="utf-8")
        for where, fn in fns:
            add = _adder(b, module, file, where, text)
            if wanted & {"pad_drop", "pad_shift"}:
                _padding(add, wanted, text, fn)
            if "row_offset" in wanted:
                _row_offset(add, text, fn)
            if "batch_guard" in wanted:
                _batch_guard(add, text, fn)
            if "quant_tuple" in wanted:
                _quant_tuple(add, text, fn)


def _adder(b: _Builder, module: str, file: Path, where: str, text: str):
    def add(op: str, node: ast.AST, new: str, shown: ast.AST | None = None) -> None:
        b.add(op, module, file, where, text, [_Edit(node, new)], shown or node)

    return add


def _padding(add, wanted: set[str], text: str, fn: ast.FunctionDef) -> None:
    for node in ast.walk(fn):
        if (
            "pad_drop" in wanted
            and isinstance(node, ast.BinOp)
            and isinstance(node.op, (ast.BitAnd, ast.BitOr))
            and _says_padding(node.right) != _says_padding(node.left)
        ):
            kept = node.left if _says_padding(node.right) else node.right
            add("pad_drop", node, _segment(text, kept))
        elif (
            "pad_drop" in wanted
            and isinstance(node, ast.BinOp)
            and isinstance(node.op, (ast.Add, ast.Sub))
            and _says_padding(node.right)
            and not _says_padding(node.left)
        ):
            add("pad_drop", node, _segment(text, node.left))  # offset - left_padding: offset
        elif "pad_drop" in wanted and _counts_padding(text, node):
            add("pad_drop", node, "pass")  # self.left_padding += padding: not counted
        elif "pad_drop" in wanted and isinstance(node, ast.Call) and not _reads_only(node):
            for arg in _padding_arguments(node):
                add("pad_drop", arg, "None", node)
        elif (
            "pad_shift" in wanted
            and isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and type(node.ops[0]) in _SHIFT
            and _says_padding(node)
        ):
            new = f"{_segment(text, node.left)} {_SHIFT[type(node.ops[0])]} "
            add("pad_shift", node, new + _segment(text, node.comparators[0]))


def _counts_padding(text: str, node: ast.AST) -> bool:
    """`self.left_padding += padding` or `self.left_padding = self.left_padding + pad`."""
    if isinstance(node, ast.AugAssign):
        return _says_padding(node.target) and isinstance(node.op, (ast.Add, ast.Sub))
    return (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and _says_padding(node.targets[0])
        and isinstance(node.value, ast.BinOp)
        and isinstance(node.value.op, (ast.Add, ast.Sub))
        and _segment(text, node.value.left) == _segment(text, node.targets[0])
    )


def _padding_arguments(call: ast.Call) -> list[ast.expr]:
    """Arguments handing padding on: a keyword that says padding, or a bare name that does."""
    found = [
        k.value
        for k in call.keywords
        if k.arg and "padding" in k.arg and not isinstance(k.value, ast.Constant)
    ]
    found += [a for a in call.args if isinstance(a, ast.Name) and "padding" in a.id]
    return found


def _builtin(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Name) and call.func.id in dir(builtins)


def _reads_only(call: ast.Call) -> bool:
    """Builtins (isinstance, max, zip) and mx.* array ops (mx.expand_dims(left_padding, ...))
    read padding; they do not hand it on (a term built from them is pad_drop's other case)."""
    f = call.func
    mx_op = isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "mx"
    return mx_op or _builtin(call)


def _cache_offset(node: ast.AST) -> bool:
    """`<a cache>.offset`: a name or attribute that says cache, read for its offset."""
    if not (
        isinstance(node, ast.Attribute) and node.attr == "offset" and isinstance(node.ctx, ast.Load)
    ):
        return False
    base = node.value
    ident = base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")
    return "cache" in ident.lower()


def _row_offset(add, text: str, fn: ast.FunctionDef) -> None:
    """`cache.offset` made its first row where it is an array (a batch cache's per-row
    offsets); a single sequence's int offset is left as it was."""
    skip = {
        id(n) for c in ast.walk(fn) if isinstance(c, ast.Call) and _builtin(c) for n in ast.walk(c)
    }
    if "import mlx.core as mx" not in text:
        return
    for node in ast.walk(fn):
        if _cache_offset(node) and id(node) not in skip:
            seg = _segment(text, node)
            add("row_offset", node, f"({seg}[:1] if isinstance({seg}, mx.array) else {seg})")


def _batch_size(node: ast.AST) -> bool:
    """`B`, `batch`, `x.shape[0]`: the batch size."""
    if isinstance(node, ast.Name):
        return node.id in BATCH_NAMES
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "shape"
        and isinstance(node.slice, ast.Constant)
        and node.slice.value == 0
    )


def _batch_guard(add, text: str, fn: ast.FunctionDef) -> None:
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and type(node.ops[0]) in _FLIP
            and _batch_size(node.left)
            and isinstance(node.comparators[0], ast.Constant)
            and node.comparators[0].value == 1
        ):
            new = f"{_segment(text, node.left)} {_FLIP[type(node.ops[0])]} 1"
            add("batch_guard", node, new)


def _quant_tuple(add, text: str, fn: ast.FunctionDef) -> None:
    """`x[0] if isinstance(x, tuple) else x` (the quantized (data, scales, biases) form) read
    at element 1 and at element 2."""
    for node in ast.walk(fn):
        if not (isinstance(node, ast.IfExp) and isinstance(node.test, ast.Call)):
            continue
        test = node.test
        if not (_builtin(test) and test.args and isinstance(test.args[0], ast.Name)):
            continue
        name = test.args[0].id
        body = node.body
        if (
            isinstance(body, ast.Subscript)
            and isinstance(body.value, ast.Name)
            and body.value.id == name
            and isinstance(body.slice, ast.Constant)
            and body.slice.value == 0
            and "tuple" in _segment(text, test)
        ):
            for k in (1, 2):
                add("quant_tuple", body, f"{name}[{k}]")
