"""The input corpora of tests/input_fuzz.py in full: per kind, the cases and how each ended.

    python benchmarks/input_fuzz.py [--kind cli|documents|history|packs] [--jobs 2] [-v]

Prints the table of docs/reliability.md (cases, clean, traceback, hang, bad input accepted,
good input refused, refusal not one line, wrote outside) and the slowest case.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import input_corpora, input_fuzz  # noqa: E402

KINDS = ("cli", "documents", "history", "packs")
COLUMNS = (
    "traceback",
    "hang",
    "bad input accepted",
    "good input refused",
    "refusal not one",
    "wrote outside",
)


def corpus(kind: str, work: Path) -> list:
    if kind == "cli":
        return input_corpora.cli_cases(10_000)
    if kind == "documents":
        return input_fuzz.document_cases(10_000)
    if kind == "history":
        return input_corpora.history_cases(10_000)
    return input_corpora.pack_cases(10_000, work / "pack")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", action="append", choices=KINDS, default=[])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mlagate-fuzz-"))
    print("| input | cases | clean | " + " | ".join(COLUMNS) + " | slowest |")
    print("|---" * (len(COLUMNS) + 4) + "|")
    for kind in args.kind or KINDS:
        cases = corpus(kind, work)
        t0 = time.monotonic()
        with ThreadPoolExecutor(args.jobs) as pool:
            verdicts = list(
                pool.map(
                    lambda ic, k=kind: input_fuzz.judge(ic[1], work / k / str(ic[0])),
                    enumerate(cases),
                )
            )
        tally = Counter()
        for v in verdicts:
            for p in v.problems:
                tally[next(c for c in COLUMNS if p.startswith(c))] += 1
            if args.verbose and v.problems:
                print(f"  {kind}: {v.case.name}: {v.problems[0][:200]}", file=sys.stderr)
        clean = sum(not v.problems for v in verdicts)
        slow = max(verdicts, key=lambda v: v.seconds)
        print(
            f"| {kind} | {len(verdicts)} | {clean} | "
            + " | ".join(str(tally[c]) for c in COLUMNS)
            + f" | {slow.seconds:.1f} s ({slow.case.name}); all in {time.monotonic() - t0:.0f} s |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
