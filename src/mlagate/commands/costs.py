"""`mlagate costs`: the shard cost table derived from results on disk."""

from __future__ import annotations

import json
from pathlib import Path

from mlagate import results
from mlagate.gate import merge, shard
from mlagate.gate.errors import UsageError


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


def main(args) -> int:
    rows = [r for d in args.dirs for r in results.load_dir(merge.results_dir(d))]
    if not rows:
        raise UsageError(f"costs: no results in {', '.join(map(str, args.dirs))}")
    table = json.dumps(shard.derive_costs(rows, ", ".join(map(str, args.dirs))), indent=1)
    if args.out:
        args.out.write_text(table + "\n")
        print(f"wrote {args.out} from {len(rows)} results")
    else:
        print(table)
    return 0
