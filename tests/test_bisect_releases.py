"""`mlagate bisect` over releases no one here wrote: mlx-vlm 0.6.17, 0.7.0, 0.7.5 and 0.7.10,
each release's installed package one commit, oldest first (0.6.17 and 0.7.10 from the shipped
matrix's arms, 0.7.0 and 0.7.5 downloaded with pip, --no-deps). It names the release where
deepseek_v3's dispatch changed from the L == 1 guard's fail to a pass: 0.7.0, where the
threshold fix arrived."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import ROOT, cli
from tests.fakert import git
from tests.vendored import stock_site

pytestmark = pytest.mark.arms
CASE = "dispatch::mlx-vlm/deepseek_v3::mlx-vlm-0.7.10::deepseek-v3::float32::cpu"


def _wheel(version: str, folder):
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(folder),
         f"mlx-vlm=={version}"],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    return next(folder.glob(f"mlx_vlm-{version}-*.whl"))


def releases(repo, cache, tmp):
    repo.mkdir()
    git(repo, "init", "--quiet", "--initial-branch", "main")
    for version in ("0.6.17", "0.7.0", "0.7.5", "0.7.10"):
        shutil.rmtree(repo / "mlx_vlm", ignore_errors=True)
        if version in ("0.6.17", "0.7.10"):
            site = stock_site(cache, f"mlx-vlm-{version}")
            shutil.copytree(site / "mlx_vlm", repo / "mlx_vlm",
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))  # fmt: skip
        else:
            with zipfile.ZipFile(_wheel(version, tmp)) as z:
                z.extractall(tmp / version)
            shutil.copytree(tmp / version / "mlx_vlm", repo / "mlx_vlm")
        git(repo, "add", "--all")
        git(repo, "commit", "--quiet", "-m", f"mlx-vlm {version} as installed")
        git(repo, "tag", f"v{version}")


def test_the_release_where_the_threshold_fix_arrived_is_named(tmp_path, real_cache):
    (tmp_path / "wheels").mkdir()
    releases(tmp_path / "mlx-vlm", real_cache, tmp_path / "wheels")
    proc = cli("bisect", "--head", tmp_path / "mlx-vlm", "--good", "v0.6.17", "--bad", "v0.7.10",
               "--case", CASE, "--matrix", ROOT / "matrix.yaml", "--out", tmp_path / "out",
               "--reuse", tmp_path / "store", cache=real_cache, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "bisect.json").read_text())
    (culprit,) = doc["culprits"]
    assert culprit["subject"] == "mlx-vlm 0.7.0 as installed", doc["message"]
    assert [s["file"] for s in culprit["diff_stat"]] == ["mlx_vlm/models/deepseek_v3/language.py"]
    ends = {t["verdict"]: t["cases"] for t in doc["tried"][:2]}
    assert [c["verdict"] for c in ends["good"].values()] == ["fail"]  # the guard, 0.6.17
    assert [c["verdict"] for c in ends["bad"].values()] == ["pass"]  # the fix, 0.7.10
