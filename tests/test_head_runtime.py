"""`mlagate run --head` on a repository of mlx-lm 0.32.2's own files, with the shipped matrix:
the three pull requests of a maintainer (the fix, an unrelated change, `L == 1` put back into
one module of a fixed main), each judged relative to main."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT
from tests.realrt import mlx_lm_repo

pytestmark = pytest.mark.arms


def head_run(run_cli, cache, repo, out):
    return run_cli(
        "run", "--head", repo, "--suite", "dispatch", "-n", "1", "--out", out,
        cwd=ROOT, cache=cache,
    )  # fmt: skip


def outcomes_of(out):
    """Head's rows by (outcome-free) key: module and geometry -> (head verdict, base verdict)."""
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    by = {}
    for r in rows:
        by.setdefault((r["module"], r["checkpoint"] or r["geometry"]["id"]), {})[r["arm"]] = r[
            "verdict"
        ]
    return by


def test_the_threshold_patch_is_fixed_by_this_change(tmp_path, run_cli, real_cache):
    repo = mlx_lm_repo(tmp_path / "mlx-lm", "fix", real_cache)
    proc = head_run(run_cli, real_cache, repo, tmp_path / "out")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.stdout.count("\nfixed by this change ") == 10, proc.stdout
    assert "gate: green: this change fixes 10, breaks 0, leaves 0 failing as on main" in proc.stdout
    measured = {k: v for k, v in outcomes_of(tmp_path / "out").items() if v["head"] != "argued"}
    assert len(measured) == 10
    assert all(v == {"head": "pass", "base": "fail"} for v in measured.values()), measured


def test_an_unrelated_change_is_green_and_says_what_still_fails_as_on_main(
    tmp_path, run_cli, real_cache
):
    repo = mlx_lm_repo(tmp_path / "mlx-lm", "unrelated", real_cache)
    proc = head_run(run_cli, real_cache, repo, tmp_path / "out")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.stdout.count("\nstill failing as on base ") == 10, proc.stdout
    assert "gate: green: this change fixes 0, breaks 0, leaves 10 failing as on main" in proc.stdout


def test_l_equals_1_put_back_into_one_module_of_a_fixed_main_is_red_naming_its_cases(
    tmp_path, run_cli, real_cache
):
    repo = mlx_lm_repo(tmp_path / "mlx-lm", "regress", real_cache)
    proc = head_run(run_cli, real_cache, repo, tmp_path / "out")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    red = [ln.split()[:5] for ln in proc.stdout.splitlines() if ln.startswith("regression ")]
    assert red == [
        ["regression", "fail", "pass", "dispatch", "mlx-lm/deepseek_v3"],
        ["regression", "fail", "pass", "dispatch", "mlx-lm/deepseek_v3"],
    ], proc.stdout
    assert "gate: red: this change fixes 0, breaks 2, leaves 0 failing as on main" in proc.stdout
    for geometry in ("deepseek-v3", "moonlight-16b"):
        assert f"replay dispatch::mlx-lm/deepseek_v3::head::{geometry}::float32::cpu" in proc.stdout
