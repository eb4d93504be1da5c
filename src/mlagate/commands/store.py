"""`mlagate store {stats,push,prune,verify} STORE`: the result store for people (STORE: a
folder or git+URL[#BRANCH], mlagate.store). A thin shell over mlagate.store.ops. Exit 0; 1 when
verify finds an entry that does not re-derive; 2 on bad input (a store that cannot be opened)."""

from __future__ import annotations

from mlagate.commands import args as cargs
from mlagate.errors import UsageError
from mlagate.gate import reuse


def add_parser(sub) -> None:
    p = sub.add_parser("store", help="the result store: stats, push, prune, verify")
    verbs = p.add_subparsers(dest="store_verb", required=True, metavar="VERB")
    for name, what in (
        ("stats", "entries and bytes, by suite and machine class"),
        ("verify", "every entry re-derives its key and its result's digest (exit 1 if not)"),
    ):
        verbs.add_parser(name, help=what).add_argument("store", type=reuse.store_arg)
    push = verbs.add_parser("push", help="folder stores' entries into a git store, one commit")
    push.add_argument("store", nargs="+", type=reuse.store_arg, help="folder stores")
    push.add_argument("target", type=reuse.store_arg, help="git+URL[#BRANCH]")
    prune = verbs.add_parser(
        "prune", help="drop old entries, never one the matrix's plan (the newest main) would reuse"
    )
    prune.add_argument("store", type=reuse.store_arg)
    prune.add_argument("--keep-days", type=cargs.number(0, 10**5), default=None)
    prune.add_argument("--keep-commits", type=cargs.count(1, 10**9), default=None)
    cargs.common(prune)
    cargs.selection(prune)


def _protected(args) -> set[str]:
    """The keys of every case the matrix plans (what the newest main run would reuse)."""
    from mlagate.gate import planning
    from mlagate.gate.reuse.keys import Deriver
    from mlagate.plan import Selection

    matrix, backend, runner, profile = cargs.context(args)
    selection = Selection(cargs.suites(matrix, args), tuple(args.module), tuple(args.arm))
    outcome = planning.plan(
        matrix, selection, profile, backend, runner, args.cache, trust_unchanged=True
    )
    deriver = Deriver(matrix, outcome.installs, backend)
    return {deriver.key(c).digest for c in outcome.cases if c.evidence != "argued"}


def main(args) -> int:
    from mlagate.store import is_git, open_store, ops

    verb = args.store_verb
    if verb == "push":
        if any(map(is_git, args.store)) or not is_git(args.target):
            raise UsageError("store push: from folder stores to a git+URL store")
        sources = [open_store(s, write=False) for s in args.store]
        done = ops.push(sources, open_store(args.target, write=True))
    elif verb == "prune":
        if args.keep_days is None and args.keep_commits is None:
            raise UsageError("store prune: give --keep-days, --keep-commits or both")
        protect = _protected(args)
        st = open_store(args.store, write=True)
        done = ops.prune(st, args.keep_days, args.keep_commits, protect)
    else:
        done = getattr(ops, verb)(open_store(args.store, write=False))
    print("\n".join(done.lines()))
    return 1 if verb == "verify" and done.refused else 0
