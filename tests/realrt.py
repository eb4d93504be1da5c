"""A runtime repository of mlx-lm 0.32.2's own files (its package as the stock arm installs it):
main, and a branch `pr` that changes it, as a maintainer's pull request would."""

from __future__ import annotations

import shutil
from pathlib import Path

from mlagate import matrix
from mlagate.arm import arms
from tests.conftest import ROOT
from tests.fakert import git

PATCH = ROOT / "patches" / "mlx-lm-0.32.2-mla-threshold.patch"
# deepseek_v3's cache-aware decision in the patched file, and `L == 1` put back in its place
DECISION = (
    "absorbed = L == 1 or use_absorbed(\n"
    "            L, self._absorb_dims, latent_length(kv_latent)\n"
    "        )"
)
GUARD = "absorbed = L == 1"


def stock_files(cache: Path, dest: Path) -> None:
    """mlx-lm 0.32.2's package from the stock arm of the shipped matrix (installed into cache)."""
    shipped = matrix.load(ROOT / "matrix.yaml")
    inst = arms.materialise_all(shipped, ["mlx-lm-0.32.2"], cache)["mlx-lm-0.32.2"]
    shutil.copytree(
        inst.site / "mlx_lm", dest / "mlx_lm", ignore=shutil.ignore_patterns("__pycache__")
    )


def mlx_lm_repo(repo: Path, change: str, cache: Path, env: dict | None = None) -> Path:
    """change: "fix" (main is stock, pr applies the threshold patch), "unrelated" (main is
    stock, pr edits a comment of sample_utils.py) or "regress" (main has the patch, pr puts
    `L == 1` back into deepseek_v3 alone). The checkout is left on pr; main holds a committed
    link inside the tree (README.md -> mlx_lm/README.md)."""
    stock_files(cache, repo)
    (repo / "README.md").symlink_to("mlx_lm/README.md")
    git(repo, "init", "--quiet", "--initial-branch", "main", env=env)
    if change == "regress":
        git(repo, "apply", str(PATCH), env=env)
    git(repo, "add", "--all", env=env)
    git(repo, "commit", "--quiet", "-m", "mlx-lm 0.32.2", env=env)
    git(repo, "checkout", "--quiet", "-b", "pr", env=env)
    if change == "fix":
        git(repo, "apply", str(PATCH), env=env)
    elif change == "unrelated":
        f = repo / "mlx_lm" / "sample_utils.py"
        f.write_text(f.read_text() + "\n# an unrelated change\n")
    else:
        f = repo / "mlx_lm" / "models" / "deepseek_v3.py"
        assert DECISION in f.read_text()
        f.write_text(f.read_text().replace(DECISION, GUARD))
    git(repo, "commit", "--quiet", "-am", f"pr: {change}", env=env)
    return repo
