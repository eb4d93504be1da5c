"""`mlagate merge`: shard result folders into one; duplicates refused, gaps reported."""

from __future__ import annotations

from pathlib import Path

from mlagate.gate import merge


def add_parser(sub) -> None:
    p = sub.add_parser(
        "merge",
        help="merge shard result directories into one; refuse duplicates, report missing cases "
        "and shards",
    )
    p.add_argument(
        "dirs",
        nargs="+",
        type=Path,
        help="output directories of mlagate run (or their results/ folders)",
    )
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        help="merged output directory (results/, logs/, merge.json)",
    )
    p.add_argument(
        "--plan",
        type=Path,
        default=None,
        help="the job list written by mlagate plan --manifest: the cases expected",
    )


def main(args) -> int:
    outcome = merge.merge(args.dirs, args.out, args.plan)
    print(outcome.text())
    return outcome.exit_code
