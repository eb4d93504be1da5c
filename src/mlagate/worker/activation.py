"""An arm's activation, inside its worker (stdlib only): the code a runtime runs to switch its fix
on, run once after the worker's paths are set and before it builds a model.

The parent sets the arm's variables in the worker's environment and says what to run in
ACTIVATE_ENV (JSON: module, function). The module is imported with the inits of its parent
packages left bare (as the runtime's own are, mlagate.worker.probes.LeanImporter), its own init
run for real; then the function, if any, is called with no arguments. What it did is read back
from the classes: every method of a class of the runtime package whose code lives in another
file is reported as replaced.
"""

from __future__ import annotations

import importlib
import json
import os
import sys

from mlagate.worker import importers, probes

ACTIVATE_ENV = "MLAGATE_ACTIVATE"


def worker_env(env: dict[str, str], act) -> dict[str, str]:
    """The environment of an arm's worker (run by the parent): env with the arm's activation
    (a matrix Activation, or None): its variables set, or unset where None, and ACTIVATE_ENV
    saying what the worker imports and calls."""
    out = {k: v for k, v in env.items() if k != ACTIVATE_ENV}
    if act is None:
        return out
    for name, value in act.env.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    out[ACTIVATE_ENV] = json.dumps(
        {"module": act.module, "function": act.function, "env": dict(act.env)}
    )
    return out


def activate(arm_dir: str, package: str, env: dict) -> dict | None:
    """Run the activation ACTIVATE_ENV names (None without one); what it did, for the
    fingerprint."""
    spec = env.get(ACTIVATE_ENV)
    if not spec:
        return None
    spec = json.loads(spec)
    module_name, function = spec["module"], spec.get("function")
    top = module_name.split(".")[0]
    if top != package:
        sys.meta_path.insert(1, probes.LeanImporter(arm_dir, top))
    module = importlib.import_module(module_name)
    if isinstance(getattr(module.__spec__, "loader", None), probes.LeanImporter):
        importers.run_init(module)  # a package named here runs its own __init__
    if function:
        call = getattr(module, function, None)
        if not callable(call):
            raise RuntimeError(f"activate.function: {module_name} has no function {function!r}")
        call()
    return {
        "module": module_name,
        "function": function,
        "env": spec.get("env", {}),
        "replaced": replaced(arm_dir, package),
    }


def replaced(arm_dir: str, package: str) -> dict[str, str]:
    """`module.Class.method` -> `file:line in function` for each method of a class defined in
    the runtime's imported modules whose code lives in another file (relative to the arm)."""
    found = {}
    for name, mod in sorted(sys.modules.items()):
        if name.split(".")[0] != package or not getattr(mod, "__file__", None):
            continue
        origin = os.path.realpath(mod.__file__)
        for cls_name, cls in sorted(vars(mod).items()):
            if not isinstance(cls, type) or cls.__module__ != name:
                continue
            for attr, fn in sorted(vars(cls).items()):
                if not probes.foreign(fn, origin):
                    continue
                code = probes.unwrap(fn).__code__
                where = os.path.relpath(os.path.realpath(code.co_filename), arm_dir)
                found[f"{name}.{cls_name}.{attr}"] = (
                    f"{where}:{code.co_firstlineno} in {code.co_name}"
                )
    return found
