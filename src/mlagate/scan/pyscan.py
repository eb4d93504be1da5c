"""The scan of one Python file: its guards (mlagate.scan.analysis reads each condition), what
they gate, and the decisions of its MLA classes."""

from __future__ import annotations

import ast
from pathlib import Path

from mlagate import guardmodel as gm
from mlagate.scan import facts as F
from mlagate.scan import helpers
from mlagate.scan.analysis import Function, constants, gates
from mlagate.scan.model import Finding, ScanReport


class Source:
    """A file's text with its lines split once (ast.get_source_segment splits the whole file
    on every call)."""

    def __init__(self, text: str):
        self.text = text
        self.lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")

    def segment(self, node) -> str:
        if getattr(node, "end_lineno", None) is None:
            return ""
        first, last = node.lineno - 1, node.end_lineno - 1
        if first == last:
            return self.lines[first].encode()[node.col_offset : node.end_col_offset].decode()
        head = self.lines[first].encode()[node.col_offset :].decode()
        tail = self.lines[last].encode()[: node.end_col_offset].decode()
        return "\n".join([head, *self.lines[first + 1 : last], tail])


class FileScan:
    """The findings of one parsed file, added to report."""

    def __init__(self, tree, src: Source, module: str, display: str, report: ScanReport, package):
        self.src, self.module, self.display, self.report = src, module, display, report
        self.consts = constants(tree)
        self.mla = False
        # if line -> (its test reads the query width, its facts when true and when false)
        self.tests: dict[int, tuple[bool, tuple]] = {}
        has = "embed_q" in src.text and "unembed_out" in src.text
        mla = set(gm.mla_classes(tree)) if has else set()
        report.modules.extend((module, c) for c in sorted(mla))
        self.mla = bool(mla)  # split decisions (MLA003) are read in MLA classes only
        # the helpers an MLA class may hand the cache length to: this file's and imported ones
        self.helpers = helpers.imports(tree, module, package) if mla else {}
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.helpers[stmt.name] = (module, stmt.name)
                helpers.record_floors(stmt, self.consts, self.floor, report, module)
        for stmt in gm.statements(tree.body):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.function(stmt)
            elif isinstance(stmt, ast.ClassDef):
                for inner in gm.statements(stmt.body):
                    if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.function(inner, stmt.name in mla)
                if stmt.name in mla:
                    report.class_sites[(module, stmt.name)] = (display, stmt.lineno)
                    self.decisions(stmt)

    def function(self, fn, in_mla: bool = False) -> None:
        scope = Function(fn, self.consts, widths=self.mla)
        for stmt in gm.statements(fn.body):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.function(stmt, in_mla)
                continue
            scope.bind(stmt)
            if in_mla:
                helpers.record_calls(stmt, scope, self.helpers, self.report)
            if isinstance(stmt, ast.If):
                if self.mla:
                    self.tests[stmt.lineno] = (scope.reads_width(stmt.test), scope.facts(stmt.test))
                self.guard(stmt, scope)

    def guard(self, node: ast.If, scope: Function) -> None:
        true, false = scope.facts(node.test)
        body, orelse = node.body, node.orelse
        restricted = None
        for facts, branch in ((true, body), (false, orelse)):
            if F.restriction(facts) == F.SINGLE:
                restricted = (F.SINGLE, branch)
                break
        if restricted is None:
            for facts, branch in ((true, body), (false, orelse)):
                if F.restriction(facts) == F.FIXED:
                    restricted = (F.FIXED, branch)
                    break
        if restricted is None and F.floor((true, false)):
            restricted = (F.FLOOR, body + orelse)
        if restricted is None:
            return
        kind, branch = restricted
        what = gates(branch)
        if kind != F.SINGLE and (
            what != "absorbed" or gm.materialises(body) and gm.materialises(orelse)
        ):
            return  # a constant that picks between two ways of materialising is no decision
        finding = self.finding(node, what)
        if kind == F.SINGLE:
            self.report.guards.append(finding)
        if classify(finding, kind):
            self.report.findings.append(finding)

    def floor(self, node: ast.If) -> Finding:
        """The MLA008 finding of a floor in a helper (the decision it returns)."""
        finding = self.finding(node, "absorbed")
        classify(finding, F.FLOOR)
        return finding

    def finding(self, node: ast.If, what: str) -> Finding:
        test = node.test
        return Finding(
            "",
            self.display,
            node.lineno,
            node.col_offset + 1,
            "",
            self.module,
            " ".join((self.src.segment(test) or "?").split()),
            what,
            test_span=(
                test.lineno,
                test.col_offset + 1,
                test.end_lineno or test.lineno,
                (test.end_col_offset or 0) + 1,
            ),
        )

    def decisions(self, cls: ast.ClassDef) -> None:
        sites = gm.class_guards(cls, cls.name)
        # only conditions on the query width can make the fold and the unfold disagree
        # (`output is not None` beside `L == 1` is another decision, not a split one), and two
        # spellings of one width test (`L <= 8`, `not L > 8`) are one decision
        keys, sources, lines = set(), set(), []
        for site in sites:
            source = " ".join((self.src.segment(site.node.test) or "?").split())
            lines.append((source, site.node.lineno))
            width, pair = self.tests.get(site.node.lineno, (True, F.NONE))
            if not width:
                continue
            facts = pair[0] if site.guard.absorbed_when else pair[1]
            keys.add(tuple(sorted(facts.items())) if facts else source)
            sources.add(source)
        if len(keys) > 1:
            line = min(n for source, n in lines if source in sources)
            self.report.findings.append(split_decision(self, cls.name, line, sources))


def split_decision(where, name: str, line: int, sources: set[str]) -> Finding:
    return Finding(
        "MLA003",
        where.display,
        line,
        1,
        f"{name}: its guards read different conditions "
        f"({' / '.join(sorted(sources))}); the query fold and the output unfold can "
        "disagree",
        where.module,
        guard=" / ".join(sorted(sources)),
        gates="absorbed",
    )


def classify(f: Finding, kind: str) -> bool:
    """Set a restricted guard's rule and message; False when it is no finding."""
    g = f.guard
    if kind == F.SINGLE and f.gates == "absorbed":
        f.rule, f.message = (
            "MLA001",
            (
                f"`{g}` restricts the absorbed path to a single query; a "
                "speculative verify step (L >= 2) re-expands the whole cache"
            ),
        )
    elif kind == F.SINGLE and f.gates == "pooling":
        f.rule, f.message = (
            "MLA002",
            (
                f"`{g}` restricts the indexer's pool reuse to one new token; a wide "
                "step re-pools the whole cache"
            ),
        )
    elif kind == F.FIXED:
        f.rule, f.message = (
            "MLA007",
            (
                f"`{g}` restricts the absorbed path to a fixed query width; the width where "
                "absorbing pays grows with the cache length and the head dimensions"
            ),
        )
    elif kind == F.FLOOR:
        f.rule, f.message = (
            "MLA008",
            (
                f"`{g}` decides the absorbed path on a constant cache length; below it every "
                "step, a verify step included, materialises (or above it absorbs) whatever "
                "the cost formula says"
            ),
        )
    else:
        return False
    return True


def scan_python(text: str, path: str, module: str, display: str, report: ScanReport) -> None:
    """Parse and scan one Python file (SyntaxError and the like propagate)."""
    tree = ast.parse(text, path)
    report.parsed += 1
    report.module_names.add(module)
    report.module_paths.setdefault(module, display)
    scan = FileScan(tree, Source(text), module, display, report, path.endswith("__init__.py"))
    if scan.mla:
        missing = helpers.unresolved(tree, Path(path))
        if missing:
            report.unimportable[module] = missing
