"""The commits of a runtime tree between a good and a bad end, read from git."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from mlagate.errors import UsageError


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:12]


def git(tree: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(
            ["git", "-C", str(tree), *args], capture_output=True, text=True, timeout=120
        )
    except FileNotFoundError:
        raise UsageError("--head: git is not installed") from None
    if check and proc.returncode != 0:
        first = next((ln for ln in proc.stderr.splitlines() if ln.strip()), "")
        raise UsageError(f"--head {tree}: git {' '.join(args)}: {first.strip()}")
    return proc


def resolve(tree: Path, rev: str, flag: str) -> str:
    """The commit a revision names; a revision that names none is one line (exit 2)."""
    if not (tree / ".git").exists() and git(tree, "rev-parse", "--git-dir", check=False).returncode:
        raise UsageError(f"--head {tree}: not a git checkout")
    proc = git(tree, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise UsageError(f"{flag} {rev}: no such revision in {tree}")
    return proc.stdout.strip()


def between(tree: Path, good: str, bad: str) -> list[Commit]:
    """The commits after good up to bad (bad last), on the ancestry path, oldest first; good must
    be an ancestor of bad (check_ends)."""
    check_ends(tree, good, bad)
    out = git(
        tree, "log", "--reverse", "--ancestry-path", "--format=%H %s", f"{good}..{bad}"
    ).stdout
    commits = [Commit(*(ln.split(" ", 1) + [""])[:2]) for ln in out.splitlines() if ln]
    return commits


def check_ends(tree: Path, good: str, bad: str) -> None:
    if good == bad:
        raise UsageError(f"--good and --bad name the same commit {good[:12]}")
    if git(tree, "merge-base", "--is-ancestor", good, bad, check=False).returncode != 0:
        raise UsageError(f"--good {good[:12]}: is not an ancestor of --bad {bad[:12]}")


def subject(tree: Path, sha: str) -> str:
    return git(tree, "log", "-1", "--format=%s", sha).stdout.strip()


def diff_stat(tree: Path, parent: str, sha: str, files: list[str]) -> list[dict]:
    """Lines added and removed by commit sha (against parent) in the given files of the tree."""
    if not files:
        return []
    out = git(tree, "diff", "--numstat", parent, sha, "--", *files).stdout
    rows = []
    for ln in out.splitlines():
        added, removed, name = ln.split("\t", 2)
        rows.append({"file": name, "added": _num(added), "removed": _num(removed)})
    return rows


def _num(text: str) -> int:
    return int(text) if text.isdigit() else 0
