"""Discovery on a package that vendors the real mlx-lm 0.32.2 files (pkg/_vendor/mlx_lm), with
the shipped matrix and no edit of it: every vendored MLA module found as its registered entry,
the stock copy failing dispatch, the fixed copy passing; unknown classes all in one error, and
the entries `mlagate discover --write-snippet` writes, pasted into the matrix, run."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from mlagate.gate import headbase
from mlagate.matrix import load
from mlagate.scan import discovery
from tests.vendored import NOVEL, SHIPPED, stock_site, vendored_repo

pytestmark = pytest.mark.arms


@pytest.fixture(scope="module")
def site(real_cache):
    return stock_site(real_cache)


def mlx_lm_modules() -> set[str]:
    return {m.id for m in load(SHIPPED).modules.values() if m.runtime == "mlx-lm"}


def dispatch_results(out: Path, arm: str = "head") -> dict:
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    return {
        (r["module"], r["geometry"]["id"]): r["verdict"]
        for r in rows
        if r["arm"] == arm and r["suite"] == "dispatch"
    }


def test_every_vendored_module_is_found_as_its_registered_entry(tmp_path, site):
    repo = vendored_repo(tmp_path / "rt", site, "unrelated")
    s = discovery.survey(load(SHIPPED), repo)
    assert (s.runtime.id, s.derived, s.unknown) == ("pkg", True, ())
    assert {f.reuses for f in s.found} == mlx_lm_modules()
    for f in s.found:
        assert f.import_path.startswith("pkg._vendor.mlx_lm.models."), f
        assert f.entry["import"] == f.import_path and f.module == "pkg/" + f.reuses.split("/")[1]
        assert f.entry["geometries"] == list(load(SHIPPED).modules[f.reuses].geometries)
    hb = headbase.prepare(SHIPPED, repo, None, tmp_path / "out")
    derived = yaml.safe_load(hb.matrix.read_text())
    assert derived["runtimes"]["pkg"] == {"package": "pkg", "distribution": "pkg"}
    assert (
        derived["modules"]["pkg/deepseek_v3"]["import"] == "pkg._vendor.mlx_lm.models.deepseek_v3"
    )
    # a suite restricted to the registered module takes the vendored one
    assert "pkg/deepseek_v3" in derived["suites"]["marginal_cost"]["modules"]
    # the stock arm's known findings of the registered module hold for its vendored copy
    carried = {(e["suite"], e["module"], e["arm"], e["verdict"]) for e in derived["expectations"]}
    assert {
        ("speculative_transaction", "pkg/kimi_linear", "head", "skip"),
        ("probes", "pkg/mistral4", "base", "fail"),
    } <= carried
    # what the CPU backend cannot run travels with the entry (backend_limits), not as a finding
    assert derived["modules"]["pkg/longcat_flash"]["ops"] == ["gather_mm"]


def test_a_vendored_mlx_vlm_finds_the_mlx_vlm_entries_of_classes_both_runtimes_have(
    tmp_path, real_cache
):
    """DeepseekV3Attention is registered in mlx-lm and mlx-vlm: the file's model and args classes
    (LanguageModel, ModelConfig) pick mlx-vlm's; LongcatFlashMLA is in two mlx-vlm modules: the
    import path's tail picks the one of its own file."""
    site = stock_site(real_cache, "mlx-vlm-0.7.10")
    (tmp_path / "pkg" / "_vendor").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "_vendor" / "__init__.py").write_text("")
    shutil.copytree(site / "mlx_vlm", tmp_path / "pkg" / "_vendor" / "mlx_vlm")
    shipped = load(SHIPPED)
    s = discovery.survey(shipped, tmp_path)
    assert s.unknown == ()
    want = {m.id for m in shipped.modules.values() if m.runtime == "mlx-vlm"}
    assert {f.reuses for f in s.found} == want
    for f in s.found:
        assert f.import_path == "pkg._vendor." + shipped.modules[f.reuses].import_path


def test_unknown_classes_are_all_in_one_error_and_discover_writes_their_entries(
    tmp_path, site, run_cli, real_cache
):
    repo = vendored_repo(tmp_path / "rt", site, "novel")
    proc = run_cli("run", "--head", repo, "--matrix", SHIPPED, "--out", tmp_path / "o")
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stdout + proc.stderr
    novel = ", ".join(f"{c} (pkg._vendor.mlx_lm.models.{f})" for _, _, f, c in NOVEL)
    assert proc.stderr == (
        f"mlagate: error: --head {repo}: 2 MLA classes are not in {SHIPPED}: {novel}; "
        f"`mlagate discover {repo} --matrix {SHIPPED} --write-snippet FILE` writes their "
        "entries\n"
    )
    snippet = tmp_path / "snippet.yaml"
    proc = run_cli("discover", repo, "--matrix", SHIPPED, "--write-snippet", snippet)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.count("  unknown  ") == 2 and proc.stdout.count("  known    ") == 9
    entries = yaml.safe_load(paste(SHIPPED.read_text(), snippet.read_text()))["modules"]
    assert entries["pkg/novel"]["config"] == {
        **load(SHIPPED).modules["mlx-lm/deepseek_v3"].config,
        "n_shared_experts": 1,
    }


def paste(matrix: str, snippet: str) -> str:
    """Each block of the snippet under the section its header names, as a user pastes it."""
    for section, body in re.findall(r"# --- under (\w+): ---\n(.*?)(?=# --- |\Z)", snippet, re.S):
        matrix = re.sub(rf"(?m)^{section}:.*\n", lambda m, b=body: m.group(0) + b, matrix, count=1)
    return matrix


def test_the_written_entries_pasted_into_the_matrix_run(tmp_path, site, run_cli, real_cache):
    repo = vendored_repo(tmp_path / "rt", site, "novel", registered=False)
    snippet = tmp_path / "snippet.yaml"
    proc = run_cli("discover", repo, "--matrix", SHIPPED, "--write-snippet", snippet)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    where = tmp_path / "m"
    shutil.copytree(SHIPPED.parent / "patches", where / "patches")
    (where / "matrix.yaml").write_text(paste(SHIPPED.read_text(), snippet.read_text()))
    out = tmp_path / "out"
    proc = run_cli(
        "run", "--head", repo, "--matrix", where / "matrix.yaml", "--suite", "dispatch",
        "-n", "1", "--out", out, cache=real_cache,
    )  # fmt: skip
    found = dispatch_results(out)
    # copies of the stock files: L == 1 still gates the absorbed path
    assert found == {
        ("pkg/novel", "deepseek-v3"): "fail",
        ("pkg/novel_lite", "glm-4.7-flash"): "fail",
    }, proc.stdout + proc.stderr


def test_run_head_gates_the_vendored_copy_with_the_shipped_matrix(
    tmp_path, site, run_cli, real_cache
):
    """main vendors the stock copy, the pull request applies the shipped fix inside it: on base
    dispatch fails on L == 1 in every module, on head every case passes, none invalid, green."""
    repo = vendored_repo(tmp_path / "rt", site, "fix")
    out = tmp_path / "out"
    proc = run_cli(
        "run", "--head", repo, "--matrix", SHIPPED, "--suite", "dispatch", "-n", "1",
        "--out", out, cache=real_cache,
    )  # fmt: skip
    expected = {f"pkg/{m.split('/')[1]}" for m in mlx_lm_modules()}
    for arm, verdict in (("base", "fail"), ("head", "pass")):
        found = dispatch_results(out, arm)
        assert {m for m, _ in found} == expected, proc.stdout + proc.stderr
        assert set(found.values()) == {verdict}, (arm, found)
    assert proc.returncode == 0, proc.stdout + proc.stderr
