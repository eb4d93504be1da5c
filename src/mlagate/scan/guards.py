"""Static analysis of runtime source with `ast`: MLA modules and single-query guards.

- discover(): every class whose own code calls both the query fold (`self.embed_q(...)`)
  and the output unfold (`self.unembed_out(...)`): an MLA attention's dispatch, whether it
  defines the projections or inherits them.
- scan(): branch conditions that restrict a fast path to exactly one query or new token
  (`L == 1`, `1 == L`, `S <= 1`, `x.shape[1] == 1`, `not q_len > 1`, a name bound to such a
  test, ...), what the single-query branch gates (the absorbed fold, the indexer's
  incremental pooling, or something unrelated), MLA dispatches whose guards do not read one
  decision, and MLA modules a matrix does not register.

This module walks the files and builds the findings; the analysis of one function's guards
(which names hold the query length, which tests mean one query, what a branch gates) is in
mlagate.scan.analysis.
"""

from __future__ import annotations

import ast
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mlagate.scan import fixes as scanfix
from mlagate.scan.analysis import (
    ABSORB_NAMES,
    MULTI,
    QUERY_NAMES,
    SINGLE,
    Function,
    gates,
    identifiers,
    mla_classes,
    statements,
)

__all__ = [
    "ABSORB_NAMES",
    "FAILING",
    "MULTI",
    "QUERY_NAMES",
    "RULES",
    "SINGLE",
    "Finding",
    "ScanReport",
    "discover",
    "gates",
    "mla_classes",
    "scan",
    "scan_file",
]

# the analysis's names as this module had them (mlagate.mutate.sites reads them from here)
_Function, _identifiers, _statements = Function, identifiers, statements

RULES = {
    "MLA001": "single-query guard on the absorbed path",
    "MLA002": "single-token guard on the indexer's pool reuse",
    "MLA003": "the query fold and the output unfold do not read one decision",
    "MLA004": "MLA module not registered in the matrix",
    "MLA005": "allowlist entry that matches nothing",
    "MLA006": "file could not be parsed",
}
FAILING = {"MLA001", "MLA002", "MLA003", "MLA004"}


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


# --- findings ---------------------------------------------------------------------------


@dataclass
class Finding:
    rule: str
    path: str
    line: int
    column: int
    message: str
    module: str = ""
    guard: str = ""
    gates: str = ""
    allowed: str = ""  # the allowlist reason, when one matched
    test_span: tuple[int, int, int, int] | None = (
        None  # the guard's test: line, column, end line, end column (1-based)
    )
    suggestion: str = ""  # the change that fixes it, in words and code

    @property
    def failing(self) -> bool:
        return self.rule in FAILING and not self.allowed


@dataclass
class ScanReport:
    roots: list[str]
    files: int = 0
    findings: list[Finding] = field(default_factory=list)
    guards: list[Finding] = field(
        default_factory=list
    )  # every single-query guard seen, whatever it gates
    modules: list[tuple[str, str]] = field(default_factory=list)
    module_names: set[str] = field(default_factory=set)

    @property
    def exit_code(self) -> int:
        return 1 if any(f.failing for f in self.findings) else 0

    def to_json(self) -> dict:
        return {
            "schema": "mlagate.scan/1",
            "roots": self.roots,
            "files": self.files,
            "findings": [asdict(f) for f in self.findings],
            "guards": [asdict(g) for g in self.guards],
            "modules": [{"module": m, "class": c} for m, c in self.modules],
        }


def _package_root(path: Path) -> Path:
    """The folder whose child is the top package of path (walks up while __init__.py exists)."""
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        folder = folder.parent
    return folder


def _files(roots: list[Path]):
    for root in roots:
        if root.is_file():
            yield root, _package_root(root)
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(
                d for d in dirnames if not d.startswith(".") and d != "__pycache__"
            )
            for name in sorted(filenames):
                if name.endswith(".py"):
                    path = Path(dirpath) / name
                    yield path, _package_root(path)


def scan_file(path: Path, root: Path, display: str, report: ScanReport) -> None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
        tree = ast.parse(text, str(path))
    except (
        SyntaxError,
        ValueError,
        OSError,
        RecursionError,
        MemoryError,
    ) as exc:  # a link loop, a deep expression
        why = getattr(exc, "strerror", None) or str(exc).splitlines()[0] if str(exc) else ""
        report.findings.append(
            Finding(
                "MLA006",
                display,
                getattr(exc, "lineno", 1) or 1,
                1,
                f"not parsed: {exc.__class__.__name__}: {why}",
            )
        )
        return
    module = _import_path(path, root) if root in path.parents else path.stem
    report.module_names.add(module)
    mla = set(mla_classes(tree)) if "embed_q" in text and "unembed_out" in text else set()
    report.modules.extend((module, c) for c in sorted(mla))
    for stmt in statements(tree.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            _scan_function(stmt, text, module, display, report)
        elif isinstance(stmt, ast.ClassDef):
            for inner in statements(stmt.body):
                if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    _scan_function(inner, text, module, display, report)
            if stmt.name in mla:
                _scan_decisions(stmt, text, module, display, report)


def _scan_function(fn, text: str, module: str, display: str, report: ScanReport) -> None:
    scope = Function(fn)
    for stmt in statements(fn.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            _scan_function(stmt, text, module, display, report)
            continue
        scope.bind(stmt)
        if isinstance(stmt, ast.If):
            _guard(stmt, stmt.test, stmt.body, stmt.orelse, scope, text, module, display, report)


def _guard(node, test, body, orelse, scope, text, module, display, report) -> None:
    kind = scope.kind(test)
    if kind is None:
        return
    what = gates(body if kind == SINGLE else orelse)
    guard = " ".join((ast.get_source_segment(text, test) or "?").split())
    finding = Finding(
        "",
        display,
        node.lineno,
        node.col_offset + 1,
        "",
        module,
        guard,
        what,
        test_span=(
            test.lineno,
            test.col_offset + 1,
            test.end_lineno or test.lineno,
            (test.end_col_offset or 0) + 1,
        ),
    )
    report.guards.append(finding)
    if what == "absorbed":
        finding.rule = "MLA001"
        finding.message = (
            f"`{guard}` restricts the absorbed path to a single query; a "
            "speculative verify step (L >= 2) re-expands the whole cache"
        )
    elif what == "pooling":
        finding.rule = "MLA002"
        finding.message = (
            f"`{guard}` restricts the indexer's pool reuse to one new token; a wide "
            "step re-pools the whole cache"
        )
    else:
        return
    report.findings.append(finding)


def _scan_decisions(
    cls: ast.ClassDef, text: str, module: str, display: str, report: ScanReport
) -> None:
    segment = ast.get_source_segment(text, cls) or ""
    from mlagate.worker import probes  # the worker's own guard finder; `plan` never gets here

    sites = probes.find_guards(segment, cls.name) if segment else []
    sources = {" ".join(s.source.split()) for s in sites}
    if len(sources) > 1:
        first = min(sites, key=lambda s: s.line)
        report.findings.append(
            Finding(
                "MLA003",
                display,
                cls.lineno + first.line - 1,
                1,
                f"{cls.name}: its guards read different conditions "
                f"({' / '.join(sorted(sources))}); the query fold and the output unfold can "
                "disagree",
                module,
                guard=" / ".join(sorted(sources)),
                gates="absorbed",
            )
        )


def scan(
    paths: list[Path],
    allowlist=(),
    registered: set[tuple[str, str]] | None = None,
    root: Path | None = None,
) -> ScanReport:
    """Scan files and folders; allowlist entries (module, guard, reason) silence matching guards.

    A module matches an allowlist entry or a registered (import path, class) pair when its
    dotted path ends with the entry's (so a vendored copy matches too). With root, a finding's
    path is relative to root (where annotations and SARIF resolve) when the file lies under it.
    """
    roots = [Path(p) for p in paths]
    anchor = Path(root).resolve() if root is not None else None
    report = ScanReport([str(r) for r in roots])
    for path, root in _files(roots):
        report.files += 1
        base = next((r for r in roots if r == path or r in path.parents), path.parent)
        display = str(path.relative_to(base if base.is_dir() else base.parent))
        try:
            real = path.resolve()
        except (OSError, RuntimeError):  # a symlink loop: scan_file reports it as unreadable
            real = None
        if anchor is not None and real is not None and anchor in real.parents:
            display = real.relative_to(anchor).as_posix()
        scan_file(path, root, display, report)
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
        if i not in used and any(_suffix(m, allow.module) for m in scanned):
            report.findings.append(
                Finding(
                    "MLA005",
                    allow.module,
                    1,
                    1,
                    f"allowlist entry `{allow.guard}` in {allow.module} matches no guard any more",
                    allow.module,
                    allow.guard,
                )
            )
    if registered is not None:
        for module, cls in report.modules:
            if not any(_suffix(module, m) and cls == c for m, c in registered):
                report.findings.append(
                    Finding(
                        "MLA004",
                        module,
                        1,
                        1,
                        f"{module}:{cls} is an MLA module the matrix does not register",
                        module,
                    )
                )
    report.findings.sort(key=lambda f: (f.path, f.line, f.rule))
    for f in report.findings:
        f.suggestion = scanfix.suggestion(f)
    return report


def _suffix(module: str, wanted: str) -> bool:
    return module == wanted or module.endswith("." + wanted)
