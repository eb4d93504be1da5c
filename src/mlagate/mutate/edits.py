"""One mutant is one source edit: the edit machinery the operators share (spans of ast nodes
in UTF-8 byte offsets, the edited text, the unified diff) and the builder that keeps ids
unique."""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Mutant:
    id: str
    operator: str
    arm: str
    module: str  # the matrix module whose cases run it
    file: str  # path under site/, posix
    where: str  # function holding the edit
    before: str
    after: str
    patch: str  # unified diff

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class _Edit:
    node: ast.AST
    text: str


def _offsets(text: str) -> list[int]:
    """Byte offset of each line start (ast columns are UTF-8 byte offsets)."""
    starts, pos = [0], 0
    for line in text.encode("utf-8").splitlines(keepends=True):
        pos += len(line)
        starts.append(pos)
    return starts


def _apply(text: str, edits: list[_Edit]) -> str:
    data, starts = text.encode("utf-8"), _offsets(text)
    for start, end, new in sorted(((*_span(starts, e.node), e.text) for e in edits), reverse=True):
        data = data[:start] + new.encode("utf-8") + data[end:]
    return data.decode("utf-8")


def _segment(text: str, node: ast.AST) -> str:
    return " ".join((ast.get_source_segment(text, node) or ast.unparse(node)).split())


class _Builder:
    """Collects the mutants of one arm; ids stay unique (#2, #3 for repeats)."""

    def __init__(self, arm: str, site: Path):
        self.arm, self.site = arm, site
        self.mutants: list[Mutant] = []
        self._seen: dict[str, int] = {}

    def add(
        self,
        operator: str,
        module: str,
        path: Path,
        where: str,
        text: str,
        edits: list[_Edit],
        node: ast.AST,
    ) -> None:
        after_text = _apply(text, edits)
        if after_text == text:
            return
        rel = path.relative_to(self.site).as_posix()
        before = _segment(text, node)
        after = " ".join(_after_segment(text, edits, node).split())
        base = f"{operator}: {before} -> {after} @ {rel}::{where}"
        self._seen[base] = self._seen.get(base, 0) + 1
        mid = base if self._seen[base] == 1 else f"{base} #{self._seen[base]}"
        diff = "".join(
            difflib.unified_diff(
                text.splitlines(keepends=True),
                after_text.splitlines(keepends=True),
                f"a/{rel}",
                f"b/{rel}",
                n=3,
            )
        )
        self.mutants.append(
            Mutant(mid, operator, self.arm, module, rel, where, before, after, diff)
        )


def _span(starts: list[int], node: ast.AST) -> tuple[int, int]:
    return starts[node.lineno - 1] + node.col_offset, starts[
        node.end_lineno - 1
    ] + node.end_col_offset


def _after_segment(text: str, edits: list[_Edit], node: ast.AST) -> str:
    """node's source with the edits inside it applied."""
    data, starts = text.encode("utf-8"), _offsets(text)
    lo, hi = _span(starts, node)
    seg = data[lo:hi]
    for e in sorted(edits, key=lambda e: _span(starts, e.node), reverse=True):
        s, t = _span(starts, e.node)
        if lo <= s and t <= hi:
            seg = seg[: s - lo] + e.text.encode("utf-8") + seg[t - lo :]
    return seg.decode("utf-8")
