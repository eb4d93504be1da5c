"""Where a Python module's source lies in a tree: the one rule every reader of a runtime's files
uses (discovery, head runs, reuse keys, importability, mutants). The worker keeps its own (it
imports nothing of mlagate outside mlagate.worker)."""

from __future__ import annotations

from pathlib import Path


def source_file(base: Path) -> Path | None:
    """The source of the module whose path, without suffix, is base: `base.py`, else the
    package's `base/__init__.py`; None when neither is a file."""
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def module_file(root: Path, dotted: str) -> Path | None:
    """The source of the dotted module path under root (`mlx_lm.models.deepseek_v3`)."""
    return source_file(Path(root).joinpath(*dotted.split(".")))
