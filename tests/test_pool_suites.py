"""Each suite of issue 4 is shown able to fail: a fake sparse-indexer runtime (tests/fixtures/
fakepool-tree) pools index keys per window of 4; one module is correct, three carry a
planted defect: a trim that keeps a stale pooled window, a wide step that re-pools from the
wrong offset, a trim that leaves one rejected token in the cache.
"""

import json
import shutil
from types import MappingProxyType

import pytest

from .conftest import FIXTURES, cli

MATRIX = FIXTURES / "fake-pools.yaml"
SUITES = ("pool_equivalence", "trim_after_rejection", "speculative_transaction")


def _state_budget(suite: str) -> float:
    """The suite's state budget on CPU: a sound pool is within it (a BLAS that picks another
    kernel for another row count may round a few ULPs apart), a defective one far beyond."""
    from mlagate.matrix import load

    return load(MATRIX).suites[suite].gates["state_ulps"]["cpu"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("pools")
    cache = tmp_path_factory.mktemp("cache")
    args = ["run", "--matrix", MATRIX, "--out", out]
    for suite in SUITES:
        args += ["--suite", suite]
    proc = cli(*args, cache=cache)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    return {(r["suite"], r["module"]): r for r in rows}, proc.stdout


def test_the_correct_pooled_module_passes_all_three(run):
    verdicts, _ = run
    for suite in SUITES:
        assert verdicts[(suite, "fake/pooled")]["verdict"] == "pass", verdicts[
            (suite, "fake/pooled")
        ]["reason"]
    good = verdicts[("trim_after_rejection", "fake/pooled")]["metrics"]
    assert good["rollback"] == "trim_prompt_cache"
    assert good["rejections"]["crossing_a_window"] and good["rejections"]["inside_the_open_window"]
    assert verdicts[("speculative_transaction", "fake/pooled")]["metrics"]["layers"] == 2


def test_pool_equivalence_catches_a_wide_step_that_repools_from_a_wrong_offset(run):
    verdicts, _ = run
    bad = verdicts[("pool_equivalence", "fake/wrongoffset")]
    assert bad["verdict"] == "fail"
    rows, budget = bad["metrics"]["cases"], _state_budget("pool_equivalence")
    assert all(
        v["state_max_ulps"] <= budget and v["topk_mismatches"] == 0
        for k, v in rows.items()
        if k.startswith("T=16,")
    ), ("aligned caches pool from the right offset", rows)
    assert any(v["state_max_ulps"] > budget for k, v in rows.items() if k.startswith("T=18,"))
    rep = bad["metrics"]["reproducers"][0]
    assert (
        rep["T"] == 18
        and not rep["aligned"]
        and rep["module"] == "fake/wrongoffset"
        and rep["seed"] == 1
    )
    assert verdicts[("pool_equivalence", "fake/stalepool")]["verdict"] == "pass", (
        "no trim happens in a wide step"
    )


def test_trim_after_rejection_catches_a_stale_pool_only_where_a_window_is_uncompleted(run):
    verdicts, _ = run
    bad = verdicts[("trim_after_rejection", "fake/stalepool")]
    assert bad["verdict"] == "fail" and "(crosses a window)" in bad["reason"]
    rows, budget = bad["metrics"]["cases"].values(), _state_budget("trim_after_rejection")
    assert all(
        r["topk_mismatches"] == 0 and r["state_max_ulps"] <= budget
        for r in rows
        if not r["crosses_window"]
    ), list(rows)
    assert all(r["state_max_ulps"] > budget for r in rows if r["crosses_window"])
    assert all(r["crosses_window"] for r in bad["metrics"]["reproducers"])


def test_trim_after_rejection_and_the_transaction_catch_a_trim_that_keeps_one_token(run):
    verdicts, _ = run
    for suite in ("trim_after_rejection", "speculative_transaction"):
        bad = verdicts[(suite, "fake/keepone")]
        assert bad["verdict"] == "fail", suite
        assert "selected indices differ" in bad["reason"] or "offset" in bad["reason"]
    assert len(verdicts[("trim_after_rejection", "fake/keepone")]["metrics"]["reproducers"]) == 7, (
        "every rejection leaves a token behind"
    )


def test_the_transaction_suite_catches_every_planted_defect_and_names_a_reproducer(run):
    verdicts, stdout = run
    for module in ("fake/stalepool", "fake/wrongoffset", "fake/keepone"):
        bad = verdicts[("speculative_transaction", module)]
        assert bad["verdict"] == "fail"
        rep = bad["metrics"]["reproducers"][0]
        assert {"arm", "module", "geometry", "seed", "T", "rounds", "replay"} <= set(rep)
        assert f"--module {module} " in bad["replay"]
        assert (
            f"mlagate run --suite speculative_transaction --module {module} --arm fakepool-stock"
            in stdout
        )
    assert (
        "first failing script (7 in all): geometry=tinypool seed=2 S=4 k=1 T=16 crosses_window=True"
        in stdout
    )


def test_budgets_are_per_backend_or_one_number():
    from mlagate.harness import scripts

    assert scripts.budget(64, "cuda") == 64
    assert scripts.budget({"cpu": 64, "cuda": 8192}, "cuda") == 8192
    assert scripts.budget(MappingProxyType({"cpu": 64}), "cpu") == 64, "the matrix's frozen gates"
    with pytest.raises(KeyError, match="no budget for backend 'cuda'"):
        scripts.budget({"cpu": 64}, "cuda")


def test_a_transaction_run_whose_drafts_were_all_accepted_is_invalid(tmp_path):
    """Seed 0 with one-token drafts over two rounds accepts both: the rollback never ran, so
    the suite cannot vouch for it (invalid, not a pass)."""
    shutil.copytree(FIXTURES / "fakepool-tree", tmp_path / "fakepool-tree")
    matrix = tmp_path / "fake-pools.yaml"
    planted = MATRIX.read_text().replace(
        "widths: [3, 4, 8], rounds: 6, seeds: [3, 4]", "widths: [1], rounds: 2, seeds: [0]"
    )
    assert planted != MATRIX.read_text()
    matrix.write_text(planted)
    out = tmp_path / "out"
    proc = cli(
        "run",
        "--matrix",
        matrix,
        "--suite",
        "speculative_transaction",
        "--module",
        "fake/pooled",
        "--out",
        out,
        cache=tmp_path / "cache",
    )
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    assert len(rows) == 1 and rows[0]["verdict"] == "invalid", (
        proc.stdout[-2000:] + proc.stderr[-2000:]
    )
    assert "no verify step rejected a token" in rows[0]["reason"]
    assert all(r["j"] == r["L"] for r in rows[0]["metrics"]["rounds"]["seed=0"])
