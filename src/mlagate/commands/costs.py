"""`mlagate costs`: the shard cost table derived from results on disk."""

from __future__ import annotations

import json
from pathlib import Path

from mlagate import results, safefiles
from mlagate.errors import UsageError
from mlagate.gate import merge, shard


def add_parser(sub) -> None:
    p = sub.add_parser("costs", help="derive the shard cost table from results on disk")
    p.add_argument(
        "dirs",
        nargs="+",
        type=Path,
        help="output directories of mlagate run (or their results/ folders)",
    )
    p.add_argument(
        "--out", type=Path, default=None, help="write the table here (default: print it)"
    )


def _rows(folder: Path) -> list[dict]:
    """The results of one folder; a case id in two of its files is refused."""
    seen: dict[tuple[str, str], Path] = {}
    rows = []
    for path in merge.result_files(folder):
        row = results.read(path)
        key = (row.get("runner", ""), row["case_id"])
        if key in seen:
            raise UsageError(
                f"case {row['case_id'][:200]} is in two result files: {seen[key]} and {path}"
            )
        seen[key] = path
        rows.append(row)
    return rows


def main(args) -> int:
    if not all(d.is_dir() for d in args.dirs):
        raise UsageError(f"costs: {next(d for d in args.dirs if not d.is_dir())}: not a folder")
    rows = [r for d in args.dirs for r in _rows(d)]
    names = ", ".join(safefiles.shown(d) for d in args.dirs)
    if not rows:
        raise UsageError(f"costs: no results in {names}")
    table = json.dumps(shard.derive_costs(rows, names), indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        safefiles.write_text(args.out, table + "\n")
        print(f"wrote {args.out} from {len(rows)} results")
    else:
        print(table)
    return 0
