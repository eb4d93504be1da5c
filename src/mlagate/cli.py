"""The command line: a thin shell over the verbs of mlagate.commands, with one exit-code table
for every verb (mlagate.verdict.outcomes, docs/gate.md): 0 green, 1 red, 2 bad input or usage (one
line, no traceback), 3 could not measure or missing (a refusal to measure on an unfit machine
among them), 130 interrupted, 141 the reader went away."""

from __future__ import annotations

import importlib
import os
import signal
import sys

from mlagate import __version__
from mlagate.commands import args as cargs
from mlagate.commands import help as chelp
from mlagate.verdict import outcomes

# each verb's module, imported only when that verb runs (or for the full help): `mlagate plan`
# then imports nothing of the worker, the harness or pytest
VERBS = {
    "plan": "mlagate.commands.plan",
    "arms": "mlagate.commands.arms",
    "scan": "mlagate.commands.scan",
    "discover": "mlagate.commands.discover",
    "run": "mlagate.commands.run",
    "merge": "mlagate.commands.merge",
    "compare": "mlagate.commands.compare",
    "costs": "mlagate.commands.costs",
    "health": "mlagate.commands.health",
    "report": "mlagate.commands.report",
    "calibrate": "mlagate.commands.calibrate",
    "store": "mlagate.commands.store",
    "repro": "mlagate.commands.repro",
    "bisect": "mlagate.commands.bisect",
    "mutate": "mlagate.mutate.cli",
}
# bad input (exit 2), by module and class: a class whose module was never imported was not raised
BAD_INPUT = (
    ("mlagate.gate.outdir", "FolderBusy"),
    ("mlagate.gate.resume", "ResumeError"),
    ("mlagate.gate.preflight", "PreflightError"),
    ("mlagate.arm.packs", "PackError"),
    ("mlagate.report.mutation", "KillMatrixError"),
    ("mlagate.matrix.model", "MatrixError"),
    ("mlagate.errors", "UsageError"),
    ("mlagate.plan", "PlanError"),
    ("mlagate.gate.headbase", "HeadBaseError"),
    ("mlagate.arm.arms", "ArmError"),
    ("mlagate.results", "ResultError"),
    ("mlagate.report.merged", "ReportError"),
    ("mlagate.gate.shard", "ShardError"),
    ("mlagate.gate.merge", "MergeError"),
    ("mlagate.caseid", "CaseIdError"),
)
REFUSED = (("mlagate.commands.runopts", "Refused"),)
CANNOT_MEASURE = (("mlagate.scan.importable", "Unimportable"),)  # exit 3: nothing could run


def _raised(table) -> tuple[type, ...]:
    return tuple(getattr(sys.modules[m], n) for m, n in table if m in sys.modules)


def parser(verb: str | None = None) -> cargs.Parser:
    """The command line; with a verb, only that verb's subcommand is built (and imported)."""
    ap = cargs.Parser(
        prog="mlagate",
        description="Validation suite and PR gate for multi-head latent attention in MLX runtimes.",
    )
    ap.add_argument("--version", action="version", version=f"mlagate {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=cargs.Parser)
    chelp.described(sub)
    for name, module in VERBS.items():
        if verb is not None and name != verb:
            continue
        cmd = importlib.import_module(module)
        if name == "mutate":
            cmd.add_parser(sub, cargs.common, cargs.workers)
        else:
            cmd.add_parser(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a path echoed as its bytes, whatever the encoding
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")
    given = sys.argv[1:] if argv is None else argv
    verb = given[0] if given and given[0] in VERBS else None
    args = parser(verb).parse_args(argv)
    try:
        cargs.check_outputs(args)
        return importlib.import_module(VERBS[args.command]).main(args)
    except KeyboardInterrupt:
        print("mlagate: interrupted; results written so far are kept", file=sys.stderr)
        return outcomes.INTERRUPTED
    except BrokenPipeError:  # the reader went away (`mlagate plan | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except Exception as exc:
        if isinstance(exc, _raised(BAD_INPUT)):
            print(f"mlagate: error: {exc}", file=sys.stderr)
            return outcomes.BAD_INPUT
        if isinstance(exc, _raised(REFUSED)):  # nothing measured: the machine could not give one
            print(f"mlagate: refused: {exc}", file=sys.stderr)
            return outcomes.NOT_MEASURED
        if isinstance(exc, _raised(CANNOT_MEASURE)):
            print(f"mlagate: cannot measure: {exc}", file=sys.stderr)
            return outcomes.NOT_MEASURED
        raise
