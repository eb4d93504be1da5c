"""The suites a report knows: their kinds, the order the page lists them in, their plot
sections and the key figures the history follows, all declared in each suite's contract
(mlagate.contract.suites: data beside the test body, never imported). A result gives figures
and plots only when its metrics meet its suite's metrics schema.

A merged document records its suites (`suites`: id -> kind and file), taken from each run
folder's plan.json (which names a suite kept beside its matrix) over the shipped suites, so a
page re-rendered later from merged.json alone still finds them. A suite whose file is gone is
still listed, without plots or figures.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from mlagate import documents, results
from mlagate.contract import suites
from mlagate.paths import bundled
from mlagate.report import plots as plotting
from mlagate.report.drawings import DRAWINGS
from mlagate.runplan import FILE as PLAN_FILE

KINDS = ("correctness", "performance")
PROBLEMS = suites.KeyFigure("problems", "failing + invalid cases", "cases")


@dataclass(frozen=True)
class Catalogue:
    entries: dict[str, suites.Entry]

    @classmethod
    def shipped(cls) -> Catalogue:
        return cls(_shipped())

    @classmethod
    def of_sources(cls, sources: list[Path]) -> Catalogue:
        """The shipped suites, every suite an earlier merged.json records and every suite a
        source folder's plan.json names (both read by mlagate.documents; a document that does
        not read names no suite, and load_source has refused it already if it matters)."""
        entries = _shipped()
        for src in sources:
            merged = Path(src) if Path(src).name == "merged.json" else Path(src) / "merged.json"
            if merged.is_file():
                try:
                    entries.update(cls.of_merged(documents.load(merged, "merged")).entries)
                except documents.DocumentError:
                    pass
            plan = Path(src) / PLAN_FILE
            if plan.is_file():
                try:
                    declared = documents.load(plan, "run-plan")["matrix"]["suites"]
                    for sid, s in declared.items():
                        path = Path(s["path"]) if s.get("path") else None
                        entries[sid] = suites.Entry(sid, str(s["kind"]), path)
                except (documents.DocumentError, KeyError, TypeError, AttributeError):
                    pass
        return cls(entries)

    @classmethod
    def of_merged(cls, merged: dict) -> Catalogue:
        entries = _shipped()
        for sid, s in (merged.get("suites") or {}).items():
            if isinstance(s, dict) and isinstance(s.get("kind"), str):
                file = s.get("file")
                entries[sid] = suites.Entry(
                    sid, s["kind"], Path(file) if isinstance(file, str) else None
                )
        return cls(entries)

    def to_json(self, present: set[str]) -> dict:
        return {
            sid: {"kind": e.kind, "file": str(e.path) if e.path else None}
            for sid, e in sorted(self.entries.items())
            if sid in present
        }

    def kind(self, suite: str) -> str:
        entry = self.entries.get(suite)
        return entry.kind if entry else "correctness"

    def _contract(self, suite: str) -> suites.Contract | None:
        entry = self.entries.get(suite)
        return entry.contract if entry else None

    def order(self, present: set[str]) -> list[str]:
        def rank(s: str) -> tuple:
            d = self._contract(s)
            return (
                KINDS.index(self.kind(s)) if self.kind(s) in KINDS else len(KINDS),
                d.order if d else 1000,
                s,
            )

        return sorted(present, key=rank)

    def kinds(self, rows: list[dict]) -> list[tuple[str, list[str]]]:
        """The suites present, grouped by kind, each group in the suites' order."""
        ordered = self.order({r["suite"] for r in rows})
        groups: dict[str, list[str]] = {}
        for s in ordered:
            groups.setdefault(self.kind(s), []).append(s)
        return list(groups.items())

    def sections(self, present: set[str]) -> list[tuple[str, suites.PlotSection]]:
        """(suite, its plot section) in the suites' order."""
        return [(s, d.plots) for s in self.order(present) if (d := self._contract(s)) and d.plots]

    def plots(self, rows: list[dict]) -> list[plotting.Plot]:
        """Every plot section's charts, drawn by the report from the suite's typed results."""
        by_suite: dict[str, list[dict]] = {}
        for r in rows:
            by_suite.setdefault(r["suite"], []).append(r)
        out = []
        for s, section in self.sections(set(by_suite)):
            d = self._contract(s)
            typed = [r for r in by_suite[s] if d.typed(r)]
            for chart in DRAWINGS[section.draw](typed, d.key_figures) if typed else ():
                chart.kind = section.id
                out.append(chart)
        return out

    def figures(self) -> dict[str, suites.KeyFigure]:
        """Every key figure of the known suites, by id, the per-module problem count first."""
        out = {PROBLEMS.id: PROBLEMS}
        for s in self.order(set(self.entries)):
            d = self._contract(s)
            for f in d.key_figures if d else ():
                out.setdefault(f.id, f)
        return out

    def _by_row(self, rows: list[dict], interval: bool) -> dict[str, object]:
        out: dict[str, object] = {}
        for r in rows:
            d = self._contract(r["suite"])
            if d is None or r["verdict"] == "argued" or not d.typed(r):
                continue  # a result whose metrics do not meet the suite's schema: no figure
            for f in d.key_figures:
                v = f.interval(r) if interval else f.value(r)
                if v is not None:
                    out[figure_key(r, f.id)] = v
        return out

    def key_figures(self, rows: list[dict]) -> dict[str, float]:
        """Key figures of one commit, keyed "module|figure|arm|geometry|backend" (arm etc. empty
        for the per-module problem count)."""
        out = {k: float(v) for k, v in self._by_row(rows, interval=False).items()}
        problems: dict[str, int] = {}
        for r in rows:
            problems[r["module"]] = problems.get(r["module"], 0) + (
                r["verdict"] in ("fail", "invalid")
            )
        for module, n in problems.items():
            out[f"{module}|{PROBLEMS.id}|||"] = float(n)
        return out

    def intervals(self, rows: list[dict]) -> dict[str, tuple[float, float]]:
        """The 95 % interval of each key figure that has one, keyed as key_figures keys it."""
        return {k: (float(v[0]), float(v[1])) for k, v in self._by_row(rows, interval=True).items()}


@functools.cache
def _shipped_entries() -> tuple[tuple[str, suites.Entry], ...]:
    return tuple(suites.shipped(bundled("suites")).items())


def _shipped() -> dict[str, suites.Entry]:
    """The suites under the shipped suites folder, found once per process (a copy to extend)."""
    return dict(_shipped_entries())


def figure_key(r: dict, figure: str) -> str:
    return f"{r['module']}|{figure}|{r['arm']}|{results.geometry_label(r)}|{r.get('backend', '')}"
