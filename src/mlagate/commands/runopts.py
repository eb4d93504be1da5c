"""mlagate run's own options: --resume, --failed, -v, --reuse / --no-reuse; and what it prints
after the table."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

from mlagate import results
from mlagate.commands import args as cargs
from mlagate.gate import request, resume, reuse
from mlagate.gate import run as execute
from mlagate.machine import classes, health

DEFAULT_OUT = Path("reports/latest")


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="OUT",
        help="re-run the cases of the run in OUT that are missing or invalid, keeping the rest",
    )
    p.add_argument(
        "--failed", action="store_true", help="with --resume: re-run the failing cases instead"
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="stream pytest's output (tracebacks included) instead of the live progress",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="refuse (exit 3) to time performance suites on a machine unfit by "
        "mlagate health --performance; with --head, a case still failing as on base is red too",
    )
    p.add_argument(
        "--settle",
        type=cargs.number(0, 3600),
        default=120.0,
        metavar="SECONDS",
        help="before timing, wait up to this long while the load alone makes the machine unfit "
        "(a 1-minute load average still holds the last minute's work; default 120, 0: no wait; "
        "no wait with --allow-unfit)",
    )
    p.add_argument(
        "--allow-unfit",
        action="store_true",
        help="keep the verdicts of performance suites timed on a machine unfit by mlagate "
        "health --performance (each result records the override; without it they are invalid)",
    )
    reuse.options(p)


def reuse_store(args) -> request.ReuseStore | None:
    """The result store of a run (--reuse STORE), whether it reads from it (not with
    --no-reuse, which measures every case and still stores the results) and whether it writes
    to it (not with --reuse-read-only); None without --reuse."""
    store, read_only = getattr(args, "reuse", None), getattr(args, "reuse_read_only", False)
    if read_only and store is None:
        raise execute.UsageError("--reuse-read-only: goes with --reuse STORE")
    if read_only and getattr(args, "no_reuse", False):
        raise execute.UsageError("--reuse-read-only: does not go with --no-reuse (nothing to do)")
    into = getattr(args, "reuse_into", None)
    if into is not None and (store is None or read_only):
        raise execute.UsageError("--reuse-into: goes with --reuse STORE, not --reuse-read-only")
    if isinstance(into, str):
        raise execute.UsageError(f"--reuse-into: {into}: a folder, not a git store")
    if store is None:
        return None
    return request.ReuseStore(store, not getattr(args, "no_reuse", False), not read_only, into)


class Refused(ValueError):
    """The machine is unfit for timings and --strict was given: exit 3, nothing measured."""


def this_machine(matrix, runner: str, backend: str, system=None) -> dict:
    """The host a run is on and its class (results record them, performance keys hold the
    class); a class other than the runner's `machine_class` is said on stderr (for timings it
    is also a failed health check: performance_health)."""
    found = classes.of(system or health.System(), backend)
    check = classes.expected(found, runner, matrix.runners[runner].machine_class, False)
    if check is not None and check.status != "ok":
        print(f"mlagate: warning: machine class: {check.detail}", file=sys.stderr)
    return classes.record(found, dict(os.environ))


def performance_health(
    args, matrix, selection, backend: str, system=None, runner: str | None = None
) -> dict | None:
    """Before timing anything: the performance health check (with the runner's expected machine
    class); refuse with --strict, else record it for every performance result (unfit: their
    verdicts are invalid unless --allow-unfit) and warn."""
    suites = selection.suites or tuple(matrix.suites)
    if not any(matrix.suites[s].kind == "performance" for s in suites):
        return None
    if args.strict and getattr(args, "allow_unfit", False):
        raise execute.UsageError("--allow-unfit: does not go with --strict")
    keep_unfit = getattr(args, "allow_unfit", False)
    fitness = health.settled(
        system or health.System(),
        backend,
        0.0 if keep_unfit else getattr(args, "settle", 0.0),  # --allow-unfit keeps them anyway
        on_wait=lambda c: print(
            f"mlagate: waiting up to {args.settle:g} s for the load to settle ({c.detail})",
            file=sys.stderr,
            flush=True,
        ),
        expect=(runner, matrix.runners[runner].machine_class) if runner else None,
    )
    if fitness.failed and args.strict:
        why = "; ".join(f"{c.name}: {c.detail}" for c in fitness.failed)
        raise Refused(
            f"--strict: this machine fails {len(fitness.failed)} performance health check(s) "
            f"({why}); nothing was run"
        )
    record = fitness.record(override=getattr(args, "allow_unfit", False))
    for c in fitness.failed:
        print(f"mlagate: warning: unfit for timings: {c.name}: {c.detail}", file=sys.stderr)
    if fitness.failed:
        print(
            "mlagate: warning: "
            + (
                "--allow-unfit: their verdicts are kept, and each result says so"
                if record["override"]
                else "their timing verdicts will be invalid (--allow-unfit keeps them)"
            ),
            file=sys.stderr,
        )
    return record


@contextlib.contextmanager
def health_recorded(record: dict | None, machine: dict | None = None):
    """While the suites run: the health record and the machine (host and class) in the
    environment the pytest process inherits (mlagate.results.recorded_health and
    recorded_machine), and gone afterwards."""
    told = {results.HEALTH_ENV: record, results.MACHINE_ENV: machine}
    told = {k: json.dumps(v) for k, v in told.items() if v is not None}
    os.environ.update(told)
    try:
        yield
    finally:
        for k in told:
            os.environ.pop(k, None)


def resume_target(args) -> resume.Target | None:
    """Check --resume/--failed against the other options; the run's settings come from OUT
    (the target's out, profile, backend and runner)."""
    if args.failed and args.resume is None:
        raise execute.UsageError("--failed: goes with --resume OUT")
    if args.resume is None:
        return None
    for flag, value in (
        ("--out", args.out),
        ("--suite", args.suite),
        ("--module", args.module),
        ("--arm", args.arm),
        ("--kind", args.kind),
        ("--shard", args.shard),
        ("--profile", args.profile),
    ):
        if value:
            raise execute.UsageError(
                f"{flag}: does not go with --resume (the run in {args.resume} fixes it)"
            )
    target = resume.target(args.resume, args.failed)
    m = target.manifest
    if args.backend and args.backend != m["backend"]:
        raise execute.UsageError(
            f"--backend {args.backend}: the run in {args.resume} used {m['backend']}"
        )
    return target


def print_logs(outcome) -> None:
    for kind, log in outcome.logs.items():
        print(f"pytest output ({kind}, tracebacks included): {log}")


def scan_root(root: Path | None) -> Path:
    """scan --root: as given (a folder), else the git repository around the current folder,
    else the current folder."""
    if root is not None:
        if not root.is_dir():
            raise execute.UsageError(f"--root {root}: not a folder")
        return root
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return Path.cwd()
    return Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else Path.cwd()
