"""Results reused by key: `keys` (what a case's verdict depends on, hashed), `apply` (inside one
`mlagate run --reuse STORE`); the store itself is mlagate.store (a folder or a git remote).
This module holds only the command-line options, so a verb's parser imports nothing more."""

from __future__ import annotations

import argparse
from pathlib import Path

GIT_PREFIX = "git+"  # mlagate.store.GIT_PREFIX (not imported: the parser stays light)


def store_arg(text: str) -> Path | str:
    """--reuse STORE: a folder, or a path where one can be made; or git+URL[#BRANCH] (checked
    when the store is opened)."""
    if not text or "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r}: not a folder name")
    if text.startswith(GIT_PREFIX):
        if len(text) == len(GIT_PREFIX) or text.endswith("#"):
            raise argparse.ArgumentTypeError(f"{text}: expected git+URL[#BRANCH]")
        return text
    path = Path(text)
    try:
        if path.exists() and not path.is_dir():
            raise argparse.ArgumentTypeError(f"{text}: exists and is not a folder")
        for parent in path.parents:
            if parent.exists():
                if not parent.is_dir():
                    raise argparse.ArgumentTypeError(f"{text}: {parent} is not a folder")
                break
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text}: {exc.strerror or exc}") from None
    return path


def options(p: argparse.ArgumentParser, run: bool = True) -> None:
    """--reuse STORE (and for run, --no-reuse): the result store (mlagate.gate.reuse)."""
    p.add_argument(
        "--reuse",
        type=store_arg,
        default=None,
        metavar="STORE",
        help="result store (a folder, or git+URL[#BRANCH]): take each case's stored result when "
        "its key (what its verdict depends on) matches and the verdict was pass or fail; measure "
        "the rest and store them"
        if run
        else "result store (a folder, or git+URL[#BRANCH]): say how many cases a run with "
        "--reuse STORE would take from it",
    )
    if run:
        p.add_argument(
            "--no-reuse",
            action="store_true",
            help="measure every case (with --reuse STORE: the new results are still stored)",
        )
        p.add_argument(
            "--reuse-read-only",
            action="store_true",
            help="with --reuse STORE: take results from it, store nothing (a pull request's gate "
            "reads main's results and never writes them)",
        )
        p.add_argument(
            "--reuse-into",
            type=store_arg,
            default=None,
            metavar="FOLDER",
            help="with --reuse STORE: read STORE, write this run's results into the folder store "
            "FOLDER instead (a CI job's artifact; `mlagate store push FOLDER STORE` publishes it)",
        )
