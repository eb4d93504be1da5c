"""`mlagate compare A B`: what changed between two runs, exit 1 when anything got worse."""

from __future__ import annotations

from pathlib import Path

from mlagate.report import compare


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="what changed from run A to run B: verdicts, key figures with intervals; exit 1 when "
        "anything got worse",
    )
    p.add_argument(
        "a",
        help="the earlier run: an output folder, results/ folder, .tgz or merged.json (with "
        "--history: a commit)",
    )
    p.add_argument("b", help="the later run, as A")
    p.add_argument(
        "--history", type=Path, default=None, help="A and B are commits of this history directory"
    )
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 also on any case whose verdict or outcome differs (better ones included) "
        "or that only one of A and B has: a change that must not change behaviour",
    )


def main(args) -> int:
    text, code = compare.run(args.a, args.b, args.history, args.format, args.strict)
    print(text)
    return code
