"""A package that vendors the real mlx-lm 0.32.2 files under pkg/_vendor/mlx_lm, as a git
repository: main holds the stock copy, the checked-out branch `pr` changes it."""

from __future__ import annotations

import shutil
from pathlib import Path

from mlagate.arm import arms
from mlagate.matrix import load
from mlagate.scan import guards
from tests.conftest import ROOT
from tests.fakert import git

SHIPPED = ROOT / "matrix.yaml"
FIX = ROOT / "patches" / "mlx-lm-0.32.2-mla-threshold.patch"
VENDOR = Path("pkg", "_vendor", "mlx_lm")


def stock_site(cache: Path, arm: str = "mlx-lm-0.32.2") -> Path:
    """The installed arm (default: the stock mlx-lm-0.32.2) of the shipped matrix (from the arm
    cache)."""
    matrix = load(SHIPPED)
    arm = matrix.arms[arm]
    return arms.materialise(arm, matrix.runtimes[arm.runtime], cache).site


def renamed(src: Path, models: Path, source: str, cls: str, new_file: str, new_cls: str) -> None:
    """A copy of one model file of src under another name in models, its attention class
    renamed."""
    text = (src / f"{source}.py").read_text(encoding="utf-8")
    assert f"class {cls}(" in text
    (models / f"{new_file}.py").write_text(text.replace(cls, new_cls), encoding="utf-8")


NOVEL = (
    ("deepseek_v3", "DeepseekV3Attention", "novel", "NovelAttention"),
    ("glm4_moe_lite", "Glm4MoeLiteAttention", "novel_lite", "NovelLiteAttention"),
)


def vendored_repo(repo: Path, site: Path, pr: str, registered: bool = True) -> Path:
    """pkg/ vendoring site's mlx_lm; main is the stock copy. pr: "unrelated" (a file outside the
    package), "fix" (the shipped fix applied inside the vendored copy) or "novel" (two MLA classes
    the matrix does not register: copies of deepseek_v3 and glm4_moe_lite, renamed). Without
    registered, the registered MLA files are left out of the copy."""
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "_vendor").mkdir()
    (repo / "pkg" / "_vendor" / "__init__.py").write_text("")
    shutil.copytree(
        site / "mlx_lm", repo / VENDOR, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    models = repo / VENDOR / "models"
    if not registered:
        for imp, _ in guards.discover(repo, "pkg"):
            (repo / Path(*imp.split("."))).with_suffix(".py").unlink()
    git(repo, "init", "--quiet", "--initial-branch", "main")
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "main: mlx-lm 0.32.2 vendored")
    git(repo, "checkout", "--quiet", "-b", "pr")
    if pr == "unrelated":
        (repo / "NOTES.md").write_text("an unrelated change\n")
    elif pr == "fix":
        git(repo, "apply", "--directory", str(VENDOR.parent), str(FIX))
    elif pr == "novel":
        for args in NOVEL:
            renamed(site / "mlx_lm" / "models", models, *args)
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", f"pr: {pr}")
    return repo
