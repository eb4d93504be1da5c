"""runners/pre-job.sh, called as the runner's job-started hook would call it, on this machine."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


@pytest.mark.skipif(sys.platform != "linux", reason="the Linux checks; a Mac runs the macOS ones")
def test_the_pre_job_hook_passes_a_correctness_job_here(tmp_path):
    """runners/pre-job.sh, as the runner's job-started hook would call it, on this machine."""
    mlagate = Path(shutil.which("mlagate") or ROOT / ".venv" / "bin" / "mlagate")
    env = {
        **os.environ,
        "GITHUB_JOB": "correctness",
        "MLAGATE_HEALTH": str(mlagate),
        "MLAGATE_HEALTH_BACKEND": "cpu",
    }
    proc = subprocess.run(
        [str(ROOT / "runners" / "pre-job.sh")], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0 and "mlagate health: Linux" in proc.stdout, (
        proc.stdout + proc.stderr
    )
    env["MLAGATE_HEALTH_BACKEND"] = "metal"
    proc = subprocess.run(
        [str(ROOT / "runners" / "pre-job.sh")], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode != 0, "a backend this machine cannot have (Metal on Linux) is refused"
