"""Size limits ruff does not check: no module over 400 lines, no function over 80.

    python tools/sizes.py [--module-lines N] [--function-lines N] PATH...

Prints one `path:line: message` per offender and exits 1 when there is one (2 for a path that
does not exist). A function counts from its `def` (decorators excluded) to its last line,
docstring and comments included; a nested function counts inside its parent too. Neither ruff
nor pylint counts function lines (pylint's too-many-lines counts modules only), hence this
script rather than one more linter.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path


def offenders(path: Path, module_lines: int, function_lines: int) -> list[str]:
    text = path.read_text(encoding="utf-8")
    out = []
    n = len(text.splitlines())
    if n > module_lines:
        out.append(f"{path}:1: module of {n} lines (at most {module_lines})")
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > function_lines:
                out.append(
                    f"{path}:{node.lineno}: function {node.name} of {length} lines (at most {function_lines})"
                )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--module-lines", type=int, default=400)
    ap.add_argument("--function-lines", type=int, default=80)
    ap.add_argument("--exclude", action="append", default=[], help="skip paths under this folder")
    args = ap.parse_args(argv)
    found = []
    for root in args.paths:
        if not root.exists():
            print(f"sizes: {root}: no such file or directory", file=sys.stderr)
            return 2
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for f in files:
            if not any(f.is_relative_to(x) for x in args.exclude):
                found += offenders(f, args.module_lines, args.function_lines)
    print("\n".join(found) if found else "sizes: every module and function within the limits")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
