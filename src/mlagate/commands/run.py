"""`mlagate run`: the suites on this machine, one JSON result per case under OUT/results/."""

from __future__ import annotations

from pathlib import Path

from mlagate import outcomes, results
from mlagate.commands import args as cargs
from mlagate.commands import runopts
from mlagate.gate import headbase, preflight, shard
from mlagate.gate import run as execute
from mlagate.gate.errors import UsageError
from mlagate.matrix import default_path
from mlagate.plan import Selection


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run suites; write one JSON result per case under OUT/results/")
    cargs.common(p)
    cargs.selection(p)
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output directory (default: reports/latest); held by this run, a second run on it is "
        "refused",
    )
    p.add_argument(
        "-n",
        "--workers",
        type=cargs.workers,
        default=1,
        help="pytest-xdist workers for correctness suites, or auto (one per CPU); "
        "performance suites always run serially",
    )
    p.add_argument(
        "--aa",
        action="store_true",
        help="A/A mode: compare every arm with a second worker of itself (noise floor)",
    )
    p.add_argument(
        "--cpu",
        default="auto",
        help="pin the workers of serial runs to one CPU: auto (Linux: the highest CPU allowed), "
        "none, or a number",
    )
    p.add_argument(
        "--shard",
        default=None,
        metavar="I/N",
        help="run only shard I of N of the selected cases (balanced by cost; performance cases "
        "stay together)",
    )
    p.add_argument(
        "--costs",
        type=Path,
        default=None,
        help="cost table for balancing shards and the time estimate (default: the bundled "
        "costs.json)",
    )
    p.add_argument(
        "--head",
        type=Path,
        default=None,
        metavar="PATH",
        help="a runtime checkout: its working tree is the arm head, compared with its "
        "merge base (mlagate.gate.headbase)",
    )
    p.add_argument(
        "--base",
        default=None,
        metavar="REF",
        help="with --head: the branch or commit head left (default: origin/HEAD, origin/main or "
        "main)",
    )
    runopts.options(p)


def head(args) -> None:
    """run --head: the derived matrix, the modules found in head, and the head arm."""
    if args.head is None:
        raise UsageError("--base goes with --head")
    if args.arm or args.module:
        raise UsageError("--head chooses the arm and the modules: --arm and --module do not apply")
    hb = headbase.prepare(args.matrix or default_path(), args.head, args.base, args.out)
    modules = ", ".join(hb.modules)
    print(f"head {args.head} against base {hb.base_commit[:12]} ({hb.runtime}): {modules}")
    args.matrix, args.module, args.arm = hb.matrix, list(hb.modules), [headbase.HEAD]


def _print_replays(summary) -> None:
    for row in summary.rows:
        if outcomes.outcome(row) != "as expected":  # a control failing as it must needs no replay
            print(f"replay {row['case_id']}: {row['replay']}")
            rep = (row.get("metrics") or {}).get("reproducers")
            if rep:
                where = {
                    k: v
                    for k, v in rep[0].items()
                    if k not in ("arm", "module", "replay", "rounds")
                }
                print(
                    f"  first failing script ({len(rep)} in all): "
                    + " ".join(f"{k}={v}" for k, v in where.items())
                )


def _execute(args, matrix, selection, backend, runner, target, spec, costs):
    return execute.run(
        matrix,
        selection,
        args.profile,
        backend,
        runner,
        args.out,
        cargs.resolve_workers(args.workers, matrix.runners[runner]),
        args.cache,
        aa=args.aa or bool(target and target.aa),
        shard_spec=spec,
        costs=costs,
        cpu=args.cpu,
        verbose=args.verbose,
        only=target.ids if target else None,
    )


def main(args) -> int:
    if args.head is not None or args.base is not None:
        head(args)
    target = runopts.resume_target(args)
    matrix, backend, runner = cargs.context(args)
    selection = Selection(cargs.suites(matrix, args), tuple(args.module), tuple(args.arm))
    spec = shard.parse_spec(args.shard) if args.shard else None
    costs = shard.load_costs(args.costs) if args.costs else None
    preflight.check()
    fitness = runopts.performance_health(args, matrix, selection, backend)
    with runopts.health_recorded(fitness):
        outcome = _execute(args, matrix, selection, backend, runner, target, spec, costs)
    print(results.table(outcome.summary))
    _print_replays(outcome.summary)
    print(f"results: {args.out / 'results'}")
    runopts.print_logs(outcome)
    return outcome.exit_code
