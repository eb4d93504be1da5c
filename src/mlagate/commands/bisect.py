"""`mlagate bisect`: the commit of a runtime tree's history where a case's verdict changed."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

from mlagate.arm.arms import cache_root
from mlagate.bisect import document, history, timing
from mlagate.bisect import run as bisecting
from mlagate.bisect.request import BisectRequest
from mlagate.caseid import CaseId, CaseIdError
from mlagate.commands import args as cargs
from mlagate.commands import runopts
from mlagate.errors import UsageError
from mlagate.gate import headbase
from mlagate.gate.request import ReuseStore
from mlagate.gate.reuse import store_arg
from mlagate.plan import Selection

DEFAULT_OUT = Path("reports/bisect")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bisect", help="find the commit of a runtime tree where a case's verdict changed"
    )
    cargs.common(p)
    p.add_argument("--head", type=Path, required=True, metavar="TREE",
                   help="the runtime checkout whose history is bisected")  # fmt: skip
    p.add_argument("--good", required=True, metavar="REV", help="a commit where the case passes")
    p.add_argument("--bad", required=True, metavar="REV", help="a later commit where it fails")
    p.add_argument("--case", action="append", default=[], metavar="ID",
                   help="a case id (its arm is the commit's tree; repeatable)")  # fmt: skip
    p.add_argument("--suite", action="append", default=[], help="the cases of this suite")
    p.add_argument("--module", action="append", default=[], help="the cases of this module")
    for flag, what in (("--profile", "quick or full"), ("--backend", "MLX backend"),
                       ("--runner", "runner label")):  # fmt: skip
        p.add_argument(flag, default=None, help=what + " (as for run)")
    p.add_argument("--out", type=Path, default=None,
                   help=f"output folder (default: {DEFAULT_OUT})")  # fmt: skip
    p.add_argument(
        "--reuse",
        type=store_arg,
        default=None,
        metavar="STORE",
        help="the result store every measurement goes through (default: CACHE/store): a "
        "second bisection over the same history measures nothing again; a git store "
        "(git+URL[#BRANCH]) is only read, what the bisection measures goes to CACHE/store",
    )
    p.add_argument("--max-commits", type=cargs.count(2, 100000), default=None,
                   help="try at most this many commits (the ends included)")  # fmt: skip
    p.add_argument("--budget-s", type=cargs.number(1, 10**7), default=None,
                   help="start no commit after this many seconds")  # fmt: skip
    p.add_argument("-n", "--workers", type=cargs.workers, default=1, help="as for run")
    p.add_argument("--cpu", type=cargs.cpu, default="auto", help="as for run")
    p.add_argument("--allow-unfit", action="store_true",
                   help="keep the timings of a machine unfit for them (as for run)")  # fmt: skip
    p.set_defaults(strict=False, settle=0.0)


def _selection(args, matrix) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(suites, modules, case ids on the arm head) the command line names."""
    cases = []
    for text in args.case:
        try:
            cases.append(CaseId.parse(text, "--case").on_arm(headbase.HEAD))
        except CaseIdError as exc:
            raise UsageError(str(exc)) from None
    suites = tuple(dict.fromkeys([*args.suite, *(c.suite for c in cases)]))
    modules = tuple(dict.fromkeys([*args.module, *(c.module for c in cases)]))
    if not suites:
        raise UsageError("name the cases: --case ID, or --suite (and --module)")
    for s in suites:
        if s not in matrix.suites:
            raise UsageError(f"--suite {s}: no such suite in {matrix.path}")
    for m in modules:
        if m not in matrix.modules:
            raise UsageError(f"--module {m}: no such module in {matrix.path}")
    if len({matrix.suites[s].kind for s in suites}) > 1:
        raise UsageError("bisect one kind at a time: correctness or performance suites")
    paired = {matrix.suites[s].baseline for s in suites if matrix.suites[s].kind == "performance"}
    if len(paired) > 1:
        raise UsageError(
            "bisect suites compared with base (l1_parity) apart from those with their own "
            "bound (marginal_cost, speculative, crossover)"
        )
    return suites, modules, tuple(str(c) for c in cases)


def request(args) -> BisectRequest:
    matrix, backend, runner, profile = cargs.context(args)
    tree = args.head.resolve()
    if not tree.is_dir():
        raise UsageError(f"--head {args.head}: no such directory")
    good = history.resolve(tree, args.good, "--good")
    bad = history.resolve(tree, args.bad, "--bad")
    history.check_ends(tree, good, bad)
    suites, modules, cases = _selection(args, matrix)
    out = (args.out or DEFAULT_OUT).resolve()
    if out.is_relative_to(tree):
        raise UsageError(f"--out {out}: lies inside --head {tree}; choose a folder outside it")
    local = (args.cache or cache_root()) / "store"
    store = ReuseStore(local)
    if isinstance(args.reuse, str):  # a shared git store: read, never published to
        store = ReuseStore(args.reuse, into=local)
    elif args.reuse is not None:
        store = ReuseStore(Path(args.reuse))
    return BisectRequest(
        tree, good, bad, matrix, suites, modules, cases, profile, backend, runner, out,
        store, cargs.resolve_workers(args.workers, matrix.runners[runner]),
        args.cache, args.cpu, args.max_commits, args.budget_s,
        shlex.join(["mlagate", *map(str, sys.argv[1:])]),
    )  # fmt: skip


def main(args) -> int:
    started = time.monotonic()
    req = request(args)
    kind = req.matrix.suites[req.suites[0]].kind
    fitness = runopts.performance_health(args, req.matrix, Selection(req.suites), req.backend)
    with runopts.health_recorded(fitness):  # every timing says how fit the machine was
        outcome = (timing if kind == "performance" else bisecting).run(req)
    doc = document.build(req, outcome, time.monotonic() - started, kind)
    path, page = document.write(req.out, doc)
    print(f"bisect: {outcome.message}")
    for c in doc["culprits"]:
        print(f"culprit {c['commit'][:12]} {c['subject']}")
        for s in c["diff_stat"]:
            print(f"  {s['file']}: +{s['added']} -{s['removed']}")
        for r in c["replay"]:
            print(f"  replay: {r}")
    print(f"tried {len(doc['tried'])} of {doc['commits_in_range']} commits: {path} ({page})")
    return outcome.exit_code
