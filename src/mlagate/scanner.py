"""Static analysis of runtime source with `ast`: where the MLA modules are.

discover() finds every class whose own code calls both the query fold (`self.embed_q(...)`)
and the output unfold (`self.unembed_out(...)`): an MLA attention's dispatch, whether it
defines the projections or inherits them.
"""

from __future__ import annotations

import ast
from pathlib import Path


def _called_attrs(cls: ast.ClassDef) -> set[str]:
    return {
        node.func.attr
        for node in ast.walk(cls)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"
    }


def mla_classes(tree: ast.Module) -> list[str]:
    """Classes that implement the dispatch: their own code calls both projections."""
    return [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and {"embed_q", "unembed_out"} <= _called_attrs(node)]


def discover(site: Path, package: str) -> list[tuple[str, str]]:
    """(import path, class name) of every MLA attention class under site/package."""
    site = Path(site)
    found = []
    for path in sorted((site / package).rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "embed_q" not in text:
            continue
        try:
            tree = ast.parse(text, str(path))
        except SyntaxError:
            continue
        rel = path.relative_to(site).with_suffix("")
        import_path = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        found.extend((import_path, cls) for cls in mla_classes(tree))
    return found
