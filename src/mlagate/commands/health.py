"""`mlagate health`: is this machine fit to run the gate? One line per check, and the machine
class (mlagate.machine.classes); with --runner, checked against the class that runner expects."""

from __future__ import annotations

from pathlib import Path

from mlagate import backends
from mlagate.commands import args as cargs
from mlagate.errors import UsageError
from mlagate.machine import health


def add_parser(sub) -> None:
    p = sub.add_parser(
        "health",
        help="is this machine fit to run the gate? one line per check; exit 1 when one fails",
    )
    p.add_argument(
        "--performance",
        action="store_true",
        help="the stricter checks of a performance runner (idle, cool, on AC power)",
    )
    p.add_argument(
        "--backend",
        choices=backends.names(),
        default=None,
        help="the MLX backend expected (default: metal on macOS, else cpu)",
    )
    p.add_argument(
        "--min-free-gb",
        type=cargs.number(0, 1e6),
        default=None,
        help="free memory required (default: 8, or 16 with --performance)",
    )
    p.add_argument(
        "--runner",
        default=None,
        help="the runner label this machine serves: its backend and the machine class it "
        "expects (runners.LABEL.machine_class) are checked",
    )
    p.add_argument(
        "--matrix",
        type=Path,
        default=None,
        help="with --runner: matrix file (default: ./matrix.yaml, else the bundled one)",
    )
    p.add_argument("--format", choices=("text", "json"), default="text")


def main(args) -> int:
    backend, expect = args.backend, None
    if args.runner is not None:
        matrix, backend, runner, _ = cargs.context(args)
        expect = (runner, matrix.runners[runner].machine_class)
    elif args.matrix is not None:
        raise UsageError("--matrix: goes with --runner")
    fitness = health.check(
        health.System(),
        performance=args.performance,
        backend=backend or backends.default_backend(),
        min_free_gb=args.min_free_gb,
        expect=expect,
    )
    print(fitness.json() if args.format == "json" else fitness.text())
    return fitness.exit_code
