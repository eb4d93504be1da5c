"""`mlagate scan`: single-query guards on MLA and indexer fast paths in Python and Rust source.

Exit status: 0 clean, 1 an unallowlisted finding, 2 bad input (a path that does not exist, a
FIFO or a device), 3 nothing scanned (no file could be parsed).
"""

from __future__ import annotations

from pathlib import Path

from mlagate.arm import arms as arms_mod
from mlagate.commands import args as cargs
from mlagate.commands import runopts
from mlagate.errors import UsageError
from mlagate.matrix import load
from mlagate.paths import default_path
from mlagate.scan import formats, guards, model


def add_parser(sub) -> None:
    p = sub.add_parser(
        "scan",
        help="find single-query guards on MLA and indexer fast paths in source code (Python, Rust)",
    )
    cargs.common(p)
    p.add_argument("paths", nargs="*", type=Path, help="files or folders to scan")
    p.add_argument("--arm", default=None, help="scan this arm of the matrix (materialised first)")
    p.add_argument("--format", choices=("text", "json", "sarif", "github"), default="text")
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="worker processes for a large tree (default: the CPUs this process may use)",
    )
    p.add_argument(
        "--root",
        type=Path,
        default=None,
        help="paths in findings are relative to this folder, where SARIF and annotations resolve "
        "(default: the git repository's root, else the current folder)",
    )


def main(args) -> int:
    matrix = load(args.matrix or default_path())
    paths = list(args.paths)
    runtimes = set(matrix.runtimes)
    if args.arm:
        if args.arm not in matrix.arms:
            raise UsageError(
                f"--arm: unknown arm {args.arm!r} (matrix has {', '.join(matrix.arms)})"
            )
        arm = matrix.arms[args.arm]
        inst = arms_mod.materialise(arm, matrix.runtimes[arm.runtime], args.cache)
        paths.append(inst.site / inst.runtime.package)
        runtimes = {arm.runtime}
    if not paths:
        raise UsageError("scan: give one or more paths, or --arm")
    for p in paths:
        if not p.exists():
            raise UsageError(f"scan: {p}: no such file or directory")
        what = model.special(p)
        if what:  # a FIFO or a device would block or never end: refused before it is opened
            raise UsageError(f"scan: {p}: {what}, not a source file or folder")
    registered = {
        (m.import_path, m.attention_for(a.id))
        for m in matrix.modules.values()
        if m.runtime in runtimes
        for a in matrix.arms_for(m)
    }
    if args.jobs is not None and not 1 <= args.jobs <= 64:
        raise UsageError(f"--jobs {args.jobs}: give 1 to 64 worker processes")
    report = guards.scan(
        paths, matrix.allowlist, registered, runopts.scan_root(args.root), jobs=args.jobs
    )
    print(formats.FORMATS[args.format](report))
    return report.exit_code
