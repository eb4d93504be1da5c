"""The command line: a thin shell over mlagate.gate.run. Exit status 2 for bad input, no traceback."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from mlagate import __version__, backends, clihelp, outcomes, packs, results, runcli
from mlagate import arms as arms_mod
from mlagate.gate import bounds, compare, headbase, health, merge, outdir, preflight, resume, shard
from mlagate.gate import run as execute
from mlagate.matrix import BACKENDS, MatrixError, default_path, load
from mlagate.mutate import cli as mutate_cli
from mlagate.plan import PlanError, Selection
from mlagate.report import build as report_build
from mlagate.report import merged as merged_doc
from mlagate.report import mutation as report_mutation
from mlagate.scan import formats as findings
from mlagate.scan import guards as scanner


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)  # a typo is an error, never another option
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"mlagate: error: {message}\n")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--matrix", type=Path, default=None, help="matrix file (default: ./matrix.yaml, else the bundled one)")
    p.add_argument("--cache", type=Path, default=None, help="arm cache directory (default: $MLAGATE_CACHE or ~/.cache/mlagate)")


def _selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", action="append", default=[], help="only this suite (repeatable)")
    p.add_argument("--module", action="append", default=[], help="only this module (repeatable)")
    p.add_argument("--arm", action="append", default=[], help="only this arm (repeatable)")
    p.add_argument("--kind", choices=("correctness", "performance"), default=None, help="only the suites of this kind")
    p.add_argument("--profile", default=None, help="quick (2-core CPU) or full (GPU / Apple Silicon); default: the runner's profile in the matrix, else quick")
    p.add_argument("--backend", choices=BACKENDS, default=None, help="MLX backend: cpu, metal or cuda (default: the runner's declared backend; the runner defaults to the first of metal on macOS, else cpu)")
    p.add_argument("--runner", default=None, help="runner label (default: $MLAGATE_RUNNER, else the first label of the backend)")


def _workers(text: str) -> int:
    if text == "auto":
        return os.cpu_count() or 1
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or auto, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="mlagate", description="Validation suite and PR gate for multi-head latent attention in MLX runtimes.")
    ap.add_argument("--version", action="version", version=f"mlagate {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    clihelp.described(sub)

    p = sub.add_parser("plan", help="expand the matrix into cases; fail if an arm holds an unregistered MLA module")
    _common(p)
    _selection(p)
    p.add_argument("--format", choices=("table", "json", "github"), default="table",
                   help="github: KEY=VALUE lines for $GITHUB_OUTPUT (the gate's job matrices)")
    p.add_argument("--shards", type=int, default=1, help="with --format github: correctness shards per runner")
    p.add_argument("--manifest", type=Path, default=None, help="with --format github: write the plan (every job's case ids) here, for mlagate merge --plan")
    p.add_argument("--costs", type=Path, default=None, help="cost table for balancing shards (default: the bundled costs.json)")

    p = sub.add_parser("arms", help="materialise and check the arms")
    _common(p)
    p.add_argument("--arm", action="append", default=[], help="only this arm (repeatable)")
    p.add_argument("--export", type=Path, default=None, help="pack the materialised arms into this .tar.gz")
    p.add_argument("--import", dest="import_", type=Path, default=None, help="unpack an exported arm cache first")
    p.add_argument("--keys", action="store_true", help="only print each arm's cache key, installing nothing (the arms runners/cleanup.sh keeps)")
    p.add_argument("--verify", action="store_true", help="check each installed arm against its content manifest, installing nothing; exit 1 when one changed")

    p = sub.add_parser("scan", help="find single-query guards on MLA and indexer fast paths in source code")
    _common(p)
    p.add_argument("paths", nargs="*", type=Path, help="files or folders to scan")
    p.add_argument("--arm", default=None, help="scan this arm of the matrix (materialised first)")
    p.add_argument("--format", choices=("text", "json", "sarif", "github"), default="text")
    p.add_argument("--root", type=Path, default=None, help="paths in findings are relative to this folder, where SARIF and annotations resolve (default: the git repository's root, else the current folder)")

    p = sub.add_parser("run", help="run suites; write one JSON result per case under OUT/results/")
    _common(p)
    _selection(p)
    p.add_argument("--out", type=Path, default=None, help="output directory (default: reports/latest); held by this run, a second run on it is refused")
    p.add_argument("-n", "--workers", type=_workers, default=1, help="pytest-xdist workers for correctness suites, or auto (one per CPU); performance suites always run serially")
    p.add_argument("--aa", action="store_true", help="A/A mode: compare every arm with a second worker of itself (noise floor)")
    p.add_argument("--cpu", default="auto", help="pin the workers of serial runs to one CPU: auto (Linux: the highest CPU allowed), none, or a number")
    p.add_argument("--shard", default=None, metavar="I/N", help="run only shard I of N of the selected cases (balanced by cost; performance cases stay together)")
    p.add_argument("--costs", type=Path, default=None, help="cost table for balancing shards and the time estimate (default: the bundled costs.json)")
    p.add_argument("--head", type=Path, default=None, metavar="PATH",
                   help="a runtime checkout: its working tree is the arm head, compared with its "
                   "merge base (mlagate.gate.headbase)")
    p.add_argument("--base", default=None, metavar="REF",
                   help="with --head: the branch or commit head left (default: origin/HEAD, origin/main or main)")
    runcli.options(p)

    p = sub.add_parser("merge", help="merge shard result directories into one; refuse duplicates, report missing cases and shards")
    p.add_argument("dirs", nargs="+", type=Path, help="output directories of mlagate run (or their results/ folders)")
    p.add_argument("--out", type=Path, required=True, help="merged output directory (results/, logs/, merge.json)")
    p.add_argument("--plan", type=Path, default=None, help="the plan written by mlagate plan --manifest: the cases expected")

    p = sub.add_parser("compare", help="what changed from run A to run B: verdicts, key figures with intervals; exit 1 when anything got worse")
    p.add_argument("a", help="the earlier run: an output folder, results/ folder, .tgz or merged.json (with --history: a commit)")
    p.add_argument("b", help="the later run, as A")
    p.add_argument("--history", type=Path, default=None, help="A and B are commits of this history directory")
    p.add_argument("--format", choices=("text", "json"), default="text")

    p = sub.add_parser("costs", help="derive the shard cost table from results on disk")
    p.add_argument("dirs", nargs="+", type=Path, help="output directories of mlagate run (or their results/ folders)")
    p.add_argument("--out", type=Path, default=None, help="write the table here (default: print it)")

    p = sub.add_parser("health", help="is this machine fit to run the gate? one line per check; exit 1 when one fails")
    p.add_argument("--performance", action="store_true", help="the stricter checks of a performance runner (idle, cool, on AC power)")
    p.add_argument("--backend", choices=BACKENDS, default=None, help="the MLX backend expected: cpu, metal or cuda (default: metal on macOS, else cpu)")
    p.add_argument("--min-free-gb", type=float, default=None, help="free memory required (default: 8, or 16 with --performance)")
    p.add_argument("--format", choices=("text", "json"), default="text")

    p = sub.add_parser("report", help="render results (folders, .tgz archives or merged.json) as HTML, JUnit XML, Markdown and merged JSON")
    p.add_argument("sources", nargs="+", type=Path, help="a run's output folder (or its results/), a folder of such, a .tgz of such, or a merged.json")
    p.add_argument("--out", type=Path, default=Path("reports/html"), help="output directory (default: reports/html)")
    p.add_argument("--history", type=Path, default=None, help="history directory: add this commit to it and rebuild its index")
    p.add_argument("--commit", default=None, help="commit id (default: $GITHUB_SHA, else the checkout's HEAD, else 'unknown')")
    p.add_argument("--rerender", action="store_true", help="with --history: re-render every commit page from its merged.json")
    p.add_argument("--mutation", type=Path, default=None, help="add the kill matrix of mlagate mutate (its kill-matrix.json) to the page")

    mutate_cli.add_parser(sub, _common, _workers)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return _dispatch(args)
    except (outdir.FolderBusy, resume.ResumeError, preflight.PreflightError, packs.PackError, report_mutation.KillMatrixError) as exc:
        print(f"mlagate: error: {exc}", file=sys.stderr)
        return 2
    except (MatrixError, execute.UsageError, PlanError, headbase.HeadBaseError, arms_mod.ArmError, results.ResultError, merged_doc.ReportError, shard.ShardError, merge.MergeError) as exc:
        print(f"mlagate: error: {exc}", file=sys.stderr)
        return 2
    except runcli.Refused as exc:
        print(f"mlagate: refused: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("mlagate: interrupted; results written so far are kept", file=sys.stderr)
        return 2


def _context(args):
    matrix = load(args.matrix or default_path())
    try:
        runner, backend = backends.chosen(matrix, getattr(args, "runner", None), getattr(args, "backend", None))
    except backends.BackendError as exc:
        raise execute.UsageError(str(exc)) from None
    if getattr(args, "profile", None) is None:
        args.profile = matrix.runners[runner].profile or "quick"
    return matrix, backend, runner


def _suites(matrix, args) -> tuple[str, ...]:
    """--suite narrowed by --kind."""
    if not args.kind:
        return tuple(args.suite)
    for s in args.suite:
        if s in matrix.suites and matrix.suites[s].kind != args.kind:
            raise execute.UsageError(f"--suite {s} is a {matrix.suites[s].kind} suite, not {args.kind}")
    chosen = tuple(args.suite) or tuple(s for s in matrix.suites if matrix.suites[s].kind == args.kind)
    if not chosen:
        raise execute.UsageError(f"--kind: {matrix.path} has no {args.kind} suites")
    return chosen


def _github_plan(args) -> int:
    """KEY=VALUE lines for $GITHUB_OUTPUT: the job matrices of every gate runner (or of --runner)."""
    matrix = load(args.matrix or default_path())
    runner = args.runner or os.environ.get("MLAGATE_RUNNER")
    if runner is not None and runner not in matrix.runners:
        raise execute.UsageError(f"--runner: unknown runner label {runner!r} (matrix has {', '.join(matrix.runners)})")
    runners = [runner] if runner else [label for label, r in matrix.runners.items() if r.gate]
    if not runners:
        raise execute.UsageError(f"{matrix.path}: no runner has gate: true; give --runner")
    if args.suite or args.module or args.arm or args.kind:
        raise execute.UsageError("plan --format github plans the whole matrix: --suite, --module, --arm and --kind do not apply")
    if args.profile is not None and args.profile not in matrix.profiles:
        raise execute.UsageError(f"--profile: unknown profile {args.profile!r} (matrix has {', '.join(matrix.profiles)})")
    gate = execute.gate_plan(matrix, runners, args.shards, args.cache, args.profile, shard.load_costs(args.costs) if args.costs else None)
    for key, value in gate.outputs().items():
        print(f"{key}={value}")
    if args.manifest:
        args.manifest.parent.mkdir(parents=True, exist_ok=True)
        args.manifest.write_text(json.dumps(gate.to_json(), indent=1))
    return 0


def _scan(args) -> int:
    matrix = load(args.matrix or default_path())
    paths = list(args.paths)
    runtimes = set(matrix.runtimes)
    if args.arm:
        if args.arm not in matrix.arms:
            raise execute.UsageError(f"--arm: unknown arm {args.arm!r} (matrix has {', '.join(matrix.arms)})")
        arm = matrix.arms[args.arm]
        inst = arms_mod.materialise(arm, matrix.runtimes[arm.runtime], args.cache)
        paths.append(inst.site / inst.runtime.package)
        runtimes = {arm.runtime}
    if not paths:
        raise execute.UsageError("scan: give one or more paths, or --arm")
    for p in paths:
        if not p.exists():
            raise execute.UsageError(f"scan: {p}: no such file or directory")
    registered = {(m.import_path, m.attention_for(a.id)) for m in matrix.modules.values() if m.runtime in runtimes for a in matrix.arms_for(m)}
    report = scanner.scan(paths, matrix.allowlist, registered, runcli.scan_root(args.root))
    print(findings.FORMATS[args.format](report))
    return report.exit_code


def _report(args) -> int:
    if args.rerender and args.history is None:
        raise merged_doc.ReportError("--rerender: needs --history")
    outcome = report_build.build(args.sources, args.out, args.history, args.commit, args.rerender, mutation=args.mutation)
    c = outcome.merged["counts"]
    print(f"report: {outcome.out / 'index.html'} ({len(outcome.merged['results'])} results: {c['pass']} passed, {c['fail']} failed, "
          f"{c['invalid']} invalid, {c['argued']} argued-not-measured; {len(outcome.plots)} plots)")
    print(f"junit: {outcome.out / 'junit.xml'}  summary: {outcome.out / 'summary.md'}  merged: {outcome.out / 'merged.json'}")
    if outcome.history is not None:
        print(f"history: {outcome.history / 'index.html'}")
    return 0


def _check_outputs(args) -> None:
    """Every output path named on the command line can be written, before anything runs."""
    if args.command in ("run", "merge", "report") and args.out is not None:
        bounds.out_dir(args.out)
    if args.command == "report" and args.history is not None:
        bounds.out_dir(args.history, "--history")
    for flag, attr in (("--out", "out"), ("--manifest", "manifest"), ("--export", "export")):
        if args.command in ("costs", "plan", "arms") and getattr(args, attr, None) is not None:
            bounds.out_file(getattr(args, attr), flag)


def _verify_arms(matrix, args) -> int:
    """One line per arm of the matrix: ok, not installed, or what changed."""
    Selection(arms=tuple(args.arm)).check(matrix)
    root = args.cache or arms_mod.cache_root()
    changed = 0
    for arm in matrix.arms.values():
        if args.arm and arm.id not in args.arm:
            continue
        folder = root / "arms" / arms_mod.arm_key(arm)
        if not (folder / "arm.json").is_file():
            print(f"{arm.id:28} not installed")
            continue
        try:
            packs.verify(folder)
            print(f"{arm.id:28} ok  {folder}")
        except packs.PackError as exc:
            changed += 1
            print(f"{arm.id:28} CHANGED  {exc}")
    return 1 if changed else 0


def _head(args) -> None:
    """run --head: the derived matrix, the modules found in head, and the head arm."""
    if args.head is None:
        raise execute.UsageError("--base goes with --head")
    if args.arm or args.module:
        raise execute.UsageError(
            "--head chooses the arm and the modules: --arm and --module do not apply")
    hb = headbase.prepare(args.matrix or default_path(), args.head, args.base, args.out)
    modules = ", ".join(hb.modules)
    print(f"head {args.head} against base {hb.base_commit[:12]} ({hb.runtime}): {modules}")
    args.matrix, args.module, args.arm = hb.matrix, list(hb.modules), [headbase.HEAD]


def _dispatch(args) -> int:
    _check_outputs(args)
    if args.command == "mutate":
        return mutate_cli.main(args)
    if args.command == "report":
        return _report(args)
    if args.command == "scan":
        return _scan(args)
    if args.command == "compare":
        text, code = compare.run(args.a, args.b, args.history, args.format)
        print(text)
        return code
    if args.command == "merge":
        outcome = merge.merge(args.dirs, args.out, args.plan)
        print(outcome.text())
        return outcome.exit_code
    if args.command == "costs":
        rows = [r for d in args.dirs for r in results.load_dir(merge.results_dir(d))]
        if not rows:
            raise execute.UsageError(f"costs: no results in {', '.join(map(str, args.dirs))}")
        table = json.dumps(shard.derive_costs(rows, ", ".join(map(str, args.dirs))), indent=1)
        if args.out:
            args.out.write_text(table + "\n")
            print(f"wrote {args.out} from {len(rows)} results")
        else:
            print(table)
        return 0
    if args.command == "health":
        fitness = health.check(health.System(), performance=args.performance, backend=args.backend or backends.default_backend(), min_free_gb=args.min_free_gb)
        print(fitness.json() if args.format == "json" else fitness.text())
        return fitness.exit_code
    if args.command == "plan" and args.format == "github":
        return _github_plan(args)
    if args.command == "plan" and (args.shards != 1 or args.manifest):
        raise execute.UsageError("--shards and --manifest go with --format github")
    if args.command == "arms":
        if args.import_:
            keys = arms_mod.import_cache(args.import_, args.cache)
            print(f"imported {len(keys)} arms from {args.import_}")
        matrix = load(args.matrix or default_path())
        if args.verify:
            return _verify_arms(matrix, args)
        if args.keys:
            Selection(arms=tuple(args.arm)).check(matrix)
            for arm in matrix.arms.values():
                if not args.arm or arm.id in args.arm:
                    print(arms_mod.arm_key(arm))
            return 0
        installs = execute.installs_for(matrix, Selection(arms=tuple(args.arm)), args.cache)
        for inst in installs.values():
            print(f"{inst.arm.id:28} {inst.arm.role:8} {inst.runtime.distribution} {inst.version:10} {inst.key}  {inst.site}")
        if args.export:
            arms_mod.export(installs, args.export)
            print(f"exported {len(installs)} arms to {args.export}")
        return 0

    if args.command == "run" and (args.head is not None or args.base is not None):
        _head(args)
    target = runcli.resume_target(args) if args.command == "run" else None
    matrix, backend, runner = _context(args)
    selection = Selection(_suites(matrix, args), tuple(args.module), tuple(args.arm))
    if args.command == "plan":
        outcome = execute.plan(matrix, selection, args.profile, backend, runner, args.cache, aa=getattr(args, "aa", False))
        if args.format == "json":
            print(json.dumps([c.to_json() for c in outcome.cases], indent=1))
        elif args.format == "github":
            print(json.dumps({"include": [c.to_json() for c in outcome.cases]}))
        else:
            print(f"{'suite':12} {'module':34} {'arm':24} {'geometry / checkpoint':24} {'dtype':9} evidence")
            for c in outcome.cases:
                print(f"{c.suite:12} {c.module:34} {c.arm:24} {(c.checkpoint or c.geometry):24} {c.dtype:9} {c.evidence}")
            print(runcli.plan_footer(outcome.cases, matrix, shard.load_costs(args.costs) if args.costs else None))
            for c in outcome.skipped:
                print(f"not planned: {c.id}: {c.expectation}")
        for gap in outcome.gaps:
            print(f"mlagate: error: arm {gap.arm} holds MLA modules that {matrix.path} does not register: {', '.join(gap.missing)}", file=sys.stderr)
        return outcome.exit_code

    spec = shard.parse_spec(args.shard) if args.shard else None
    costs = shard.load_costs(args.costs) if args.costs else None
    preflight.check()
    runcli.performance_health(args, matrix, selection, backend)
    outcome = execute.run(matrix, selection, args.profile, backend, runner, args.out, args.workers, args.cache, aa=args.aa or bool(target and target.aa),
                          shard_spec=spec, costs=costs, cpu=args.cpu, verbose=args.verbose, only=target.ids if target else None)
    print(results.table(outcome.summary))
    for row in outcome.summary.rows:
        if outcomes.outcome(row) != "as expected":  # a control failing as it must needs no replay
            print(f"replay {row['case_id']}: {row['replay']}")
            rep = (row.get("metrics") or {}).get("reproducers")
            if rep:
                where = {k: v for k, v in rep[0].items() if k not in ("arm", "module", "replay", "rounds")}
                print(f"  first failing script ({len(rep)} in all): " + " ".join(f"{k}={v}" for k, v in where.items()))
    print(f"results: {args.out / 'results'}")
    runcli.print_logs(outcome)
    return outcome.exit_code
