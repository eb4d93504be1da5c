"""The merged document (mlagate.merged/1): result sources read from disk (run folders,
results/ folders, .tgz archives, merged.json), merged into one document that the commit page,
the job summary, JUnit and the history are rendered from, so any old commit can be rendered
again."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import time
from pathlib import Path

from mlagate import documents, results, safefiles
from mlagate.contract import metrics
from mlagate.verdict import outcomes

MERGED_SCHEMA = "mlagate.merged/1"


class ReportError(ValueError):
    """Bad report input; one line naming the file or argument."""


def _check(data, where: str) -> dict:
    try:
        return metrics.check(documents.validate(data, "result", where), where)
    except documents.DocumentError as exc:
        raise ReportError(str(exc)) from None


def _json(data: bytes | str, where: str):
    try:
        return documents.parse(data, where)
    except documents.DocumentError as exc:
        raise ReportError(str(exc)) from None


NOT_RESULTS = (
    "merged.json",
    "manifest.json",
    "merge.json",
    "shard-cases.json",
    "machine.json",
    "resume-cases.json",
    "plan.json",
)  # what run, merge and report write beside results


def load_source(path: Path) -> list[dict]:
    """Results from a run's output folder (OUT or OUT/results), a folder holding results/
    folders at any depth, a .tgz/.tar.gz of such folders, or a merged.json."""
    path = Path(path)
    if not path.exists():
        raise ReportError(f"{path}: no such file or directory")
    if path.is_dir():
        _readable(path)
        if (path / "results").is_dir():
            _readable(path / "results")
            files = sorted((path / "results").glob("*.json"))
        elif (path / "merged.json").exists():
            return load_source(path / "merged.json")  # a report's or a history commit's folder
        else:
            files = [f for f in sorted(path.glob("*.json")) if f.name not in NOT_RESULTS] or sorted(
                path.glob("**/results/*.json")
            )
        if not files:
            raise ReportError(
                f"{path}: holds no result JSON (looked for *.json and **/results/*.json)"
            )
        rows = []
        for f in files:
            try:
                rows.append(_check(_json(documents.read_bytes(f), str(f)), str(f)))
            except documents.DocumentError as exc:
                raise ReportError(str(exc)) from None
        return _one_file_a_case(rows, files)
    if path.name.endswith((".tgz", ".tar.gz")):
        rows = []
        try:
            with tarfile.open(fileobj=_regular(path), mode="r:gz") as tar:
                for m in sorted(tar.getmembers(), key=lambda m: m.name):
                    parts = m.name.split("/")
                    if (
                        m.isfile()
                        and m.name.endswith(".json")
                        and len(parts) >= 2
                        and parts[-2] == "results"
                    ):
                        rows.append(
                            _check(
                                _json(
                                    tar.extractfile(m).read(documents.MAX_BYTES), f"{path}:{m.name}"
                                ),
                                f"{path}:{m.name}",
                            )
                        )
        except (OSError, tarfile.TarError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ReportError(f"{path}: not a readable results archive ({exc})") from None
        if not rows:
            raise ReportError(f"{path}: the archive holds no results/*.json")
        return rows
    try:
        data = documents.parse(documents.read_bytes(path), str(path))
    except documents.DocumentError as exc:
        raise ReportError(str(exc)) from None
    if isinstance(data, dict) and data.get("schema") == MERGED_SCHEMA:
        return [_check(r, f"{path}: result {i}") for i, r in enumerate(data.get("results", []))]
    return [_check(data, str(path))]


def _readable(folder: Path) -> None:
    try:
        safefiles.listing(folder)
    except safefiles.UnsafePath as exc:
        raise ReportError(str(exc)) from None


def _regular(path: Path):
    """An open regular file (a FIFO or a device is refused before it is read)."""
    try:
        fd = documents.open_regular(path)
    except documents.DocumentError as exc:
        raise ReportError(str(exc)) from None
    return os.fdopen(fd, "rb")


def _one_file_a_case(rows: list[dict], files: list[Path]) -> list[dict]:
    """The rows of one folder; ReportError when a case id is in two of its files."""
    seen: dict[tuple[str, str], Path] = {}
    for row, f in zip(rows, files, strict=True):
        key = (row.get("runner") or "", row["case_id"])
        if key in seen:
            raise ReportError(
                f"case {row['case_id'][:200]} is in two result files: {seen[key]} and {f}"
            )
        seen[key] = f
    return rows


# what the report adds to a head run's record
JUDGEMENT = ("line", "exit_code", "outcomes", "missing", "cases")


def load_merged(path: Path) -> dict:
    """A merged document, every part of it typed: its results as result documents, and the
    records it carries (a head run, machines, a kill matrix) by their own schemas."""
    try:
        data = documents.load(path, "merged")
        if "head_run" in data:
            record = {k: v for k, v in data["head_run"].items() if k not in JUDGEMENT}
            documents.validate(record, "head-run", f"{path}: head_run")
        for i, m in enumerate(data.get("machines", [])):
            documents.validate(
                {k: v for k, v in m.items() if k != "source"}, "machine", f"{path}: machines.{i}"
            )
        if "mutation" in data:
            documents.validate(data["mutation"], "kill-matrix", f"{path}: mutation")
    except documents.DocumentError as exc:
        raise ReportError(str(exc)) from None
    data["results"] = [
        _check(r, f"{path}: result {i}") for i, r in enumerate(data.get("results", []))
    ]
    return data


def merge(
    sources: list[tuple[str, list[dict]]], commit: str, commit_time: str | None = None
) -> dict:
    """One document from several sources. The same case_id in two sources: the result that
    started last is kept, with every other one among its attempts (so a case that failed in
    one source and passed in another is flaky); the others are also listed under `superseded`
    (case id, source, started)."""
    chosen: dict[tuple[str, str], tuple[dict, str]] = {}
    superseded = []
    for name, rows in sources:
        for r in rows:
            key = (r.get("runner") or "", r["case_id"])  # two runners of one backend share case ids
            old = chosen.get(key)
            if old is None or (r.get("started") or "") >= (old[0].get("started") or ""):
                if old is not None:
                    superseded.append(
                        {
                            "case_id": r["case_id"],
                            "source": old[1],
                            "started": old[0].get("started"),
                        }
                    )
                chosen[key] = (r, name)
            else:
                superseded.append(
                    {"case_id": r["case_id"], "source": name, "started": r.get("started")}
                )
    earlier: dict[tuple[str, str], list[dict]] = {}
    for _, rows_ in sources:
        for r in rows_:
            key = (r.get("runner") or "", r["case_id"])
            if chosen[key][0] is not r:
                earlier.setdefault(key, []).extend(results.history(r))
    rows = sorted(
        (_with_attempts(r, earlier.get(key, [])) for key, (r, _) in chosen.items()),
        key=lambda r: (r["suite"], r["module"], r["arm"], r["case_id"]),
    )
    outcomes.mark_as_baseline(rows)
    counts = {v: 0 for v in results.VERDICTS}
    for r in rows:
        counts[r["verdict"]] += 1
    started = [r["started"] for r in rows if r.get("started")]
    return {
        "schema": MERGED_SCHEMA,
        "commit": commit,
        "commit_time": commit_time or (max(started) if started else None),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "sources": [{"name": name, "results": len(rows_)} for name, rows_ in sources],
        "counts": counts,
        "outcomes": outcomes.counts(rows),
        "superseded": superseded,
        "results": rows,
    }


def _with_attempts(row: dict, others: list[dict]) -> dict:
    """row with the attempts of its case found in other sources, oldest first, each once."""
    if not others:
        return row
    mine = {(a.get("run_id"), a.get("started")) for a in results.history(row)}
    seen, extra = set(), []
    for a in others:
        k = (a.get("run_id"), a.get("started"))
        if k not in mine and k not in seen:
            seen.add(k)
            extra.append(a)
    attempts = sorted([*row.get("attempts", []), *extra], key=lambda a: a.get("started") or "")
    return {**row, "attempts": attempts}


def git_commit(cwd: Path | None = None) -> tuple[str | None, str | None]:
    """(commit id, commit time) of the checkout at cwd, or (None, None) outside git."""
    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%H %cI"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    if out.returncode != 0 or not out.stdout.strip():
        return None, None
    sha, when = out.stdout.split()
    return sha, when


def write_atomic(path: Path, text: str) -> None:
    """A new file of an unpredictable name renamed over path (a link there is never followed)."""
    safefiles.write_text(path, text)


def merge_gaps(sources: list[Path]) -> dict[str, list[str]]:
    """What `mlagate merge` found missing (cases, shards) or unplanned, from a merge.json beside a
    source."""
    gaps: dict[str, list[str]] = {"missing": [], "missing_shards": [], "unplanned": []}
    for src in sources:
        path = Path(src) / "merge.json"
        if not path.is_file():
            continue
        try:
            data = documents.load(path, "merge")
        except documents.DocumentError as exc:
            raise ReportError(str(exc)) from None
        for key in gaps:
            gaps[key] += [str(x) for x in data.get(key) or []]
    return gaps
