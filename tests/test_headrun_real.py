"""`mlagate run --head` on the runtimes' own packages: a git repository of mlx-lm 0.32.2's and
of mlx-vlm 0.7.10's installed package (from the arm cache), main the release, a branch with an
unrelated commit. Every correctness suite on this CPU: green, nothing invalid. mlx-vlm's
longcat_flash_sparse (in no stock arm) has its bfloat16 equivalence skipped by the CPU's
backend limit on head and base alike, where it used to end the run invalid.

Slow (every correctness case of every MLA module, twice): about 40 minutes each on the 2-core
machine shared with other work (docs/gate.md)."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import ROOT, cli
from tests.fakert import git
from tests.vendored import stock_site

pytestmark = pytest.mark.arms


@pytest.mark.parametrize(
    "arm, package", [("mlx-lm-0.32.2", "mlx_lm"), ("mlx-vlm-0.7.10", "mlx_vlm")]
)
def test_an_unrelated_change_to_a_runtimes_own_package_is_green(tmp_path, real_cache, arm, package):
    tree = tmp_path / "tree"
    tree.mkdir()
    site = stock_site(real_cache, arm)
    shutil.copytree(
        site / package, tree / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    git(tree, "init", "--quiet", "--initial-branch", "main")
    git(tree, "add", "--all")
    git(tree, "commit", "--quiet", "-m", "the release as installed")
    git(tree, "checkout", "--quiet", "-b", "pr")
    (tree / "NOTES.md").write_text("An unrelated change.\n")
    git(tree, "add", "NOTES.md")
    git(tree, "commit", "--quiet", "-m", "unrelated")
    out = tmp_path / "out"
    argv = ["run", "--head", tree, "--base", "main", "--kind", "correctness", "-n", "2"]
    proc = cli(*argv, "--matrix", ROOT / "matrix.yaml", "--out", out, cache=real_cache,
               timeout=7200)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    gate = next(ln for ln in proc.stdout.splitlines() if ln.startswith("gate: "))
    assert gate.startswith("gate: green: this change fixes 0, breaks 0, leaves ") and (
        "invalid" not in gate
    ), gate
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    assert rows and not [r["case_id"] for r in rows if r["verdict"] == "invalid"]
