"""What the verbs share: the parser class, the common options, the matrix and runner a
command works on, and the output paths checked before anything runs."""

from __future__ import annotations

import argparse
import math
import os
import re
from pathlib import Path

from mlagate import backends
from mlagate.errors import UsageError
from mlagate.gate import bounds
from mlagate.machine import runners
from mlagate.matrix import load
from mlagate.paths import default_path


class Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)  # a typo is an error, never another option
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"mlagate: error: {message}\n")


def common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--matrix",
        type=Path,
        default=None,
        help="matrix file (default: ./matrix.yaml, else the bundled one)",
    )
    p.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="arm cache directory (default: $MLAGATE_CACHE or ~/.cache/mlagate)",
    )


def selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", action="append", default=[], help="only this suite (repeatable)")
    p.add_argument("--module", action="append", default=[], help="only this module (repeatable)")
    p.add_argument("--arm", action="append", default=[], help="only this arm (repeatable)")
    p.add_argument(
        "--kind",
        choices=("correctness", "performance"),
        default=None,
        help="only the suites of this kind",
    )
    p.add_argument(
        "--profile",
        default=None,
        help="quick (2-core CPU) or full (GPU / Apple Silicon); default: the runner's profile in "
        "the matrix, else quick",
    )
    p.add_argument(
        "--backend",
        choices=backends.names(),
        default=None,
        help="MLX backend (default: the runner's declared backend; the runner "
        "defaults to "
        "the first of metal on macOS, else cpu)",
    )
    p.add_argument(
        "--runner",
        default=None,
        help="runner label (default: $MLAGATE_RUNNER, else the first label of the backend)",
    )


AUTO = 0  # `-n auto`: one worker per CPU, at most the runner's `workers`
MAX_WORKERS = 1024
_DIGITS = re.compile(r"[0-9]{1,9}", re.ASCII)


def _shown(text: str) -> str:
    return repr(text[:40])


def count(low: int, high: int, what: str = "a number"):
    """An argparse type: ASCII digits only (no sign, space, '_' or other scripts' digits), an
    integer in [low, high]."""

    def parse(text: str) -> int:
        if not _DIGITS.fullmatch(text):
            raise argparse.ArgumentTypeError(f"expected {what}, got {_shown(text)}")
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {low} to {high}, got {value}")
        return value

    return parse


def number(low: float, high: float):
    """An argparse type: a finite decimal number in [low, high] (no nan, inf or 1e309)."""

    def parse(text: str) -> float:
        if not re.fullmatch(r"[0-9]+(\.[0-9]*)?|\.[0-9]+", text, flags=re.ASCII):
            raise argparse.ArgumentTypeError(f"expected a number, got {_shown(text)}")
        value = float(text)
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"expected {low:g} to {high:g}, got {_shown(text)}")
        return value

    return parse


def workers(text: str) -> int:
    if text == "auto":
        return AUTO
    return count(1, MAX_WORKERS, "a number or auto")(text)


def cpu(text: str) -> str:
    """`--cpu`: auto, none or a CPU number."""
    if text in ("auto", "none"):
        return text
    return str(count(0, 65535, "auto, none or a CPU number")(text))


def resolve_workers(n: int, runner) -> int:
    """`-n N` as given; `-n auto` one per CPU, capped by the runner's `workers` (a GPU runner
    whose memory holds fewer workers than it has CPUs)."""
    if n != AUTO:
        return n
    return min(os.cpu_count() or 1, runner.workers or os.cpu_count() or 1)


def context(args, matrix=None, runner=None, backend=None, profile=None):
    """The matrix, backend, runner and profile of a command: those given here (a head run's
    matrix, a resumed run's settings), else the command line's; the runner's profile when no
    profile is given. The parsed arguments stay as they are."""
    matrix = load(matrix or args.matrix or default_path())
    if runner is None:
        runner = getattr(args, "runner", None)
    if backend is None:
        backend = getattr(args, "backend", None)
    try:
        runner, backend = runners.chosen(matrix, runner, backend)
    except runners.BackendError as exc:
        raise UsageError(str(exc)) from None
    if profile is None:
        profile = getattr(args, "profile", None)
    if profile is None:
        profile = matrix.runners[runner].profile or "quick"
    return matrix, backend, runner, profile


def suites(matrix, args) -> tuple[str, ...]:
    """--suite narrowed by --kind."""
    if not args.kind:
        return tuple(args.suite)
    for s in args.suite:
        if s in matrix.suites and matrix.suites[s].kind != args.kind:
            raise UsageError(f"--suite {s} is a {matrix.suites[s].kind} suite, not {args.kind}")
    chosen = tuple(args.suite) or tuple(
        s for s in matrix.suites if matrix.suites[s].kind == args.kind
    )
    if not chosen:
        raise UsageError(f"--kind: {matrix.path} has no {args.kind} suites")
    return chosen


def check_outputs(args) -> None:
    """Every output path named on the command line can be written, before anything runs."""
    if args.command in ("run", "merge", "report") and args.out is not None:
        bounds.out_dir(args.out)
    if args.command == "report" and args.history is not None:
        bounds.out_dir(args.history, "--history")
    if getattr(args, "cache", None) is not None:
        bounds.out_dir(args.cache, "--cache")
    for flag, attr in (("--out", "out"), ("--manifest", "manifest"), ("--export", "export")):
        if args.command in ("costs", "plan", "arms") and getattr(args, attr, None) is not None:
            bounds.out_file(getattr(args, attr), flag)
