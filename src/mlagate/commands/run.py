"""`mlagate run`: the suites on this machine, one JSON result per case under OUT/results/."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mlagate import headrun, results
from mlagate.arm.arms import ArmError
from mlagate.commands import args as cargs
from mlagate.commands import runopts
from mlagate.errors import UsageError
from mlagate.gate import headbase, preflight, shard
from mlagate.gate import run as execute
from mlagate.gate.request import RunRequest, ShardSpec
from mlagate.matrix import MatrixError
from mlagate.paths import default_path
from mlagate.plan import PlanError, Selection
from mlagate.verdict import outcomes


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
        type=cargs.cpu,
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


def head(args) -> headbase.HeadBase:
    """run --head: the derived matrix, the modules found in head, and the arms head and base."""
    if args.head is None:
        raise UsageError("--base goes with --head")
    if args.arm or args.module:
        raise UsageError("--head chooses the arm and the modules: --arm and --module do not apply")
    if args.resume is not None:
        raise UsageError(f"--head: does not go with --resume (the run in {args.resume} fixes it)")
    if args.shard:
        raise UsageError(
            "--head: does not go with --shard (a case runs on head and base in one run)"
        )
    hb = headbase.prepare(
        args.matrix or default_path(), args.head, args.base, _out(args), args.strict
    )
    modules = ", ".join(hb.modules)
    print(f"head {args.head} against base {hb.base_commit[:12]} ({hb.runtime}): {modules}")
    return hb


def _out(args) -> Path:
    """OUT: the resumed run's folder, else --out, else a head run's or a plain run's default."""
    if args.resume is not None:
        return args.resume
    if args.out is not None:
        return args.out
    return headbase.default_out(args.head) if args.head is not None else runopts.DEFAULT_OUT


def request(args, hb: headbase.HeadBase | None, target) -> RunRequest:
    """The run the command line asks for, --head (hb) and --resume (target) resolved here."""
    settings = {}
    if target is not None:
        m = target.manifest
        settings = {"runner": args.runner or m["runner"], "backend": m["backend"]}
        settings["profile"] = m["profile"]
    matrix, backend, runner, profile = cargs.context(args, hb and hb.matrix, **settings)
    modules, arms = (hb.modules, (headbase.HEAD, headbase.BASE)) if hb else (args.module, args.arm)
    selection = Selection(cargs.suites(matrix, args), tuple(modules), tuple(arms))
    selection.check(matrix)  # an unknown suite, module or arm: one line before anything runs
    return RunRequest(
        matrix,
        selection,
        profile,
        backend,
        runner,
        _out(args),
        cargs.resolve_workers(args.workers, matrix.runners[runner]),
        args.cache,
        aa=args.aa or bool(target and target.aa),
        shard=ShardSpec.parse(args.shard) if args.shard is not None else None,
        costs=shard.load_costs(args.costs) if args.costs else None,
        cpu=args.cpu,
        verbose=args.verbose,
        only=tuple(target.ids) if target else None,
        reuse=runopts.reuse_store(args),
    )


def _planned(summary) -> list[str]:
    return [r["case_id"] for r in summary.rows] + list(summary.missing)


def _print_replays(rows) -> None:
    """A replay command for each row given (not a control failing as it must: it needs none)."""
    for row in rows:
        print(f"replay {row['case_id']}: {row['replay']}")
        rep = (row.get("metrics") or {}).get("reproducers")
        if rep:
            where = {
                k: v for k, v in rep[0].items() if k not in ("arm", "module", "replay", "rounds")
            }
            print(
                f"  first failing script ({len(rep)} in all): "
                + " ".join(f"{k}={v}" for k, v in where.items())
            )


def main(args) -> int:
    if args.head is None and args.base is None:
        return _main(args, None)
    hb = head(args)
    try:
        return _main(args, hb)
    except (MatrixError, UsageError, PlanError, ArmError) as exc:  # the user's matrix, named
        raise headbase.HeadBaseError(headbase.user_message(str(exc), hb)) from None


def _main(args, hb: headbase.HeadBase | None) -> int:
    runopts.reuse_store(args)  # --reuse options that do not go together: before anything runs
    target = runopts.resume_target(args)
    if hb is None and target is None:
        headrun.retire(_out(args))  # a plain run in a head run's OUT is no head run
    req = request(args, hb, target)
    preflight.check()
    here = runopts.this_machine(req.matrix, req.runner, req.backend)
    req = dataclasses.replace(req, machine=here)
    fitness = runopts.performance_health(
        args, req.matrix, req.selection, req.backend, runner=req.runner
    )
    with runopts.health_recorded(fitness, req.machine):
        outcome = execute.run(req)
    out = req.out
    judged = headrun.of(out, outcome.summary.rows, _planned(outcome.summary))
    if judged is not None and (hb is not None or target is not None):
        print(headrun.table(judged))
        _print_replays(
            r for r in judged.rows if r["outcome"] not in ("as expected", headrun.FIXED_BY_CHANGE)
        )
        record = out / "headbase" / headrun.RECORD
        print(f"results: {out / 'results'} (head's and base's; what was compared: {record})")
        runopts.print_logs(outcome)
        return judged.exit_code
    print(results.table(outcome.summary))
    _print_replays(r for r in outcome.summary.rows if outcomes.outcome(r) != "as expected")
    print(f"results: {out / 'results'}")
    runopts.print_logs(outcome)
    return outcome.exit_code
