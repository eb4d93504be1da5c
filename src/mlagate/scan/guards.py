"""Static analysis of runtime source (Python with `ast`, Rust with tree-sitter): MLA modules
and single-query guards.

- discover(): every MLA class (mlagate.guardmodel: a class whose own code calls both the
  query fold `self.embed_q(...)` and the output unfold `self.unembed_out(...)`).
- scan(): branch conditions that restrict a fast path to exactly one query or new token
  (`L == 1`, `1 == L`, `S <= 1`, `x.shape[1] == 1`, `not q_len > 1`, a name bound to such a
  test, ...), what the single-query branch gates (the absorbed fold, the indexer's
  incremental pooling, or something unrelated), MLA dispatches whose guards do not read one
  decision, and MLA modules a matrix does not register.

This module walks the files, names their modules and builds the report; a Python file is
scanned by mlagate.scan.pyscan (the analysis of one function's guards, which names hold the
query length, which tests mean one query, what a branch gates: mlagate.scan.analysis), a Rust
file by mlagate.scan.rust; what a condition says about the width and the cache length is
mlagate.scan.facts, the same for both.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from mlagate.guardmodel import mla_classes
from mlagate.scan import fixes as scanfix
from mlagate.scan import helpers, parallel, pyscan
from mlagate.scan.analysis import ABSORB_NAMES, MULTI, QUERY_NAMES, SINGLE, gates
from mlagate.scan.model import (
    FAILING,
    NOTHING_SCANNED,
    RULES,
    Finding,
    ScanReport,
    read_source,
    unparsed,
)

__all__ = [
    "ABSORB_NAMES",
    "FAILING",
    "MULTI",
    "NOTHING_SCANNED",
    "QUERY_NAMES",
    "RULES",
    "SINGLE",
    "Finding",
    "ScanReport",
    "discover",
    "gates",
    "mla_classes",
    "module_name",
    "scan",
    "scan_file",
]


def _import_path(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


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
        found.extend((_import_path(path, site), cls) for cls in mla_classes(tree))
    return found


# --- files and module names -------------------------------------------------------------

SUFFIXES = (".py", ".rs")


def _package_root(path: Path) -> Path:
    """The folder whose child is the top package of path (walks up while __init__.py exists)."""
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        folder = folder.parent
    return folder


def _module_root(path: Path, top: Path | None) -> Path:
    """Where path's dotted module name starts. Regular packages as Python imports them; when a
    folder without __init__.py lies between the file and the scanned folder top (a namespace
    package, a vendored tree), every folder up to and including top is a package too."""
    folder = _package_root(path)
    if top is not None and top in folder.parents:  # stopped below top: a namespace folder
        folder = top.parent
        while (folder / "__init__.py").is_file() and folder.parent != folder:
            folder = folder.parent
    return folder


def module_name(path: Path, base: Path) -> str:
    """path's dotted module name from base (leading parts that are no identifiers, such as
    `site-packages` or `mlx-vlm-0.7.10`, left out); Rust files get `crate::a::b` from their
    crate's src/ folder."""
    try:
        rel = path.relative_to(base).with_suffix("")
    except ValueError:
        return path.stem
    parts = list(rel.parts)
    if path.suffix == ".rs":
        if "src" in parts[:-1]:
            parts = parts[len(parts) - 1 - parts[::-1][1:].index("src") :]
        if parts and parts[-1] in ("mod", "lib", "main"):
            parts = parts[:-1]
        return "::".join(["crate", *parts])
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    while len(parts) > 1 and not parts[0].isidentifier():
        parts = parts[1:]
    return ".".join(parts) or path.stem


def _files(roots: list[Path], report: ScanReport | None = None):
    """(path, the scanned folder it lies in or None) of every .py and .rs file under roots."""

    def unreadable(root: Path):
        def report_it(exc: OSError) -> None:  # a folder os.walk could not list
            if report is not None:
                name = str(exc.filename or root)
                where = os.path.relpath(name, root) if name.startswith(str(root)) else name
                report.findings.append(unparsed(where, exc))

        return report_it

    for root in roots:
        if not root.is_dir():
            yield root, None
            continue
        for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable(root)):
            cargo = "Cargo.toml" in filenames
            dirnames[:] = sorted(
                d
                for d in dirnames
                if not d.startswith(".")
                and d != "__pycache__"
                and not (cargo and d == "target")  # a Rust build's output
            )
            for name in sorted(filenames):
                if name.endswith(SUFFIXES):
                    yield Path(dirpath) / name, root


def scan_file(path: Path, root: Path, display: str, report: ScanReport) -> None:
    """Read, parse and scan one file; root: where its module name starts."""
    report.files += 1
    try:
        text = read_source(path)
        module = module_name(path, root)
        if path.suffix == ".rs":
            from mlagate.scan import rustscan  # tree-sitter: loaded when a Rust file is seen

            rustscan.scan_rust(text, module, display, report)
        else:
            pyscan.scan_python(text, str(path), module, display, report)
    except (SyntaxError, ValueError, OSError, RecursionError, MemoryError) as exc:
        # a FIFO or device (refused unopened), a link loop, a deep expression
        report.findings.append(unparsed(display, exc, getattr(exc, "lineno", 1) or 1))


def _display(path: Path, roots: list[Path], anchor: Path | None) -> str:
    base = next((r for r in roots if r == path or r in path.parents), path.parent)
    display = str(path.relative_to(base if base.is_dir() else base.parent))
    try:
        real = path.resolve()
    except (OSError, RuntimeError):  # a symlink loop: scan_file reports it as unreadable
        real = None
    if anchor is not None and real is not None and anchor in real.parents:
        display = real.relative_to(anchor).as_posix()
    return display


def scan(
    paths: list[Path],
    allowlist=(),
    registered: set[tuple[str, str]] | None = None,
    root: Path | None = None,
    jobs: int | None = None,
) -> ScanReport:
    """Scan files and folders; allowlist entries (module, guard, reason) silence matching guards.
    jobs: worker processes for a large tree (default: the CPUs this process may use).

    A module matches an allowlist entry or a registered (import path, class) pair when its
    dotted path ends with the entry's (so a vendored copy matches too). With root, a finding's
    path is relative to root (where annotations and SARIF resolve) when the file lies under it.
    """
    roots = [Path(p) for p in paths]
    anchor = Path(root).resolve() if root is not None else None
    report = ScanReport([str(r) for r in roots])
    bases: dict[tuple[Path, Path | None], Path] = {}
    work = []
    for path, top in _files(roots, report):
        key = (path.parent, top)
        if key not in bases:
            bases[key] = _module_root(path, top)
        work.append((path, bases[key], _display(path, roots, anchor)))
    parallel.run(work, report, scan_file, jobs)
    helpers.join(report)
    _allow(report, allowlist)
    if registered is not None:
        for module, cls in report.modules:
            if "::" in module:  # a Rust type: the matrix registers Python modules only
                continue
            if not any(_suffix(module, m) and cls == c for m, c in registered):
                path, line = report.class_sites.get((module, cls), (module, 1))
                message = f"{module}:{cls} is an MLA module the matrix does not register"
                missing = report.unimportable.get(module)
                if missing:
                    message += (
                        f", and it cannot be imported where it lies (`{missing[0]}` finds "
                        "nothing beside it): it runs only when copied over a runtime's module"
                    )
                report.findings.append(Finding("MLA004", path, line, 1, message, module))
    report.findings.sort(key=lambda f: (f.path, f.line, f.rule))
    for f in report.findings:
        if f.rule == "MLA004" and f.module in report.unimportable:
            f.suggestion = scanfix.OVERLAY
        else:
            f.suggestion = scanfix.suggestion(f)
    return report


def _allow(report: ScanReport, allowlist) -> None:
    used = set()
    for finding in report.findings + [g for g in report.guards if g not in report.findings]:
        for i, allow in enumerate(allowlist):
            if (
                _suffix(finding.module, allow.module)
                and finding.guard == " ".join(allow.guard.split())
                and finding.gates == allow.gates
            ):
                finding.allowed = allow.reason
                used.add(i)
    scanned = (
        {g.module for g in report.guards} | {m for m, _ in report.modules} | report.module_names
    )
    for i, allow in enumerate(allowlist):
        if i in used:
            continue
        hit = sorted(m for m in scanned if _suffix(m, allow.module))
        if hit:
            report.findings.append(
                Finding(
                    "MLA005",
                    report.module_paths.get(hit[0], allow.module),
                    1,
                    1,
                    f"allowlist entry `{allow.guard}` in {allow.module} matches no guard any more",
                    allow.module,
                    allow.guard,
                )
            )


def _suffix(module: str, wanted: str) -> bool:
    return module == wanted or module.endswith("." + wanted) or module.endswith("::" + wanted)
