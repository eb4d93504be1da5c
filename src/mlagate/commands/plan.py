"""`mlagate plan`: the matrix expanded into cases (a table, JSON, or the gate's job matrices).
Imports nothing of the worker, the harness or pytest (mlagate.gate.planning)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from mlagate.commands import args as cargs
from mlagate.errors import UsageError
from mlagate.gate import planning, reuse, shard
from mlagate.matrix import load
from mlagate.paths import default_path
from mlagate.plan import Selection


def add_parser(sub) -> None:
    p = sub.add_parser(
        "plan", help="expand the matrix into cases; fail if an arm holds an unregistered MLA module"
    )
    cargs.common(p)
    cargs.selection(p)
    p.add_argument(
        "--format",
        choices=("table", "json", "github"),
        default="table",
        help="github: KEY=VALUE lines for $GITHUB_OUTPUT (the gate's job matrices)",
    )
    p.add_argument(
        "--shards",
        type=cargs.count(1, 10**9),
        default=1,
        help="with --format github: correctness shards per runner",
    )
    p.add_argument(
        "--manifest",
        type=Path,
        default=None,
        help="with --format github: write the job list (every job's case ids) here, for "
        "mlagate merge --plan",
    )
    p.add_argument(
        "--costs",
        type=Path,
        default=None,
        help="cost table for balancing shards (default: the bundled costs.json)",
    )
    reuse.options(p, run=False)


def github(args) -> int:
    """KEY=VALUE lines for $GITHUB_OUTPUT: the job matrices of every gate runner (or of
    --runner)."""
    matrix = load(args.matrix or default_path())
    runner = args.runner or os.environ.get("MLAGATE_RUNNER")
    if runner is not None and runner not in matrix.runners:
        raise UsageError(
            f"--runner: unknown runner label {runner!r} (matrix has {', '.join(matrix.runners)})"
        )
    runners = [runner] if runner else [label for label, r in matrix.runners.items() if r.gate]
    if not runners:
        raise UsageError(f"{matrix.path}: no runner has gate: true; give --runner")
    if args.suite or args.module or args.arm or args.kind:
        raise UsageError(
            "plan --format github plans the whole matrix: --suite, --module, --arm and --kind do "
            "not apply"
        )
    if args.profile is not None and args.profile not in matrix.profiles:
        raise UsageError(
            f"--profile: unknown profile {args.profile!r} (matrix has {', '.join(matrix.profiles)})"
        )
    costs = shard.load_costs(args.costs) if args.costs else None
    gate = planning.gate_plan(
        matrix, runners, args.shards, args.cache, args.profile, costs, trust_unchanged=True
    )
    for key, value in gate.outputs().items():
        print(f"{key}={value}")
    if args.manifest:
        args.manifest.parent.mkdir(parents=True, exist_ok=True)
        args.manifest.write_text(json.dumps(gate.to_json(), indent=1))
    return 0


def _reuse_line(matrix, outcome, backend, store) -> str:
    from mlagate.gate.reuse import apply  # hashing files: only when asked

    return apply.plan_line(matrix, outcome, backend, store)


def main(args) -> int:
    if args.format == "github":
        if args.reuse is not None:
            raise UsageError("--reuse goes with --format table or json")
        return github(args)
    if args.shards != 1 or args.manifest:
        raise UsageError("--shards and --manifest go with --format github")
    matrix, backend, runner, profile = cargs.context(args)
    selection = Selection(cargs.suites(matrix, args), tuple(args.module), tuple(args.arm))
    outcome = planning.plan(
        matrix, selection, profile, backend, runner, args.cache, trust_unchanged=True
    )
    if args.format == "json":
        print(json.dumps([c.to_json() for c in outcome.cases], indent=1))
        if args.reuse is not None:  # stdout stays the JSON document
            print(_reuse_line(matrix, outcome, backend, args.reuse), file=sys.stderr)
    else:
        print(
            f"{'suite':12} {'module':34} {'arm':24} {'geometry / checkpoint':24} {'dtype':9} "
            "evidence"
        )
        for c in outcome.cases:
            print(
                f"{c.suite:12} {c.module:34} {c.arm:24} {(c.checkpoint or c.geometry):24} "
                f"{c.dtype:9} {c.evidence}"
            )
        print(planning.footer(outcome.cases, shard.load_costs(args.costs) if args.costs else None))
        for c in outcome.skipped:
            print(f"not planned: {c.id}: {c.expectation}")
        if args.reuse is not None:
            print(_reuse_line(matrix, outcome, backend, args.reuse))
    for gap in outcome.gaps:
        print(
            f"mlagate: error: arm {gap.arm} holds MLA modules that {matrix.path} does not "
            "register: "
            f"{', '.join(gap.missing)}",
            file=sys.stderr,
        )
    return outcome.exit_code
