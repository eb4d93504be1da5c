"""mlagate run --resume OUT: re-run the cases of an earlier run that are missing or invalid
(with --failed: those that failed), keeping every other result of OUT. A case run again keeps
its earlier result as an attempt (mlagate.results.write): one that failed and then passed is
flaky (mlagate.verdict.outcomes)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mlagate import documents, results
from mlagate.caseid import CaseId
from mlagate.gate import shard
from mlagate.matrix import Matrix
from mlagate.plan import Case

CASES_FILE = "resume-cases.json"


class ResumeError(ValueError):
    """OUT holds no run that can be resumed; one line naming the file."""


@dataclass(frozen=True)
class Target:
    """What a resume re-runs: the earlier run's manifest and the chosen case ids."""

    manifest: dict
    ids: list[str]

    @property
    def aa(self) -> bool:
        return any(CaseId.parse(i).aa for i in self.manifest["cases"])


def manifest(out: Path) -> dict:
    """The manifest of the run in OUT (mlagate.documents; it names the cases it planned)."""
    path = Path(out) / shard.MANIFEST
    if not path.is_file():
        raise ResumeError(f"{path}: no run to resume here (no manifest)")
    try:
        data = documents.load(path, "manifest")
    except documents.DocumentError as exc:
        raise ResumeError(str(exc)) from None
    if "backend" not in data:
        raise ResumeError(f"{path}: no 'backend'")
    try:
        shard.parse_spec(data["shard"])
    except shard.ShardError as exc:
        raise ResumeError(f"{path}: shard: {str(exc).split(': ', 1)[1]}") from None
    return data


def planned(out: Path) -> list[str]:
    return list(manifest(out)["cases"])


def target(out: Path, failed: bool = False) -> Target:
    """The cases to re-run: missing or invalid ones, or (failed) the failing ones."""
    data = manifest(out)
    verdicts = {}
    for path in sorted((Path(out) / "results").glob("*.json")):
        try:
            row = results.read(path)
        except results.ResultError:
            continue  # unreadable: the case counts as missing and runs again
        verdicts[row["case_id"]] = row["verdict"]
    if failed:
        ids = [c for c in data["cases"] if verdicts.get(c) == "fail"]
    else:
        ids = [c for c in data["cases"] if verdicts.get(c) in (None, "invalid")]
    return Target(data, ids)


def pick(cases: list[Case], ids: list[str], matrix: Matrix) -> list[Case]:
    by_id = {c.id: c for c in cases}
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        raise ResumeError(
            f"case {unknown[0]} of the run is not in {matrix.path} (resume with the run's --matrix)"
        )
    return [by_id[i] for i in ids]


def write_cases(out: Path, cases: list[Case]) -> Path:
    path = Path(out) / CASES_FILE
    path.write_text(json.dumps([c.id for c in cases]), encoding="utf-8")
    return path
