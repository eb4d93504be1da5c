"""The scan of one Rust file: its guards, what they gate, and the decisions of its MLA types
(the analysis of a function's names and conditions: mlagate.scan.rust)."""

from __future__ import annotations

from mlagate.scan import facts as F
from mlagate.scan import rust as R
from mlagate.scan.model import Finding, ScanReport
from mlagate.scan.pyscan import classify, split_decision


def _constants(root) -> dict[str, int]:
    seen: dict[str, int | None] = {}
    for n in R._walk(root):
        if n.type == "const_item":
            name, value = n.child_by_field_name("name"), n.child_by_field_name("value")
            if name is not None:
                key = R._text(name)
                seen[key] = R._int(value) if key not in seen else None
    return {k: v for k, v in seen.items() if v is not None}


def _branches(node):
    """(consequence, alternative) of an if_expression, as lists of nodes."""
    body = node.child_by_field_name("consequence")
    alt = node.child_by_field_name("alternative")
    orelse = [c for c in alt.named_children] if alt is not None else []
    return ([body] if body is not None else []), orelse


class RustScan:
    def __init__(self, tree, module: str, display: str, report: ScanReport):
        self.module, self.display, self.report = module, display, report
        self.consts = _constants(tree.root_node)
        for n in R._walk(tree.root_node):
            if n.type == "function_item":
                self.function(n)
            elif n.type == "impl_item":
                self.impl(n)

    def impl(self, node) -> None:
        called = {name for name, _ in R._self_calls(node)}
        if called != {"embed_q", "unembed_out"}:
            return
        ty = node.child_by_field_name("type")
        name = R._text(ty) if ty is not None else "?"
        self.report.modules.append((self.module, name))
        self.report.class_sites[(self.module, name)] = (self.display, node.start_point[0] + 1)
        self.decisions(node, name)

    def function(self, fn) -> None:
        scope = R.Scope(fn, self.consts)
        body = fn.child_by_field_name("body")
        if body is not None:
            self._visit(body, scope)

    def _visit(self, node, scope) -> None:
        stack = [(node, False)]
        while stack:
            n, done = stack.pop()
            if n.type == "function_item":
                continue  # scanned as a function of its own
            if done:
                scope.bind(n)
                continue
            if n.type == "if_expression":
                self.guard(n, scope)
            if n.type == "let_declaration":
                stack.append((n, True))  # bind after its value's own guards
            stack.extend((c, False) for c in reversed(n.named_children))

    def guard(self, node, scope) -> None:
        test = node.child_by_field_name("condition")
        if test is None:
            return
        pair = scope.facts(test)
        body, orelse = _branches(node)
        restricted = None
        for want in (F.SINGLE, F.FIXED):
            for facts, branch in zip(pair, (body, orelse), strict=True):
                if restricted is None and F.restriction(facts) == want:
                    restricted = (want, branch)
        if restricted is None and F.floor(pair):
            restricted = (F.FLOOR, body + orelse)
        if restricted is None:
            return
        kind, branch = restricted
        what = R.gates(branch)
        if kind != F.SINGLE and (
            what != "absorbed" or R._materialises(body) and R._materialises(orelse)
        ):
            return
        (line, col), (end_line, end_col) = test.start_point, test.end_point
        finding = Finding(
            "",
            self.display,
            node.start_point[0] + 1,
            node.start_point[1] + 1,
            "",
            self.module,
            " ".join(R._text(test).split()),
            what,
            test_span=(line + 1, col + 1, end_line + 1, end_col + 1),
        )
        if kind == F.SINGLE:
            self.report.guards.append(finding)
        if classify(finding, kind):
            self.report.findings.append(finding)

    def decisions(self, impl, name: str) -> None:
        """MLA003: the ifs of an MLA type whose branches take different paths, when their
        width conditions are not one decision."""
        keys, sources, lines = set(), set(), []
        for fn in R._walk(impl):
            if fn.type != "function_item":
                continue
            scope = R.Scope(fn, self.consts)
            for n in R._walk(fn):
                if n.type == "let_declaration":
                    scope.bind(n)
                if n.type != "if_expression" or n.child_by_field_name("condition") is None:
                    continue
                body, orelse = _branches(n)
                kinds = R._path(body), R._path(orelse)
                test = n.child_by_field_name("condition")
                if kinds[0] == kinds[1] or not scope.reads_width(test):
                    continue
                absorbed_when = kinds[0] == "absorbed" if kinds[0] else kinds[1] != "absorbed"
                facts = scope.facts(test)[0 if absorbed_when else 1]
                source = " ".join(R._text(test).split())
                keys.add(tuple(sorted(facts.items())) if facts else source)
                sources.add(source)
                lines.append(n.start_point[0] + 1)
        if len(keys) > 1:
            self.report.findings.append(split_decision(self, name, min(lines), sources))


def scan_rust(text: str, module: str, display: str, report: ScanReport) -> None:
    """Parse and scan one Rust file; a file tree-sitter cannot parse is MLA006."""
    tree = R.parser().parse(text.encode("utf-8"))
    if tree.root_node.has_error:
        nodes = list(R._walk(tree.root_node))
        bad = next((n for n in nodes if n.is_missing), None) or next(
            (n for n in nodes if n.is_error), None
        )
        line = bad.start_point[0] + 1 if bad is not None else 1
        exc = SyntaxError("Rust syntax error")
        exc.lineno = line
        raise exc
    report.parsed += 1
    report.module_names.add(module)
    report.module_paths.setdefault(module, display)
    RustScan(tree, module, display, report)
