"""Probes: path counters and branch forcing, attached to a module inside a worker.

Runs inside an arm's worker: imports only the stdlib here (MLX arrives with the module).
The installed arm is never edited. Counters wrap the query fold (embed_q) and the output
unfold (unembed_out) of each attention instance; forcing loads a second copy of the module
whose guards (the `if` statements around those calls, whatever their condition) ask the
probe which branch to take. A method the arm's activation replaced (its code in another file,
mlagate.worker.activation) is forced in that code: a copy of the replacement, its guards
rewritten alike, takes its place on the copied class.
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.util
import inspect
import os
import sys
import types
from dataclasses import dataclass, field

from mlagate import guardmodel as gm

FORCED_SUFFIX = "__mlagate_forced"
GUARD_HOOK = "__mlagate_guard__"
PATHS = ("absorbed", "materialised")


class LeanImporter(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a runtime's packages from an arm without running their __init__ files.

    mlx-vlm's package inits pull in transformers, opencv and web servers; the attention
    code needs none of them. A package found in the arm becomes a bare namespace.
    """

    def __init__(self, arm_dir: str, package: str):
        self.arm_dir, self.package = arm_dir, package

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] != self.package:
            return None
        folder = os.path.join(self.arm_dir, *name.split("."))
        if os.path.isfile(os.path.join(folder, "__init__.py")):
            spec = importlib.util.spec_from_loader(name, self, is_package=True)
            spec.submodule_search_locations = [folder]
            return spec
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__file__ = os.path.join(module.__path__[0], "__init__.py")


@dataclass
class GuardSite:
    id: int
    line: int
    absorbed_when: bool  # the test value that selects the absorbed branch
    source: str
    function: str = ""  # the method (or replacement function) holding the guard
    file: str = ""  # set where the guard is outside the module's own file (a replacement)


@dataclass
class Forcing:
    """The branch-forcing rule of one loaded module copy."""

    sites: list[GuardSite] = field(default_factory=list)
    mode: str | None = None  # None: natural; else one of PATHS
    decisions: list[tuple[int, bool]] = field(
        default_factory=list
    )  # (site, natural choice is absorbed)
    searched: list[str] = field(default_factory=list)  # where guards were looked for

    def where(self) -> str:
        """The class and the functions it really runs whose `if`s were read, as a phrase."""
        return ", ".join(self.searched)

    def __call__(self, site: int, absorbed_when: bool, value):
        natural_absorbed = bool(value) == absorbed_when
        self.decisions.append((site, natural_absorbed))
        if self.mode is None:
            return value
        return absorbed_when if self.mode == "absorbed" else not absorbed_when


def _rewrite(sites: list[gm.Site], text: str, first_id: int = 0, file: str = "") -> list[GuardSite]:
    """Make each guard's test ask the probe (GUARD_HOOK); the GuardSites, numbered from
    first_id."""
    found = []
    for i, site in enumerate(sites):
        node = site.node
        found.append(
            GuardSite(
                first_id + i,
                node.lineno,
                site.guard.absorbed_when,
                ast.get_source_segment(text, node.test) or "?",
                site.function,
                file,
            )
        )
        node.test = ast.Call(
            func=ast.Name(GUARD_HOOK, ast.Load()),
            args=[ast.Constant(first_id + i), ast.Constant(site.guard.absorbed_when), node.test],
            keywords=[],
        )
    return found


def find_guards(text: str, cls_name: str) -> list[GuardSite]:
    """The guard sites of one attention class (the `if`s that pick a path)."""
    return _rewrite(gm.class_guards(ast.parse(text), cls_name), text)


def load_forced(import_path: str, cls_name: str):
    """A second copy of the module whose guards of cls_name ask a Forcing rule.

    Returns (module, forcing); forcing.sites is empty when no guard could be located,
    and the module is then unforceable.
    """
    spec = importlib.util.find_spec(import_path)
    if spec is None or not spec.origin:
        raise ImportError(f"no module named {import_path}")
    with open(spec.origin, encoding="utf-8") as fh:
        text = fh.read()
    tree = ast.parse(text, spec.origin)
    forcing = Forcing(sites=_rewrite(gm.class_guards(tree, cls_name), text))
    forcing.searched.append(f"{import_path}.{cls_name}")
    tree = ast.fix_missing_locations(tree)
    name = import_path + FORCED_SUFFIX
    module = importlib.util.module_from_spec(
        importlib.util.spec_from_loader(name, loader=None, origin=spec.origin)
    )
    module.__file__ = spec.origin
    module.__package__ = import_path.rpartition(".")[0]
    setattr(module, GUARD_HOOK, forcing)
    sys.modules[name] = module
    exec(compile(tree, spec.origin, "exec"), module.__dict__)
    real = importlib.import_module(import_path)  # as the arm's activation left it
    _carry_replacements(real, module, cls_name, spec.origin, forcing)
    _force_handoffs(module, cls_name, spec.origin, forcing)
    return module, forcing


def unwrap(fn):
    """The plain function behind a method, staticmethod, classmethod or functools.wraps."""
    fn = getattr(fn, "__func__", fn)
    return inspect.unwrap(fn) if callable(fn) else fn


def foreign(fn, origin: str) -> bool:
    """Whether fn is a function whose code lives outside the module file origin."""
    code = getattr(unwrap(fn), "__code__", None)
    if code is None or code.co_filename.startswith("<"):  # generated (dataclasses): not replaced
        return False
    return os.path.realpath(code.co_filename) != os.path.realpath(origin)


def _carry_replacements(real, copy, cls_name: str, origin: str, forcing: Forcing) -> None:
    """Give the forced copy what the activation replaced in the real module: module functions
    as they are, methods of cls_name with their guards rewritten (the copy's own guards of a
    replaced method are dropped: that code no longer runs)."""
    for name, value in vars(real).items():
        if name in vars(copy) and callable(value) and foreign(value, origin):
            setattr(copy, name, value)
    real_cls, copy_cls = getattr(real, cls_name, None), getattr(copy, cls_name, None)
    if not isinstance(real_cls, type) or not isinstance(copy_cls, type):
        return
    for attr, fn in vars(real_cls).items():
        if not foreign(fn, origin):
            continue
        forcing.sites = [s for s in forcing.sites if s.function != attr]
        plain = unwrap(fn)
        forcing.searched.append(f"its {attr} replaced by {_name(plain)}")
        new, sites = _forced_function(plain, forcing, _next_id(forcing))
        forcing.sites += sites
        if isinstance(fn, staticmethod):
            new = staticmethod(new)
        elif isinstance(fn, classmethod):
            new = classmethod(new)
        setattr(copy_cls, attr, new)


def _name(fn) -> str:
    return f"{fn.__module__.removesuffix(FORCED_SUFFIX)}.{fn.__qualname__}"


def _next_id(forcing: Forcing) -> int:
    return 1 + max((s.id for s in forcing.sites), default=-1)  # ids stay unique


def _force_handoffs(copy, cls_name: str, origin: str, forcing: Forcing) -> None:
    """The functions the copy's own methods of cls_name hand self to (a module-level helper
    holding the guards), forced in the copy's namespace."""
    copy_cls = getattr(copy, cls_name, None)
    if not isinstance(copy_cls, type):
        return
    for fn in vars(copy_cls).values():
        fn = unwrap(fn)
        if not isinstance(fn, types.FunctionType) or foreign(fn, origin):
            continue
        node = _definition(fn)
        receiver = gm.receiver(node) if node is not None else None
        if receiver is not None:
            sites = _force_helpers(fn, node, receiver, copy.__dict__, forcing, _next_id(forcing))
            forcing.sites += sites


def _helper(fn, name: str):
    """The plain function name means in fn's globals when it lies in fn's own top package."""
    callee = fn.__globals__.get(name)
    if not isinstance(callee, types.FunctionType) or callee is fn:
        return None
    package = fn.__module__.split(".")[0]
    return callee if callee.__module__.split(".")[0] == package else None


def _force_helpers(fn, node, receiver: str, namespace: dict, forcing, first_id: int, depth=0):
    """Force the functions node hands receiver to, binding the forced copies in namespace;
    their GuardSites."""
    sites: list[GuardSite] = []
    if depth > 3:
        return sites
    for name, where in gm.handoffs(node, receiver).items():
        callee = _helper(fn, name)
        defined = _definition(callee) if callee is not None else None
        param = gm.parameter_at(defined, where) if defined is not None else None
        if param is None:
            continue
        forcing.searched.append(f"{_name(callee)} it calls")
        new, found = _forced_function(callee, forcing, first_id + len(sites), param, depth + 1)
        if found:
            namespace[name] = new
            sites += found
    return sites


def _definition(fn):
    """fn's FunctionDef, parsed from its file; None when its source cannot be read."""
    code = fn.__code__
    try:
        with open(code.co_filename, encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return None
    return _find_def(ast.parse(text, code.co_filename), code)


def _find_def(tree, code):
    return next(
        (
            n
            for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name == code.co_name
            and code.co_firstlineno in (n.lineno, *(d.lineno for d in n.decorator_list))
        ),
        None,
    )


def _forced_function(fn, forcing: Forcing, first_id: int, receiver="self", depth=0):
    """A copy of fn whose guards (and those of the functions it hands receiver to) ask
    forcing; (fn itself, []) when its source cannot be found or recompiled to the same free
    variables."""
    code = fn.__code__
    try:
        with open(code.co_filename, encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return fn, []
    node = _find_def(ast.parse(text, code.co_filename), code)
    if node is None:
        return fn, []
    if depth == 0:
        receiver = gm.receiver(node) or receiver
    sites = _rewrite(gm.function_guards(node, receiver), text, first_id, code.co_filename)
    node.decorator_list = []
    # nested in a function that binds its free variables, so they compile as free variables
    outer = ast.parse("def __mlagate_outer__():\n    pass").body[0]
    outer.body = [
        *(ast.parse(f"{v} = None").body[0] for v in code.co_freevars),
        node,
        ast.Return(ast.Name(node.name, ast.Load())),
    ]
    module = ast.fix_missing_locations(ast.Module(body=[outer], type_ignores=[]))
    compiled = compile(module, code.co_filename, "exec")
    outer_code = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    inner = next(
        c for c in outer_code.co_consts if isinstance(c, types.CodeType) and c.co_name == node.name
    )
    if inner.co_freevars != code.co_freevars:
        return fn, []
    namespace = {**fn.__globals__, GUARD_HOOK: forcing}
    sites += _force_helpers(fn, node, receiver, namespace, forcing, first_id + len(sites), depth)
    new = types.FunctionType(inner, namespace, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__, new.__qualname__ = fn.__kwdefaults__, fn.__qualname__
    return new, sites


# --- counters ---------------------------------------------------------------------------


@dataclass
class Event:
    layer: int
    op: str  # fold | expand_k | expand_v | unfold
    shape: tuple[int, ...]


class Counters:
    """Records, per attention instance, which projections ran and on what."""

    def __init__(self):
        self.events: list[Event] = []
        self.layers = 0

    def attach(self, model) -> int:
        """Wrap embed_q/unembed_out of every MLA attention instance in model; returns how many."""
        for _, mod in model.named_modules():
            if "embed_q" in mod and "unembed_out" in mod:
                self._wrap(mod["embed_q"], self.layers, "embed_q")
                self._wrap(mod["unembed_out"], self.layers, "unembed_out")
                self.layers += 1
        return self.layers

    def _wrap(self, proj, layer: int, role: str) -> None:
        base = type(proj)
        events = self.events

        def __call__(self, x, transpose=True):
            if role == "embed_q":
                op = "fold" if transpose else "expand_k"
            else:
                op = "expand_v" if x.ndim >= 3 and x.shape[-3] == 1 else "unfold"
            events.append(Event(layer, op, tuple(x.shape)))
            return base.__call__(self, x, transpose)

        proj.__class__ = type(
            base.__name__, (base,), {"__call__": __call__, "__module__": base.__module__}
        )

    def clear(self) -> None:
        self.events.clear()

    def paths(self) -> list[dict]:
        """One record per attention call (a run of events of one layer; a step is one forward)."""
        calls: list[dict] = []
        for ev in self.events:
            if not calls or calls[-1]["layer"] != ev.layer:
                calls.append({"layer": ev.layer, "ops": []})
            calls[-1]["ops"].append(ev.op)
        for rec in calls:
            rec["path"] = classify(rec["ops"])
        return calls

    def summary(self) -> dict:
        calls = self.paths()
        ops = [e.op for e in self.events]
        kinds = sorted({c["path"] for c in calls})
        return {
            "path": kinds[0] if len(kinds) == 1 else ("none" if not kinds else "mixed"),
            "calls": calls,
            "ops": {op: ops.count(op) for op in ("fold", "unfold", "expand_k", "expand_v")},
        }


def classify(ops: list[str]) -> str:
    """The path a sequence of projection ops proves: absorbed, materialised or split.

    split means the query fold and the output unfold did not read one decision
    (for instance K expanded but the output unfolded).
    """
    s = set(ops)
    if s == {"fold", "unfold"}:
        return "absorbed"
    if s == {"expand_k", "expand_v"}:
        return "materialised"
    return "split"
