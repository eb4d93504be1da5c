import ast
import importlib.util
import types


class _Force(ast.NodeTransformer):
    """Each `L == 1` becomes `FORCE_ABSORBED or L == 1`."""

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
            return ast.BoolOp(ast.Or(), [ast.Name("FORCE_ABSORBED", ast.Load()), node])
        return node


def forced_module():
    """A copy of the runtime's module whose attention takes the absorbed branch while
    FORCE_ABSORBED is set: each `L == 1` of its __call__ becomes `FORCE_ABSORBED or L == 1`
    (the rest of the runtime's code untouched)."""
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
    module.FORCE_ABSORBED = False
    sys.modules[name] = module
    exec(compile(ast.fix_missing_locations(tree), spec.origin, "exec"), module.__dict__)
    print(f"forced: {force.count} `L == 1` guard(s) of {CASE['attention']}.__call__")
    return module


def check():
    """The attention's absorbed branch, forced for a verify step of L >= 2 tokens on a warm
    cache, should run and give the logits of the same tokens decoded one at a time (L = 1, the
    absorbed branch unforced)."""
    module, cm, budget = forced_module(), cache_module(), CASE["budget_ulps"]
    model = build_model(module)
    prompt = tokens(CASE["prompt"], 1)
    for width in CASE["widths"]:
        draft = tokens(width, 2 + width)
        one = cm.make_prompt_cache(model)
        logits(model, prompt, one)
        decoded = [logits(model, [t], one)[0] for t in draft]
        wide = cm.make_prompt_cache(model)
        logits(model, prompt, wide)
        module.FORCE_ABSORBED = True
        try:
            verify = logits(model, draft, wide)
        except Exception as exc:
            return True, (
                f"{CASE['attention']}'s absorbed branch forced at L = {width} (cache "
                f"{len(prompt)}) raises {type(exc).__name__}: {exc} ({raised_at(exc)})"
            )
        finally:
            module.FORCE_ABSORBED = False
        worst = max(ulps(decoded[j], verify[j]) for j in range(width))
        print(f"L = {width}: forced absorbed verify vs decoding {worst:g} ULP")
        if worst > budget:
            return True, (
                f"{CASE['attention']}'s absorbed branch forced at L = {width} (cache "
                f"{len(prompt)}) runs but differs from decoding by {worst:g} ULP (budget {budget})"
            )
    return False, (
        f"{CASE['attention']}'s absorbed branch forced at L = {CASE['widths']} (cache "
        f"{len(prompt)}) runs and equals decoding within {budget} ULP"
    )


if __name__ == "__main__":
    versions()
    finish(*check())
