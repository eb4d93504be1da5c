"""Merge the results of shards into one results directory; refuse duplicates, report what is
missing."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from mlagate import documents, results, safefiles
from mlagate.gate.shard import MANIFEST
from mlagate.verdict import outcomes


class MergeError(ValueError):
    """Input that cannot be merged (a duplicate case, an unreadable file); one line."""


@dataclass
class MergeOutcome:
    out: Path
    summary: results.Summary
    sources: list[str]
    missing_shards: list[str] = field(default_factory=list)
    unplanned: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """As `mlagate run`: 1 a gate failed, 3 invalid or missing cases (or shards), or no
        results at all, 0 all passed."""
        code = self.summary.exit_code
        if code == 0 and (self.missing_shards or self.unplanned or not self.summary.rows):
            return outcomes.NOT_MEASURED
        return code

    def text(self) -> str:
        if not self.summary.rows and not self.summary.missing:
            lines = [f"gate: no results: {', '.join(self.sources)} hold no result files"]
        else:
            lines = [results.table(self.summary)]
        for s in self.missing_shards:
            lines.append(f"missing shard {s}")
        for cid in self.unplanned:
            lines.append(f"unplanned {cid} (a result for a case the plan does not hold)")
        lines.append(
            f"merged {len(self.summary.rows)} results from {len(self.sources)} directories into "
            f"{self.out / 'results'}"
        )
        return "\n".join(lines)


def results_dir(d: Path) -> Path:
    """A run's output directory (holding results/, possibly not yet: a shard that ran no case)
    or a results directory itself."""
    return d / "results" if (d / "results").is_dir() or (d / MANIFEST).is_file() else d


def result_files(d: Path) -> list[Path]:
    """The result files of a run's output directory or results directory; MergeError, one
    line, when one of the two cannot be read."""
    try:
        safefiles.listing(d)
        where = results_dir(d)
        names = safefiles.listing(where) if os.path.lexists(where) else []  # ran no case
    except safefiles.UnsafePath as exc:
        raise MergeError(str(exc)) from None
    return sorted(where / n for n in names if n.endswith(".json") and not n.startswith("."))


_KEYS = {
    "manifest": ("runner", "profile", "shard", "plan", "cases"),
    "plan": ("jobs",),
    "job": ("runner", "shard", "case_ids"),
}


def _read(path: Path, what: str) -> dict:
    try:
        data = documents.load(path, what)
    except documents.DocumentError as exc:
        raise MergeError(str(exc)) from None
    items = [(what, data)] + (
        [(f"jobs[{i}]", j) for i, j in enumerate(data["jobs"])]
        if what == "plan" and isinstance(data.get("jobs"), list)
        else []
    )
    for where, item in items:
        keys = _KEYS["job" if where.startswith("jobs[") else what]
        lacking = [k for k in keys if not isinstance(item, dict) or k not in item]
        if lacking:
            raise MergeError(f"{path}: {where}: missing key {lacking[0]!r}")
    if what == "manifest" and not _shard_ok(str(data["shard"])):
        raise MergeError(
            f"{path}: shard: {str(data['shard'])[:40]!r} is not I/N with 1 <= I <= N <= 1000"
        )
    return data


def _shard_ok(text: str) -> bool:
    if not re.fullmatch(r"\d{1,4}/\d{1,4}", text):
        return False
    i, n = (int(x) for x in text.split("/"))
    return 1 <= i <= n <= 1000


def _manifest(d: Path) -> dict | None:
    path = d / MANIFEST
    return _read(path, "manifest") if os.path.lexists(path) else None  # a FIFO or folder: refused


def merge(dirs: list[Path], out: Path, plan: Path | None = None) -> MergeOutcome:
    """Copy every result of `dirs` into OUT/results/ and check the set against the plan.

    The expected cases are the plan's (a file written by `mlagate plan --manifest`) when
    given, else the union of the shards' manifests; a manifest's sibling shards that are
    absent are reported as missing shards. The same case (runner and case id) in two
    files is refused before anything is written.
    """
    if (out / "results").is_dir() and any((out / "results").iterdir()):
        raise MergeError(f"{out / 'results'} is not empty: merge into a new directory")
    seen, rows, manifests = _collect(dirs)
    expected, planned_shards = _expected(plan, manifests)
    have = {f"{r}::{c}" for r, c in seen}
    expected_set = set(expected)
    unplanned = (
        sorted(k for k in have if k not in expected_set) if (plan is not None or manifests) else []
    )
    missing_shards = _missing_shards(manifests, planned_shards)
    _copy(rows, dirs, out)
    summary = results.summarise(
        [r for r, _ in rows], [k for k in dict.fromkeys(expected) if k not in have]
    )
    outcome = MergeOutcome(
        out, summary, [safefiles.shown(d) for d in dirs], missing_shards, unplanned
    )
    _write_record(out, outcome)
    return outcome


def _collect(
    dirs: list[Path],
) -> tuple[dict[tuple[str, str], Path], list[tuple[dict, Path]], list[dict]]:
    """Every result of `dirs` with its file, keyed by (runner, case id), and the shards'
    manifests; a case in two files is refused."""
    seen: dict[tuple[str, str], Path] = {}
    rows: list[tuple[dict, Path]] = []
    manifests: list[dict] = []
    for d in dirs:
        d = Path(d)
        if not d.is_dir():
            raise MergeError(f"{d}: no such directory")
        files = result_files(d)
        m = _manifest(d)
        if m is not None:
            manifests.append(m)
        for path in files:
            row = results.read(path)
            key = (row.get("runner", ""), row["case_id"])
            if key in seen:
                raise MergeError(
                    f"case {row['case_id']} on runner {key[0] or '?'} is in two result files: "
                    f"{seen[key]} and {path}"
                )
            seen[key] = path
            rows.append((row, path))
    return seen, rows, manifests


def _expected(
    plan: Path | None, manifests: list[dict]
) -> tuple[list[str], set[tuple[str, str]] | None]:
    """The expected "runner::case" keys (the plan's, else the manifests'), and the plan's
    (runner, "i/N") shards that hold cases (None without a plan)."""
    if plan is None:
        return [f"{m['runner']}::{cid}" for m in manifests for cid in m["cases"]], None
    jobs = _read(plan, "plan")["jobs"]
    expected = [f"{job['runner']}::{cid}" for job in jobs for cid in job["case_ids"]]
    planned_shards = {(job["runner"], job["shard"]) for job in jobs if job["case_ids"]}
    return expected, planned_shards


def _missing_shards(
    manifests: list[dict], planned_shards: set[tuple[str, str]] | None
) -> list[str]:
    """The sibling shards of the manifests that left none (and that the plan, when given, gave
    cases)."""
    missing_shards = []
    groups: dict[tuple[str, str, str], set[int]] = {}
    counts: dict[tuple[str, str, str], int] = {}
    for m in manifests:
        i, n = (int(x) for x in m["shard"].split("/"))
        key = (m["runner"], m["profile"], m["plan"])
        groups.setdefault(key, set()).add(i)
        counts[key] = n
    for key, present in sorted(groups.items()):
        for i in range(1, counts[key] + 1):
            if planned_shards is not None and (key[0], f"{i}/{counts[key]}") not in planned_shards:
                continue  # the plan gave this shard no case: no job ran for it
            if i not in present:
                missing_shards.append(
                    f"{i}/{counts[key]} of runner {key[0]} (profile {key[1]}, plan {key[2]}): no "
                    "manifest, its job did not run or its artifact is missing"
                )
    return missing_shards


def _copy(rows: list[tuple[dict, Path]], dirs: list[Path], out: Path) -> None:
    """The result files into OUT/results/ (a name taken twice gets a number in front) and each
    directory's logs into OUT/logs/<directory name>/. Names are never taken from documents; a
    link or special file in logs/ refuses the merge before anything is copied."""
    logs, taken = [], set()
    for d in dirs:
        src = Path(d) / "logs"
        if os.path.lexists(src):
            name = base = safefiles.safe_name(Path(d).resolve().name)
            while name in taken:  # two sources of one name: logs/run, logs/run-2
                name = f"{base}-{len(taken) + 1}"
            taken.add(name)
            try:
                logs.append((src, safefiles.tree_files(src), name))
            except safefiles.UnsafePath as exc:
                raise MergeError(str(exc)) from None
    target = out / "results"
    target.mkdir(parents=True, exist_ok=True)
    names: set[str] = set()
    try:
        for i, (_row, path) in enumerate(rows):
            name = path.name if path.name not in names else f"{i}--{path.name}"
            names.add(name)
            safefiles.copy_file(path, target, name)
        for src, files, name in logs:
            safefiles.copy_tree(src, files, out / "logs" / name)
    except (safefiles.UnsafePath, FileExistsError) as exc:
        raise MergeError(str(exc)) from None


def _write_record(out: Path, outcome: MergeOutcome) -> None:
    """OUT/merge.json: the sources, counts, missing cases and shards, and the exit code."""
    summary = outcome.summary
    safefiles.write_text(
        out / "merge.json",
        json.dumps(
            {
                "schema": "mlagate.merge/1",
                "sources": outcome.sources,
                "counts": summary.counts,
                "missing": summary.missing,
                "missing_shards": outcome.missing_shards,
                "unplanned": outcome.unplanned,
                "exit_code": outcome.exit_code,
            },
            indent=1,
        ),
    )
