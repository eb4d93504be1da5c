"""A runner that holds a checkpoint runs every suite on those weights, read by the runtime's own
loader (evidence `checkpoint`): here a tiny 4-bit DeepSeek-V3-geometry checkpoint that mlx-lm
0.32.2 writes itself (save_model, quantize_model), registered as held by this runner."""

import json

import pytest

from mlagate import checkpoints, matrix
from mlagate.arm import arms
from mlagate.harness.supervisor import WorkerPool

from .conftest import ROOT, cli

SUITES = ("threshold", "dispatch", "probes", "l1_unchanged", "equivalence")


def _write_checkpoint(root, cache) -> str:
    shipped = matrix.load(ROOT / "matrix.yaml")
    module = shipped.modules["mlx-lm/deepseek_v3"]
    config = {
        "vocab_size": 256,
        **matrix.thaw(module.config),
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "qk_rope_head_dim": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "hidden_size": 256,
        "q_lora_rank": 128,
    }
    recipe = checkpoints.Synthetic(
        "mlx-lm 0.32.2",
        module.import_path,
        module.model,
        module.args,
        config,
        seed=3,
        dtype="float32",
        quant={"group_size": 64, "bits": 4},
    )
    installs = arms.materialise_all(shipped, ["mlx-lm-0.32.2"], cache)
    pool = WorkerPool(installs)
    try:
        written = pool.get("mlx-lm-0.32.2").call("write_checkpoint", 300, **recipe.request(root))
    finally:
        pool.close()
    return written["path"]


@pytest.mark.arms
def test_every_suite_runs_a_held_checkpoint(tmp_path, real_cache):
    path = _write_checkpoint(tmp_path / "ckpt", real_cache)
    text = (ROOT / "matrix.yaml").read_text()
    held = "    runners: {}  # runner label -> local path; none of ours holds it yet"
    assert held in text
    (tmp_path / "matrix.yaml").write_text(
        text.replace(held, f'    runners: {{linux-cpu: "{path}"}}  # held here', 1)
    )
    import shutil

    shutil.copytree(ROOT / "patches", tmp_path / "patches")
    args = [
        "run",
        "--matrix",
        tmp_path / "matrix.yaml",
        "--module",
        "mlx-lm/deepseek_v3",
        "--arm",
        "mlx-lm-0.32.2",
        "--arm",
        "mlx-lm-0.32.2-patched",
        "--out",
        tmp_path / "out",
        "-n",
        "2",
    ]
    for suite in SUITES:
        args += ["--suite", suite]
    proc = cli(*args, cache=real_cache)
    rows = [json.loads(p.read_text()) for p in (tmp_path / "out" / "results").glob("*.json")]
    held_rows = {(r["suite"], r["arm"]): r for r in rows if r["checkpoint"] == "deepseek-v3-4bit"}
    assert len(held_rows) == 2 * len(SUITES) - 1, sorted(
        held_rows
    )  # l1_unchanged runs on the patched arm only
    for (suite, arm), r in held_rows.items():
        assert r["evidence"] == "checkpoint" and r["verdict"] != "invalid", (
            suite,
            arm,
            r["reason"],
        )
        assert r["metrics"]["checkpoint_loaded"][arm] == path, (suite, arm)
    assert (
        held_rows[("threshold", "mlx-lm-0.32.2")]["verdict"] == "fail"
    )  # the control still fails on real weights
    for suite in ("threshold", "dispatch", "probes", "l1_unchanged"):
        assert held_rows[(suite, "mlx-lm-0.32.2-patched")]["verdict"] == "pass", held_rows[
            (suite, "mlx-lm-0.32.2-patched")
        ]["reason"]
    assert (
        held_rows[("l1_unchanged", "mlx-lm-0.32.2-patched")]["metrics"]["checkpoint_loaded"][
            "mlx-lm-0.32.2"
        ]
        == path
    )
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
