"""Decisions held in helpers: a module-level function that an MLA class's method calls with
the cache length (`use_absorbed(L, dims, latent_length(kv_latent))`), and whose `if` on that
parameter returns a constant (`if cache_len < MIN_CACHE_LENGTH: return False`): a floor on the
cache length, MLA008, wherever the helper lives.

A file records both halves in the report (ScanReport.decision_calls: which helper parameters
receive a cache length; ScanReport.helper_floors: which helper `if`s are floors if their
parameter is one); join() pairs them once every file is read, so a helper imported from another
file of the package (`from .mla import use_absorbed`) is found as one in the same file is.
"""

from __future__ import annotations

import ast

from mlagate.guardmodel import statements
from mlagate.scan import facts as F
from mlagate.scan.analysis import Function
from mlagate.scan.model import ScanReport


def imports(tree: ast.Module, module: str, package: bool) -> dict[str, tuple[str, str]]:
    """Local name -> (module, name) for every `from X import name` at the top of tree, relative
    imports resolved against module (a package's own name when package is True)."""
    here = module.split(".") if package else module.split(".")[:-1]
    found = {}
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            if node.level - 1 > len(here):
                continue
            base = here[: len(here) - (node.level - 1)]
            source = ".".join([*base, *([node.module] if node.module else [])])
        else:
            source = node.module or ""
        for alias in node.names:
            found[alias.asname or alias.name] = (source, alias.name)
    return found


def record_calls(stmt, scope: Function, targets: dict[str, tuple[str, str]], report) -> None:
    """Record (module, function, position or keyword) for each call under stmt that passes the
    cache length to a helper named in targets."""
    for node in ast.walk(stmt):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        target = targets.get(node.func.id)
        if target is None:
            continue
        for i, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                break
            if scope.is_cache_length(arg):
                report.decision_calls.add((*target, str(i)))
        for kw in node.keywords:
            if kw.arg and scope.is_cache_length(kw.value):
                report.decision_calls.add((*target, kw.arg))


def _constant_return(branch) -> bool:
    return (
        len(branch) == 1
        and isinstance(branch[0], ast.Return)
        and isinstance(branch[0].value, ast.Constant)
        and isinstance(branch[0].value.value, bool)
    )


def record_floors(fn, consts: dict[str, int], finding, report: ScanReport, module: str) -> None:
    """Record each `if` of the module-level function fn that, were one of its parameters the
    cache length, would be a floor returning a constant decision. finding(node) builds the
    Finding of an `if`."""
    args = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    names = set(args) | {a.arg for a in fn.args.kwonlyargs}
    for stmt in statements(fn.body):
        if not isinstance(stmt, ast.If):
            continue
        if not (_constant_return(stmt.body) or _constant_return(stmt.orelse)):
            continue
        read = {n.id for n in ast.walk(stmt.test) if isinstance(n, ast.Name)} & names
        for param in sorted(read):
            scope = Function(fn, consts)
            scope.cache_lengths.add(param)
            if not F.floor(scope.facts(stmt.test)):
                continue
            where = str(args.index(param)) if param in args else param
            report.helper_floors.append((module, fn.name, where, param, finding(stmt)))


def join(report: ScanReport) -> None:
    """Add each recorded floor whose parameter some MLA class passes the cache length to."""
    for module, function, where, param, finding in report.helper_floors:
        calls = report.decision_calls
        if (module, function, where) in calls or (module, function, param) in calls:
            finding.message += (
                f" (in `{function}`, which an MLA class calls with the cache length as `{param}`)"
            )
            report.findings.append(finding)


def unresolved(tree: ast.Module, path) -> list[str]:
    """The relative imports at the top of the file at path that find nothing beside it
    (`from .base import X` with no base.py or base/ there): a file that runs only when copied
    over a runtime's module. Each as `from .base`."""
    missing = []
    for node in tree.body:
        if not (isinstance(node, ast.ImportFrom) and node.level):
            continue
        folder = path.parent
        for _ in range(node.level - 1):
            folder = folder.parent
        if node.module:
            targets = [node.module.split(".")]
        else:  # `from . import a, b`: each name a module of the package, or the package's own
            if (folder / "__init__.py").is_file():
                continue
            targets = [[a.name] for a in node.names]
        for parts in targets:
            base = folder.joinpath(*parts)
            if not (base.with_suffix(".py").is_file() or base.is_dir()):
                missing.append(f"from {'.' * node.level}{'.'.join(parts)}")
    return missing
