"""`mlagate health`: is this machine fit to run the gate? One line per check."""

from __future__ import annotations

from mlagate import backends
from mlagate.commands import args as cargs
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
    p.add_argument("--format", choices=("text", "json"), default="text")


def main(args) -> int:
    fitness = health.check(
        health.System(),
        performance=args.performance,
        backend=args.backend or backends.default_backend(),
        min_free_gb=args.min_free_gb,
    )
    print(fitness.json() if args.format == "json" else fitness.text())
    return fitness.exit_code
