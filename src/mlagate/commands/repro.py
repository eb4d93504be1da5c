"""`mlagate repro CASE [--config C] --out DIR`: a finding as a standalone script (only the
runtime and MLX), its geometry and seed, and an issue body; run in a fresh virtual environment
holding only the arm's packages, with the answer whether it reproduces."""

from __future__ import annotations

from pathlib import Path

from mlagate.commands import args as cargs
from mlagate.gate import bounds
from mlagate.repro.core import ReproRequest, repro


def add_parser(sub) -> None:
    p = sub.add_parser(
        "repro",
        help="write a finding's standalone reproducer and issue body, run it in a fresh "
        "environment of the arm; exit 1 when it does not do what the matrix expects",
    )
    p.add_argument(
        "case", metavar="CASE", help="a case id: suite::module::arm::geometry::dtype::backend"
    )
    p.add_argument("--config", default=None, help="the configuration whose finding to show")
    p.add_argument("--out", required=True, type=Path, help="where to write the script and issue")
    cargs.common(p)
    p.add_argument("--profile", default="quick", help="the shapes' profile (default: quick)")
    p.add_argument("--no-run", action="store_true", help="write the files only")
    p.add_argument("--venv", type=Path, default=None, help="reuse (or make) the environment here")


def main(args) -> int:
    bounds.out_dir(args.out)
    if args.venv is not None:
        bounds.out_dir(args.venv, "--venv")
    matrix, _, _, _ = cargs.context(args)
    result = repro(
        ReproRequest(
            matrix=matrix,
            case=args.case,
            out=args.out,
            profile=args.profile,
            config=args.config,
            run=not args.no_run,
            venv=args.venv,
        )
    )
    if result.run is not None:
        print(result.run.output)
    print(result.line())
    print(f"issue body: {result.issue}")
    return result.exit_code
