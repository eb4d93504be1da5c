"""mlagate run --head PATH [--base REF]: a runtime checkout against its merge base."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import FIXTURES
from tests.fakert import fake_tree, git, runtime_repo


@pytest.fixture
def head_matrix(tmp_path):
    """The gate fixture matrix, with the tree and patch its own arm names (replaced by --head)."""
    where = tmp_path / "m"
    where.mkdir()
    shutil.copy(FIXTURES / "gate" / "matrix.yaml", where / "matrix.yaml")
    shutil.copy(FIXTURES / "fake-fix.patch", where / "fake-fix.patch")
    fake_tree(where / "fakemla-tree")
    return where / "matrix.yaml"


def verdicts(out):
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    return {(r["suite"], r["arm"]): r["verdict"] for r in rows}


def test_a_head_that_fixes_the_guard_passes(tmp_path, head_matrix, run_cli, fake_cache):
    repo = runtime_repo(tmp_path / "rt", "fix")
    out = tmp_path / "out"
    proc = run_cli(
        "run",
        "--head",
        repo,
        "--base",
        "main",
        "--matrix",
        head_matrix,
        "--out",
        out,
        cache=fake_cache,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"against base {git(repo, 'rev-parse', 'main')[:12]} (fakemla): fake/good" in proc.stdout
    assert verdicts(out) == {
        ("dispatch", "head"): "pass",
        ("l1_unchanged", "head"): "pass",
        ("marginal_cost", "head"): "pass",
    }


def test_a_head_that_reintroduces_l_equals_1_is_red(tmp_path, head_matrix, run_cli, fake_cache):
    repo = runtime_repo(tmp_path / "rt", "regress")
    out = tmp_path / "out"
    proc = run_cli("run", "--head", repo, "--matrix", head_matrix, "--out", out, cache=fake_cache)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = verdicts(out)
    assert found[("dispatch", "head")] == "fail" and found[("marginal_cost", "head")] == "fail", (
        found
    )
    assert "replay dispatch::fake/good::head::tiny::float32::cpu" in proc.stdout


def test_an_unregistered_mla_module_in_head_is_one_line_naming_what_to_add(
    tmp_path, head_matrix, run_cli, fake_cache
):
    repo = runtime_repo(tmp_path / "rt", "fix")
    novel = (
        (repo / "fakemla" / "models" / "good.py")
        .read_text()
        .replace("class GoodAttention", "class NovelAttention")
    )
    (repo / "fakemla" / "models" / "novel.py").write_text(novel)
    proc = run_cli(
        "run",
        "--head",
        repo,
        "--base",
        "main",
        "--matrix",
        head_matrix,
        "--out",
        tmp_path / "out",
        cache=fake_cache,
    )
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert proc.stderr == (
        f"mlagate: error: --head {repo}: 1 MLA class is not in {head_matrix}: NovelAttention "
        f"(fakemla.models.novel); `mlagate discover {repo} --matrix {head_matrix} "
        "--write-snippet FILE` writes their entries\n"
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--head", "{tmp}/nowhere"], "--head {tmp}/nowhere: no such directory"),
        (["--base", "main"], "--base goes with --head"),
        (
            ["--head", "{repo}", "--base", "no-such-branch"],
            "--head {repo}: git merge-base HEAD no-such-branch: fatal: Not a valid object name "
            "no-such-branch",
        ),
        (
            ["--head", "{repo}", "--arm", "x"],
            "--head chooses the arm and the modules: --arm and --module do not apply",
        ),
        (
            ["--head", "{tmp}"],
            "--head {tmp}: holds none of the runtimes of {matrix} (looked for fakemla/) and no "
            "top-level package with MLA classes: add to runtimes: in {matrix} `PACKAGE: {{package: "
            "PACKAGE, distribution: DISTRIBUTION}}`",
        ),
    ],
)
def test_bad_head_arguments_are_one_line_errors(
    tmp_path, head_matrix, run_cli, fake_cache, argv, message
):
    repo = runtime_repo(tmp_path / "rt", "fix")
    fill = {"tmp": tmp_path, "repo": repo, "matrix": head_matrix}
    argv = [a.format(**fill) for a in argv]
    proc = run_cli(
        "run", *argv, "--matrix", head_matrix, "--out", tmp_path / "out", cache=fake_cache
    )
    assert (proc.returncode, proc.stderr) == (2, f"mlagate: error: {message.format(**fill)}\n"), (
        proc.stdout + proc.stderr
    )
