"""Whether a module discovery found can be imported where it was found.

A runtime tree may ship a file meant to be copied over another runtime's (oMLX-style fixes of
mlx-lm): it imports its siblings by that runtime's package path (`from mlx_lm.models.base
import ...`), so in its own tree it cannot be imported, and every case built from it would
raise before anything is measured. Read statically (ast): an import, outside any `try`, of
another runtime's package of the matrix. Such a file is gated as an `overlay:` arm of that
runtime (docs/matrix.md#arms), not as a module of this tree.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from mlagate.modulefiles import module_file


class Unimportable(ValueError):
    """A module found in a tree that cannot be imported there; one line, exit 3 (nothing could
    be measured)."""


def _unguarded(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    """Every statement that runs when its block runs, not inside a try (an optional import)."""
    for node in body:
        if isinstance(node, ast.Try):
            continue
        yield node
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(node, field, None)
            if isinstance(inner, list) and not isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
            ):
                yield from _unguarded(inner)


def foreign_imports(tree: Path, import_path: str, foreign: set[str]) -> list[str]:
    """The packages of `foreign` that the module's file imports at module level, outside a
    try (sorted; none when the file is missing or does not parse)."""
    path = module_file(tree, import_path)
    if path is None:
        return []
    try:
        parsed = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    found = set()
    for node in _unguarded(parsed.body):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {n.split(".")[0] for n in names} & foreign
    return sorted(found)


def check(
    tree: Path, where: str, own: str, packages: dict[str, str], modules: dict[str, str]
) -> None:
    """Raise Unimportable, one line, for the first module (id -> import path) that imports
    another runtime's package (packages: package -> runtime id) at module level."""
    foreign = set(packages) - {own}
    for mid, imp in sorted(modules.items()):
        bad = foreign_imports(tree, imp, foreign)
        if bad:
            path = module_file(tree, imp)
            rel = path.relative_to(tree) if path else imp
            others = ", ".join(
                f"{m} ({i})" for m, i in sorted(modules.items()) if m != mid and
                foreign_imports(tree, i, foreign)
            )  # fmt: skip
            raise Unimportable(
                f"{where}: {rel} imports {bad[0]} (the package of runtime {packages[bad[0]]}), "
                f"not {own}: it cannot be imported where it was found, so nothing of it could be "
                f"measured here; it is meant to be copied over {packages[bad[0]]}'s file: gate it "
                f"as an `overlay:` arm on an arm of {packages[bad[0]]} (docs/matrix.md#arms)"
                + (f"; so do {others}" if others else "")
            )
