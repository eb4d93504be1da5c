"""mlagate compare A B: what changed between two runs (or two commits of a history).

Verdict and gate-outcome changes per case (mlagate.verdict.outcomes), and the key figures of each
suite (its contract's key_figures, mlagate.contract.suites) with their 95 % intervals where the
suite records one. The suites are those of the sources read (the shipped ones, and any a run
folder's plan or a merged document names, read as data: no file is run). Worse (exit 1): a case
whose outcome got worse (fixed, as expected < invalid < missing < regression, lost control), a case
of A that B lacks, a new case of B that is not as expected, a figure that moved the bad way with the
two intervals apart, or a figure of A that B no longer has (vanished). A figure without intervals is
shown, never judged; a verdict that changed with its outcome (a stock control failing, then failing
otherwise) is listed as changed. Strict (`--strict`: a change that must not change behaviour): also
exit 1 on any case whose verdict or outcome differs, better ones included, and on any case only one
side has.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from mlagate.report import merged as merged_doc
from mlagate.report.catalogue import PROBLEMS, Catalogue
from mlagate.verdict import outcomes

RANK = {
    "fixed": 0,
    "as expected": 0,
    "invalid": 1,
    "cannot import": 1,
    "cannot build": 1,
    "missing": 2,
    "flaky": 3,
    "changed failure": 3,
    "regression": 3,
    "not fixed": 3,
    "lost control": 3,
}


def source(spec: str, history_dir: Path | None = None) -> Path:
    """The path a spec names: a run folder, results/ folder, .tgz or merged.json; with a
    history, a commit's merged.json."""
    if history_dir is not None:
        path = Path(history_dir) / spec / "merged.json"
        if not path.is_file():
            raise merged_doc.ReportError(f"--history {history_dir}: no commit {spec!r} (no {path})")
        return path
    return Path(spec)


def load(spec: str, history_dir: Path | None = None) -> list[dict]:
    """Result rows of a run folder, results/ folder, .tgz or merged.json; with a history,
    of a commit."""
    path = source(spec, history_dir)
    if history_dir is not None:
        return merged_doc.load_merged(path)["results"]
    return merged_doc.load_source(path)


@dataclass
class Comparison:
    a: str
    b: str
    verdicts: list[dict] = field(default_factory=list)  # case, a, b, change (worse/better/changed)
    figures: list[dict] = field(default_factory=list)  # key, a, b, delta, a_ci, b_ci, change
    cases: dict[str, int] = field(default_factory=dict)  # a, b, same (verdict and outcome)
    strict: bool = False

    @property
    def worse(self) -> int:
        return sum(v["change"] == "worse" for v in self.verdicts) + sum(
            f["change"] == "worse" for f in self.figures
        )

    @property
    def exit_code(self) -> int:
        return 1 if self.worse or (self.strict and self.verdicts) else 0

    def to_json(self) -> dict:
        return {
            "schema": "mlagate.compare/1",
            "a": self.a,
            "b": self.b,
            "worse": self.worse,
            "strict": self.strict,
            "cases": self.cases,
            "verdicts": self.verdicts,
            "figures": self.figures,
        }

    def text(self) -> str:
        n = self.cases
        lines = [
            f"compare {self.a} -> {self.b}",
            f"cases: {n['a']} in A, {n['b']} in B, {n['same']} with the same verdict and outcome "
            f"in both",
        ]
        for v in self.verdicts:
            lines.append(
                f"{v['change']:8} {v['case']}: {_state(v['a'], v['a_outcome'])} -> "
                f"{_state(v['b'], v['b_outcome'])}"
            )
        for f in self.figures:
            ci = lambda c: f" [{c[0]:.4g}, {c[1]:.4g}]" if c else ""  # noqa: E731
            shown = lambda v: "absent" if v is None else f"{v:.4g}"  # noqa: E731
            delta = "" if f["delta"] is None else f" ({f['delta']:+.4g})"
            lines.append(
                f"{f['change']:8} {f['key']}: {shown(f['a'])}{ci(f['a_ci'])} -> "
                f"{shown(f['b'])}{ci(f['b_ci'])}{delta}"
            )
        changes = self.verdicts + self.figures
        better = sum(x["change"] == "better" for x in changes)
        other = len(changes) - self.worse - better
        lines.append(
            f"{self.worse} worse, {better} better, {other} changed without a judgement"
            if changes
            else "no change"
        )
        if self.strict:
            lines.append(
                f"strict: {len(self.verdicts)} "
                + ("case differs" if len(self.verdicts) == 1 else "cases differ")
                + " in verdict, outcome or presence"
                if self.verdicts
                else "strict: every case has the same verdict and outcome in A and B"
            )
        return "\n".join(lines)


def _change(a: str | None, b: str | None) -> str:
    """From outcome a to outcome b (None: no result)."""
    if a is None:
        return "worse" if RANK[b] > 0 else "new"
    if b is None:
        return "worse"
    if b == "fixed" and a != "fixed":
        return "better"
    return "worse" if RANK[b] > RANK[a] else "better" if RANK[b] < RANK[a] else "changed"


def _state(verdict: str | None, outcome: str | None) -> str:
    return f"{verdict} ({outcome})" if verdict else "absent"


def _figure_change(higher_is_worse: bool, a: float, b: float, a_ci, b_ci) -> str:
    if a == b:
        return "same"
    bad = (b > a) == higher_is_worse
    if not (a_ci and b_ci):
        return "changed"
    apart = a_ci[1] < b_ci[0] or b_ci[1] < a_ci[0]
    return ("worse" if bad else "better") if apart else "within noise"


def compare(
    a_rows: list[dict],
    b_rows: list[dict],
    a: str = "A",
    b: str = "B",
    catalogue: Catalogue | None = None,
    strict: bool = False,
) -> Comparison:
    out = Comparison(a, b, strict=strict)
    ra = {r["case_id"]: r for r in a_rows}
    rb = {r["case_id"]: r for r in b_rows}
    for case in sorted(set(ra) | set(rb)):
        a_row, b_row = ra.get(case), rb.get(case)
        va, vb = (r["verdict"] if r else None for r in (a_row, b_row))
        oa, ob = (outcomes.outcome(r) if r else None for r in (a_row, b_row))
        if (va, oa) != (vb, ob):
            out.verdicts.append(
                {
                    "case": case,
                    "a": va,
                    "b": vb,
                    "a_outcome": oa,
                    "b_outcome": ob,
                    "change": _change(oa, ob),
                }
            )
    same = len(set(ra) & set(rb) - {v["case"] for v in out.verdicts})
    out.cases = {"a": len(ra), "b": len(rb), "same": same}
    out.figures = _figures(catalogue or Catalogue.shipped(), a_rows, b_rows)
    return out


def _figures(cat: Catalogue, a_rows: list[dict], b_rows: list[dict]) -> list[dict]:
    """Each key figure that changed: judged by its intervals, `vanished` (worse) when A had it
    and B does not, `appeared` when only B has it."""
    figures = cat.figures()
    fa, fb = cat.key_figures(a_rows), cat.key_figures(b_rows)
    ia, ib = cat.intervals(a_rows), cat.intervals(b_rows)
    out = []
    for key in sorted(k for k in set(fa) | set(fb) if k.split("|")[1] != PROBLEMS.id):
        va, vb = fa.get(key), fb.get(key)
        if vb is None:
            change = "worse"  # the figure vanished: a case or a metric of A is gone in B
        elif va is None:
            change = "new"
        else:
            worse = figures[key.split("|")[1]].higher_is_worse
            change = _figure_change(worse, va, vb, ia.get(key), ib.get(key))
        if change != "same":
            out.append(
                {
                    "key": key,
                    "a": va,
                    "b": vb,
                    "delta": None if va is None or vb is None else vb - va,
                    "a_ci": ia.get(key),
                    "b_ci": ib.get(key),
                    "change": change,
                }
            )
    return out


def run(
    a: str, b: str, history_dir: Path | None = None, fmt: str = "text", strict: bool = False
) -> tuple[str, int]:
    sources = [source(a, history_dir), source(b, history_dir)]
    rows_a, rows_b = load(a, history_dir), load(b, history_dir)
    result = compare(rows_a, rows_b, a, b, Catalogue.of_sources(sources), strict)
    text = json.dumps(result.to_json(), indent=1) if fmt == "json" else result.text()
    return text, result.exit_code
