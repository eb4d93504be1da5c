"""Help that knows the matrix: run --help and plan --help list its suites and profiles."""

from __future__ import annotations

import argparse

from mlagate.matrix import MatrixError, load
from mlagate.paths import default_path


def matrix_epilog(path) -> str:
    """The suites (by kind) and profiles of the matrix, for the end of a help text."""
    try:
        matrix = load(path or default_path())
    except MatrixError as exc:
        return f"(the matrix could not be read for this list: {exc})"
    lines = [f"in {matrix.path}:"]
    for kind in ("correctness", "performance"):
        names = [s for s in matrix.suites if matrix.suites[s].kind == kind]
        if names:
            lines.append(f"  {kind} suites: {', '.join(names)}")
    lines.append(f"  profiles: {', '.join(matrix.profiles)}")
    lines.append(f"  runners: {', '.join(matrix.runners)}")
    return "\n".join(lines)


class MatrixHelp(argparse.Action):
    """-h/--help that appends the matrix's suites and profiles (of --matrix, if given first)."""

    def __init__(
        self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None
    ):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.epilog = matrix_epilog(getattr(namespace, "matrix", None))
        parser.print_help()
        parser.exit()


def described(sub) -> None:
    """Every subcommand's help line is also its description (shown by mlagate CMD --help)."""
    add = sub.add_parser

    def add_parser(name, **kw):
        kw.setdefault("description", kw.get("help"))
        if name in ("run", "plan"):
            kw["add_help"] = False
            p = add(name, **kw)
            p.add_argument(
                "-h",
                "--help",
                action=MatrixHelp,
                help="show this help, with the matrix's suites and profiles, and exit",
            )
            return p
        return add(name, **kw)

    sub.add_parser = add_parser
