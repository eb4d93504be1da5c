"""The command line: a thin shell over the verbs of mlagate.commands. Exit status 2 for bad
input (one line, no traceback), 3 when a run is refused."""

from __future__ import annotations

import os
import signal
import sys

from mlagate import __version__, packs, results
from mlagate import arms as arms_mod
from mlagate.commands import args as cargs
from mlagate.commands import (
    arms,
    compare,
    costs,
    discover,
    health,
    merge,
    plan,
    report,
    run,
    runopts,
    scan,
)
from mlagate.commands import help as chelp
from mlagate.gate import headbase, outdir, preflight, resume, shard
from mlagate.gate import merge as merging
from mlagate.gate.errors import UsageError
from mlagate.matrix import MatrixError
from mlagate.mutate import cli as mutate
from mlagate.plan import PlanError
from mlagate.report.merged import ReportError
from mlagate.report.mutation import KillMatrixError

VERBS = {
    "plan": plan,
    "arms": arms,
    "scan": scan,
    "discover": discover,
    "run": run,
    "merge": merge,
    "compare": compare,
    "costs": costs,
    "health": health,
    "report": report,
    "mutate": mutate,
}
BAD_INPUT = (
    outdir.FolderBusy,
    resume.ResumeError,
    preflight.PreflightError,
    packs.PackError,
    KillMatrixError,
    MatrixError,
    UsageError,
    PlanError,
    headbase.HeadBaseError,
    arms_mod.ArmError,
    results.ResultError,
    ReportError,
    shard.ShardError,
    merging.MergeError,
)


def parser() -> cargs.Parser:
    ap = cargs.Parser(
        prog="mlagate",
        description="Validation suite and PR gate for multi-head latent attention in MLX runtimes.",
    )
    ap.add_argument("--version", action="version", version=f"mlagate {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=cargs.Parser)
    chelp.described(sub)
    for name, verb in VERBS.items():
        if name == "mutate":
            verb.add_parser(sub, cargs.common, cargs.workers)
        else:
            verb.add_parser(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        cargs.check_outputs(args)
        return VERBS[args.command].main(args)
    except BAD_INPUT as exc:
        print(f"mlagate: error: {exc}", file=sys.stderr)
        return 2
    except runopts.Refused as exc:
        print(f"mlagate: refused: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("mlagate: interrupted; results written so far are kept", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`mlagate plan | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
