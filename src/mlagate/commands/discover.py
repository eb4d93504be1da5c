"""`mlagate discover PATH`: the MLA classes of a runtime tree, the matrix module each runs as,
and (--write-snippet) the matrix entries for those that match none."""

from __future__ import annotations

from pathlib import Path

from mlagate.commands import args as cargs
from mlagate.gate import bounds
from mlagate.matrix import load
from mlagate.paths import default_path
from mlagate.scan import discovery


def add_parser(sub) -> None:
    p = sub.add_parser(
        "discover",
        help="the MLA classes of a runtime tree and the matrix modules they run as; exit 1 when "
        "one matches none (--write-snippet writes entries for them)",
    )
    cargs.common(p)
    p.add_argument("path", type=Path, help="the runtime tree (what `mlagate run --head` takes)")
    p.add_argument(
        "--write-snippet",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the matrix entries for the classes that match no registered module to FILE",
    )


def text(s: discovery.Survey) -> str:
    how = "derived from its package" if s.derived else "of the matrix"
    lines = [f"{s.runtime.id} (package {s.runtime.package}, {how}): {len(s.found)} MLA classes"]
    for f in s.found:
        where = f"{f.import_path}:{f.attention}"
        if not f.module:
            lines.append(f"  unknown  {where}: {f.why}")
        elif f.reuses == f.module:
            lines.append(f"  known    {where} is {f.module}")
        else:
            lines.append(f"  known    {where} runs as {f.module} ({f.reuses}'s entry)")
    for imp, package in s.foreign:
        lines.append(
            f"  cannot import  {imp}: imports {package}, not {s.runtime.package}: it cannot be "
            "imported where it was found; gate it as an `overlay:` arm (docs/matrix.md#arms)"
        )
    return "\n".join(lines)


def main(args) -> int:
    if args.write_snippet is not None:
        bounds.out_file(args.write_snippet, "--write-snippet")
    s = discovery.survey(load(args.matrix or default_path()), args.path)
    print(text(s))
    if args.write_snippet is not None:
        if s.snippet:
            args.write_snippet.write_text(s.snippet, encoding="utf-8")
            print(
                f"wrote entries for {len(s.unknown)} classes to {args.write_snippet}: paste each "
                f"block under its section in {s.matrix}"
            )
        else:
            print(f"nothing to write to {args.write_snippet}: every class is known")
    return 1 if s.unknown else 3 if s.foreign else 0
