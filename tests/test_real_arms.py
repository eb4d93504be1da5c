"""Against the real arms installed from PyPI (mlx-lm 0.32.2 stock and patched, mlx-vlm 0.6.17 and
0.7.10)."""

import json
import shutil

import pytest

from mlagate import matrix

from .conftest import ROOT

pytestmark = pytest.mark.arms
SHIPPED = matrix.load(ROOT / "matrix.yaml")


@pytest.fixture(scope="module")
def probes_run(tmp_path_factory, real_cache):
    from .conftest import cli

    out = tmp_path_factory.mktemp("probes")
    proc = cli("run", "--suite", "probes", "-n", "2", "--out", out, cwd=ROOT, cache=real_cache)
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    return proc, {(r["module"], r["arm"], r["checkpoint"] or r["geometry"]["id"]): r for r in rows}


def test_plan_lists_every_mla_module_of_the_three_runtime_versions(run_cli, real_cache):
    proc = run_cli("plan", "--format", "json", cwd=ROOT, cache=real_cache)
    assert proc.returncode == 0, proc.stderr
    cases = json.loads(proc.stdout)
    pairs = {(c["module"], c["arm"]) for c in cases}
    assert len({m for m, a in pairs if a.startswith("mlx-lm")}) == 9
    assert len({m for m, a in pairs if a == "mlx-vlm-0.6.17"}) == 9
    assert len({m for m, a in pairs if a == "mlx-vlm-0.7.10"}) == 11
    assert {c["evidence"] for c in cases} == {"synthetic", "argued"}


def test_removing_a_module_from_the_matrix_fails_the_plan_naming_it(tmp_path, run_cli, real_cache):
    shutil.copytree(ROOT / "patches", tmp_path / "patches")
    text = (ROOT / "matrix.yaml").read_text()
    start = text.index("  mlx-vlm/hy_v4:")
    end = text.index("\ncheckpoints:")
    text = text[:start] + text[end:]
    text = "\n".join(
        line for line in text.splitlines() if "module: mlx-vlm/hy_v4," not in line
    )  # its known findings go with it
    (tmp_path / "matrix.yaml").write_text(text)
    proc = run_cli("plan", cwd=tmp_path, cache=real_cache)
    assert proc.returncode == 2  # bad input, as from run
    assert (
        "arm mlx-vlm-0.7.10 holds MLA modules" in proc.stderr
        and "mlx_vlm.models.hy_v4.language:HyV4Attention" in proc.stderr
    )


def test_probes_show_the_real_path_of_every_module_in_every_arm(probes_run):
    proc, rows = probes_run
    synthetic = {k: r for k, r in rows.items() if r["evidence"] == "synthetic"}
    assert len(synthetic) == sum(
        len(m.geometries) * len(SHIPPED.arms_for(m)) for m in SHIPPED.modules.values()
    )
    for (module, arm, _), r in synthetic.items():
        if (module, arm) == (
            "mlx-lm/mistral4",
            "mlx-lm-0.32.2",
        ):  # a known finding: its absorbed branch raises at L = 2
            assert (
                r["verdict"] == "fail"
                and "forced absorbed at L=2 T=64: the runtime raised" in r["reason"]
            ), r["reason"]
            assert "at mlx_lm/models/mistral4.py:" in r["reason"] and r["expected"] == "fail"
            continue
        assert r["verdict"] == "pass", (module, arm, r["reason"])
        paths = r["metrics"]["paths"]
        assert paths["L=1,T=64"] == "absorbed"
        assert r["metrics"]["forced"] == {"absorbed": "absorbed", "materialised": "materialised"}
        stock = SHIPPED.arms[arm].role == "stock" or module == "mlx-vlm/hy_v4"
        assert paths["L=2,T=64"] == ("materialised" if stock else "absorbed"), (module, arm)
        if module != "mlx-vlm/glm5_next" or stock:
            assert paths["L=2,T=0"] == "materialised", (module, arm)


def test_checkpoint_rows_are_argued_not_measured(probes_run):
    _, rows = probes_run
    argued = [r for r in rows.values() if r["checkpoint"]]
    assert argued and all(r["verdict"] == "argued" and r["counters"] == [] for r in argued)


def test_trim_after_rejection_finds_the_stale_pool_of_glm5_next_in_0_6_17_only(
    tmp_path, run_cli, real_cache
):
    proc = run_cli(
        "run",
        "--suite",
        "trim_after_rejection",
        "--module",
        "mlx-vlm/glm5_next",
        "--out",
        tmp_path,
        cwd=ROOT,
        cache=real_cache,
    )
    rows = {
        r["arm"]: r
        for r in (json.loads(p.read_text()) for p in (tmp_path / "results").glob("*.json"))
        if r["evidence"] == "synthetic"
    }
    assert proc.returncode == 0, (
        proc.stdout + proc.stderr
    )  # 0.6.17's failure is a known finding: as expected
    old, new = rows["mlx-vlm-0.6.17"], rows["mlx-vlm-0.7.10"]
    assert (
        old["verdict"] == "fail"
        and "ValueError: [argmax] Cannot argmax reduce zero size array" in old["reason"]
    )
    cases = old["metrics"]["cases"].values()
    assert all(c["error"] for c in cases if c["crosses_window"]) and not any(
        c["error"] for c in cases if not c["crosses_window"]
    )
    assert new["verdict"] == "pass" and new["metrics"]["rollback"] == "transaction"
