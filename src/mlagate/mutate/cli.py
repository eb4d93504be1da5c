"""The `mlagate mutate` verb: arguments in, mutate.run.mutate out, the kill matrix printed."""

from __future__ import annotations

import argparse
from pathlib import Path

from mlagate import backends
from mlagate.commands import args as cargs
from mlagate.gate import run as execute
from mlagate.gate import shard
from mlagate.machine import runners
from mlagate.matrix import load
from mlagate.mutate import killmatrix, operators, run
from mlagate.paths import default_path


def add_parser(sub, common, workers) -> None:
    p = sub.add_parser(
        "mutate",
        help="mutants of the patched dispatch code through the correctness suites: the kill matrix",
    )
    common(p)
    p.add_argument(
        "--arm",
        action="append",
        default=[],
        help="only mutants of this patched or head arm (repeatable; default: every one)",
    )
    p.add_argument(
        "--module", action="append", default=[], help="only mutants of this module (repeatable)"
    )
    p.add_argument(
        "--operator",
        action="append",
        default=[],
        choices=sorted(operators.OPERATORS),
        help="only this operator (repeatable)",
    )
    p.add_argument(
        "--suite",
        action="append",
        default=[],
        help="only this correctness suite (repeatable; default: all, cheapest first)",
    )
    p.add_argument(
        "--mutant",
        action="append",
        default=[],
        help="only this mutant id, or a glob over ids (repeatable; replays one)",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="run every suite on every mutant (the full matrix) instead of stopping at the first "
        "kill",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("reports/mutate"),
        help="output directory (default: reports/mutate)",
    )
    p.add_argument(
        "-n", "--workers", type=workers, default=1, help="pytest-xdist workers per round, or auto"
    )
    p.add_argument(
        "--costs",
        type=Path,
        default=None,
        help="cost table that orders the suites, cheapest first (default: the bundled costs.json)",
    )
    p.add_argument(
        "--profile", default=None, help="profile (default: the runner's in the matrix, else quick)"
    )
    p.add_argument(
        "--backend",
        choices=backends.names(),
        default=None,
        help="MLX backend (default: the runner's declared backend)",
    )
    p.add_argument(
        "--runner",
        default=None,
        help="runner label (default: $MLAGATE_RUNNER, else the first of the backend)",
    )


def main(args: argparse.Namespace) -> int:
    matrix = load(args.matrix or default_path())
    try:
        runner, backend = runners.chosen(matrix, args.runner, args.backend)
    except runners.BackendError as exc:
        raise execute.UsageError(str(exc)) from None
    profile = args.profile or matrix.runners[runner].profile or "quick"
    if profile not in matrix.profiles:
        raise execute.UsageError(
            f"--profile: unknown profile {profile!r} (matrix has {', '.join(matrix.profiles)})"
        )
    opts = run.Options(
        arms=tuple(args.arm),
        modules=tuple(args.module),
        operators=tuple(args.operator),
        suites=tuple(args.suite),
        mutants=tuple(args.mutant),
        all=args.all,
        out=args.out,
        workers=cargs.resolve_workers(args.workers, matrix.runners[runner]),
        cache=args.cache,
        profile=profile,
        backend=backend,
        runner=runner,
    )
    doc = run.mutate(matrix, opts, shard.load_costs(args.costs))
    print(killmatrix.text(doc))
    print(f"kill matrix: {args.out / killmatrix.FILE}  page: {args.out / 'kill-matrix.html'}")
    c = doc["counts"]
    return 1 if c["survived"] or c["only invalid"] or c["no control"] else 0
