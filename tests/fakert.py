"""A fake runtime repository: a git repo of the fake runtime's GoodAttention module, whose
main branch holds the L == 1 guards (or the fix) and whose branch `pr` changes them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.conftest import FIXTURES

FIX = FIXTURES / "fake-fix.patch"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def fake_tree(dest: Path) -> None:
    """The fake runtime with only its GoodAttention module (the one the gate matrix registers)."""
    src = FIXTURES / "fakemla-tree" / "fakemla"
    (dest / "fakemla" / "models").mkdir(parents=True)
    shutil.copy(src / "__init__.py", dest / "fakemla")
    for name in ("__init__.py", "base.py", "cache.py", "good.py"):
        shutil.copy(src / "models" / name, dest / "fakemla" / "models")


def git(repo: Path, *args: str, env: dict | None = None) -> str:
    proc = subprocess.run(
        ["git", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **GIT_ENV, **(env or {})},
    )
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout.strip()


def runtime_repo(repo: Path, head: str, env: dict | None = None) -> Path:
    """head: "fix" (main has the guards, pr applies the fix), "regress" (main has the fix,
    pr puts `L == 1` back) or "unrelated" (main has the guards, pr edits a docstring). The
    checkout is left on pr."""
    fake_tree(repo)
    git(repo, "init", "--quiet", "--initial-branch", "main", env=env)
    if head == "regress":
        git(repo, "apply", str(FIX), env=env)
    git(repo, "add", "--all", env=env)
    git(repo, "commit", "--quiet", "-m", "main", env=env)
    git(repo, "checkout", "--quiet", "-b", "pr", env=env)
    if head == "unrelated":
        init = repo / "fakemla" / "__init__.py"
        init.write_text('"""The fake runtime (an unrelated edit)."""\n' + init.read_text())
    else:
        git(repo, "apply", *(["--reverse"] if head == "regress" else []), str(FIX), env=env)
    git(repo, "commit", "--quiet", "-am", f"pr: {head}", env=env)
    return repo
