import ast
import importlib.util
import types


class _Force(ast.NodeTransformer):
    """Each `L == 1` becomes `FORCE == "absorbed" or (FORCE != "materialised" and L == 1)`."""

    def __init__(self):
        self.count = 0

    def visit_Compare(self, node):
        if (
            isinstance(node.left, ast.Name)
            and node.left.id == "L"
            and len(node.ops) == 1
            and isinstance(node.ops[0], ast.Eq)
            and getattr(node.comparators[0], "value", None) == 1
        ):
            self.count += 1
            force = ast.Name("FORCE", ast.Load())
            return ast.BoolOp(
                ast.Or(),
                [
                    ast.Compare(force, [ast.Eq()], [ast.Constant("absorbed")]),
                    ast.BoolOp(
                        ast.And(),
                        [ast.Compare(force, [ast.NotEq()], [ast.Constant("materialised")]), node],
                    ),
                ],
            )
        return node


def forced_module():
    """A copy of the runtime's module whose attention takes the path FORCE names ("absorbed",
    "materialised"; None: its own choice): each `L == 1` of its __call__ asks FORCE first, and
    a `use_absorbed` rule the module imports answers FORCE where it is set (the rest of the
    runtime's code untouched)."""
    spec = importlib.util.find_spec(CASE["import"])
    tree = ast.parse(open(spec.origin, encoding="utf-8").read(), spec.origin)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == CASE["attention"])
    call = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__call__")
    force = _Force()
    force.visit(call)
    if not force.count:
        raise SystemExit(f"no `L == 1` guard in {CASE['attention']}.__call__: cannot force it")
    name = CASE["import"] + "_forced"
    module = types.ModuleType(name)
    module.__file__, module.__package__ = spec.origin, CASE["import"].rpartition(".")[0]
    module.FORCE = None
    sys.modules[name] = module
    exec(compile(ast.fix_missing_locations(tree), spec.origin, "exec"), module.__dict__)
    rule = module.__dict__.get("use_absorbed")
    if callable(rule):
        module.use_absorbed = lambda *a, **k: (
            module.FORCE == "absorbed" if module.FORCE else rule(*a, **k)
        )
    print(
        f"forced: {force.count} `L == 1` guard(s) of {CASE['attention']}.__call__"
        + (" and its use_absorbed rule" if callable(rule) else "")
    )
    return module


