"""`mlagate report`: results rendered as the commit page, JUnit XML, Markdown and merged JSON."""

from __future__ import annotations

from pathlib import Path

from mlagate.report import build
from mlagate.report.merged import ReportError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "report",
        help="render results (folders, .tgz archives or merged.json) as HTML, JUnit XML, Markdown "
        "and merged JSON",
    )
    p.add_argument(
        "sources",
        nargs="+",
        type=Path,
        help="a run's output folder (or its results/), a folder of such, a .tgz of such, or a "
        "merged.json",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("reports/html"),
        help="output directory (default: reports/html)",
    )
    p.add_argument(
        "--history",
        type=Path,
        default=None,
        help="history directory: add this commit to it and rebuild its index",
    )
    p.add_argument(
        "--commit",
        default=None,
        help="commit id (default: $GITHUB_SHA, else the checkout's HEAD, else 'unknown')",
    )
    p.add_argument(
        "--rerender",
        action="store_true",
        help="with --history: re-render every commit page from its merged.json",
    )
    p.add_argument(
        "--mutation",
        type=Path,
        default=None,
        help="add the kill matrix of mlagate mutate (its kill-matrix.json) to the page",
    )


def main(args) -> int:
    if args.rerender and args.history is None:
        raise ReportError("--rerender: needs --history")
    outcome = build.build(
        args.sources, args.out, args.history, args.commit, args.rerender, mutation=args.mutation
    )
    c = outcome.merged["counts"]
    print(
        f"report: {outcome.out / 'index.html'} ({len(outcome.merged['results'])} results: "
        f"{c['pass']} passed, "
        f"{c['fail']} failed, {c['invalid']} invalid, {c['argued']} argued-not-measured; "
        f"{len(outcome.plots)} plots)"
    )
    print(
        f"junit: {outcome.out / 'junit.xml'}  summary: {outcome.out / 'summary.md'}  merged: "
        f"{outcome.out / 'merged.json'}"
    )
    if outcome.history is not None:
        print(f"history: {outcome.history / 'index.html'}")
    return 0
