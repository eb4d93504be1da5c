"""The runner layout and scripts: no credential or code outside jobs is the job user's, the
token never reaches a file or an argument, and pull-request jobs read main's arms without
writing them (the cache separation, run for real through mlagate's arm cache)."""

import re
import subprocess
from pathlib import Path

import pytest

from mlagate import matrix
from mlagate.arm import arms

from .conftest import ROOT

RUNNERS = ROOT / "runners"
JOB_SCRATCH = {"runner/_work", "runner/_diag", "arms-pr"}


def _layout() -> dict[str, tuple[str, int]]:
    out = {}
    for line in (RUNNERS / "layout.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            path, owner, mode = line.split()
            out[path] = (owner, int(mode, 8))
    return out


def test_only_the_jobs_scratch_folders_belong_to_the_job_user():
    layout = _layout()
    assert {p for p, (owner, _) in layout.items() if owner == "job"} == JOB_SCRATCH
    for path, (owner, mode) in layout.items():
        assert owner in ("svc", "job"), path
        assert mode & 0o022 == 0, f"{path} is writable by group or others"
    assert layout["svc"] == ("svc", 0o700), (
        "the service user's folder (gh's token) is closed to jobs"
    )
    for path in ("tools", "health-venv", "runner", "runner-pristine", "arms-main"):
        assert layout[path][0] == "svc", path


def test_apply_layout_creates_each_folder_with_its_owner_and_mode():
    proc = subprocess.run(
        ["bash", str(RUNNERS / "apply-layout.sh"), "/H", "svc-u", "job-u", "--dry-run"],
        capture_output=True,
        text=True,
        check=True,
    )
    for path, (owner, mode) in _layout().items():
        user = "svc-u" if owner == "svc" else "job-u"
        assert f"install -d -o {user} -m {mode:04o} /H/{path}" in proc.stdout


def test_the_scripts_keep_the_token_from_jobs():
    run = (RUNNERS / "run-ephemeral.sh").read_text()
    provision = (RUNNERS / "provision-macos.sh").read_text()
    assert "ACTIONS_RUNNER_INPUT_TOKEN" in run and "--token" not in run, (
        "the token goes through the environment"
    )
    assert re.search(r'sudo -n -u "\$MLAGATE_JOB_USER" "\$home/runner/run.sh"', run), (
        "jobs run as the job user"
    )
    assert "/bin/kill -9 -1" in run, (
        "whatever a job left running is stopped before the next registration"
    )
    assert 'pip" install --disable-pip-version-check -q "$here' in provision and not re.search(
        r"pip\S* install[^\n]* -e ", provision
    ), "the health venv is a regular install, not an editable one a job could change"
    assert 'sudo -u "$svc" -H gh auth status' in provision and "gh auth login" not in run
    env_lines = re.findall(r'echo "(MLAGATE_[A-Z_]+)=', run)
    assert {"MLAGATE_CACHE", "MLAGATE_ARMS_READONLY"} <= set(env_lines), (
        "jobs get their own cache and main's read-only"
    )
    setup = (ROOT / "docs" / "setup.md").read_text()
    step3 = setup[setup.index("3. **") : setup.index("4. **")]
    assert "service user" in step3 and "job" in step3


def _arm(fake_matrix: Path):
    m = matrix.load(fake_matrix)
    return m.arms["fake-stock"], m.runtimes["fakemla"]


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_pull_request_job_reads_mains_arms_and_writes_only_its_own_cache(
    fake_matrix, tmp_path, monkeypatch
):
    arm, rt = _arm(fake_matrix)
    main_cache, pr_cache = tmp_path / "arms-main", tmp_path / "arms-pr"
    main_inst = arms.materialise(arm, rt, main_cache)
    before = _snapshot(main_cache)
    monkeypatch.setenv("MLAGATE_ARMS_READONLY", str(main_cache))
    used = arms.materialise(arm, rt, pr_cache)
    assert used.dir == main_inst.dir, "main's verified arm is used"
    assert not (pr_cache / "arms").exists() or not any((pr_cache / "arms").iterdir())
    monkeypatch.setenv("MLAGATE_ARMS_READONLY", str(tmp_path / "empty-main"))
    own = arms.materialise(arm, rt, pr_cache)
    assert own.dir.parent == pr_cache / "arms", (
        "an arm main does not hold is installed in the job's own cache"
    )
    assert _snapshot(main_cache) == before, "nothing is written into main's cache"
    (main_inst.site / "fakemla" / "models" / "good.py").write_text("# poisoned\n")
    with pytest.raises(arms.ArmError, match="changed since install"):
        arms.verify_all({arm.id: used})
