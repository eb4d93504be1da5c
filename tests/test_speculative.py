"""The speculative suite on real mlx-lm arms: greedy token identity holds on the stock arm and
fails on a planted verify-step defect; a checkpoint the runner holds is run, one it does not
hold is argued-not-measured. Plus the worker helpers it rests on (pure, fast).
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from mlagate.worker.speculation import AbsentImporter, _flag_rounds

from . import runplans
from .conftest import FIXTURES, ROOT

MATRIX = FIXTURES / "spec-defect.yaml"
PATCH = FIXTURES / "mlx-lm-verify-defect.patch"
SHIPPED = ROOT / "patches" / "mlx-lm-0.32.2-mla-threshold.patch"
PLANTED = FIXTURES / "mlx-lm-planted-guard.patch"  # on top of SHIPPED: use_absorbed is L == 1


def _suite(matrix, out, cache, arms=()):
    """The suite through pytest, serially, as `mlagate run` runs performance suites, on the run
    plan it would write (no refusal of unregistered modules: the fixture matrix registers one
    module of the arm's many)."""
    plan = runplans.write(matrix, out, cache, suites=("speculative",), arms=arms)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))
    }
    args = [
        sys.executable,
        "-m",
        "pytest",
        str(ROOT / "suites" / "performance" / "test_speculative.py"),
        "-q",
        "-p",
        "no:xdist",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(ROOT / "suites"),
        *runplans.options(plan, out, cache),
    ]
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    return proc, rows


def _synthetic_row(tmp_path, cache, text: str, arm: str) -> dict:
    """The synthetic case of one arm, run on an edited copy of the fixture matrix."""
    shutil.copy(PATCH, tmp_path / PATCH.name)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(text)
    _, got = _suite(matrix, tmp_path / "out", cache, arms=(arm,))
    return next(r for r in got if r["evidence"] == "synthetic")


@pytest.fixture(scope="module")
def defect_run(tmp_path_factory, real_cache):
    out = tmp_path_factory.mktemp("spec")
    proc, rows = _suite(MATRIX, out, real_cache)
    return proc, {(r["arm"], r["evidence"]): r for r in rows}


@pytest.mark.arms
def test_token_identity_holds_on_the_stock_arm(defect_run):
    proc, rows = defect_run
    stock = rows[("mlx-lm-0.32.2", "synthetic")]
    assert stock["verdict"] == "pass", (stock["reason"], proc.stdout[-3000:])
    assert stock["metrics"]["token_identity"]["count"] == 0
    table = stock["metrics"]["rows"]
    assert {r["draft"] for r in table} == {"self", "perturbed"}
    for r in table:
        assert {
            "context",
            "plain_tok_s",
            "spec_tok_s",
            "ratio",
            "verify_ms",
            "decode_ms",
            "verify_per_decode",
            "draft_tokens",
            "acceptance",
            "verdict",
        } <= set(r)
        assert r["verify_path"] == "materialised", (
            "stock mlx-lm 0.32.2 materialises every verify step (L == 1 guard)"
        )
    assert next(r for r in table if r["draft"] == "self")["acceptance"] == 1.0


@pytest.mark.arms
def test_a_runtime_without_the_processors_package_runs(tmp_path, real_cache):
    """mlx-lm 0.31.3 has no mlx_lm.processors, which 0.32's generate.py needs initialised: the
    worker initialises it only where it exists (the case raised ModuleNotFoundError before)."""
    text = MATRIX.read_text().replace(
        "arms:  # arms\n",
        "arms:  # arms\n  mlx-lm-0.31.3:\n    runtime: mlx-lm\n    pypi: mlx-lm==0.31.3\n"
        "    role: stock\n",
        1,
    )
    row = _synthetic_row(tmp_path, real_cache, text, "mlx-lm-0.31.3")
    assert row["verdict"] == "pass", row["reason"]
    assert row["metrics"]["token_identity"]["count"] == 0


@pytest.mark.arms
def test_a_planted_verify_defect_fails_token_identity(defect_run):
    _, rows = defect_run
    bad = rows[("mlx-lm-verify-defect", "synthetic")]
    assert bad["verdict"] == "fail"
    assert "greedy speculative output differs from plain decoding" in bad["reason"]
    identity = bad["metrics"]["token_identity"]
    assert identity["count"] > 0 and identity["mismatches"][0]["series"].startswith("spec:")
    assert bad["metrics"]["rows"], "the table is recorded even when the case fails"


@pytest.mark.arms
def test_a_divergence_below_the_tie_margin_is_undecidable_not_failed(tmp_path, real_cache):
    text = MATRIX.read_text().replace("float32: {cpu: 1.0e-4,", "float32: {cpu: 1.0,")
    assert "cpu: 1.0," in text
    row = _synthetic_row(tmp_path, real_cache, text, "mlx-lm-verify-defect")
    assert row["verdict"] == "invalid" and "undecidable" in row["reason"], row["reason"]
    assert (
        row["metrics"]["token_identity"]["decisive"]
        == 0
        < row["metrics"]["token_identity"]["count"]
    )


@pytest.mark.arms
def test_a_stock_arm_whose_verify_step_grows_with_context_fails_the_growth_gate(
    tmp_path, real_cache
):
    text = MATRIX.read_text().replace(
        "contexts: {quick: [32, 64]}", "contexts: {quick: [32, 1024]}"
    )
    # the shipped bound, and the shipped last look
    text = text.replace("max_verify_growth: {cpu: 1000,", "max_verify_growth: {cpu: 3.0,")
    text = text.replace("max_samples: {quick: 9}", "max_samples: {quick: 63}")
    assert "[32, 1024]" in text and "{cpu: 3.0," in text and "{quick: 63}" in text
    row = _synthetic_row(tmp_path, real_cache, text, "mlx-lm-0.32.2")
    assert row["verdict"] == "fail", row["reason"]
    assert "the verify step's cost grows with context" in row["reason"]
    gate = row["metrics"]["gate"]
    assert gate["interval"][0] > 3.0, gate
    assert gate["from_context"] == 32 and gate["to_context"] == 1024
    assert gate["verify_ms"][1] > gate["verify_ms"][0] and gate["ratio_retained"] is not None
    for r in row["metrics"]["rows"]:
        assert r["verify_path"] == "materialised" and r["decode_ms"] > 0


@pytest.mark.arms
def test_the_fixed_arm_passes_and_a_planted_guard_fails_the_growth_gate(tmp_path, real_cache):
    """The shipped fix passes the shipped bound; the same fix with its decision planted back to
    L == 1 (mlx-lm-planted-guard.patch) materialises every verify step and fails it."""
    arms = (
        "arms:  # arms\n"
        "  mlx-lm-fixed:\n    runtime: mlx-lm\n    pypi: mlx-lm==0.32.2\n"
        f"    patches: [{SHIPPED.name}]\n    role: patched\n"
        "  mlx-lm-planted-guard:\n    runtime: mlx-lm\n    pypi: mlx-lm==0.32.2\n"
        f"    patches: [{SHIPPED.name}, {PLANTED.name}]\n    role: patched\n"
    )
    text = MATRIX.read_text().replace("arms:  # arms\n", arms, 1)
    text = text.replace("contexts: {quick: [32, 64]}", "contexts: {quick: [64, 1024]}")
    text = text.replace("max_verify_growth: {cpu: 1000,", "max_verify_growth: {cpu: 3.0,")
    text = text.replace("max_samples: {quick: 9}", "max_samples: {quick: 63}")
    for folder in ("fixed", "planted"):
        (tmp_path / folder).mkdir()
        for patch in (SHIPPED, PLANTED):
            shutil.copy(patch, tmp_path / folder / patch.name)
    fixed = _synthetic_row(tmp_path / "fixed", real_cache, text, "mlx-lm-fixed")
    assert fixed["verdict"] == "pass", fixed["reason"]
    assert {r["verify_path"] for r in fixed["metrics"]["rows"]} == {"absorbed"}
    assert fixed["metrics"]["gate"]["interval"][1] <= 3.0
    planted = _synthetic_row(tmp_path / "planted", real_cache, text, "mlx-lm-planted-guard")
    assert planted["verdict"] == "fail", planted["reason"]
    assert "the verify step's cost grows with context" in planted["reason"]
    assert {r["verify_path"] for r in planted["metrics"]["rows"]} == {"materialised"}


@pytest.mark.arms
def test_an_uncalibrated_runner_is_told_to_calibrate_instead_of_a_verdict(tmp_path, real_cache):
    text = MATRIX.read_text().replace(
        "max_verify_growth: {cpu: 1000,", "max_verify_growth: {cpu: uncalibrated,"
    )
    assert "{cpu: uncalibrated," in text
    row = _synthetic_row(tmp_path, real_cache, text, "mlx-lm-0.32.2")
    assert row["verdict"] == "invalid", row["reason"]
    assert "run mlagate calibrate first" in row["reason"] and "backend cpu" in row["reason"]
    assert "rows" not in row["metrics"], "nothing is measured before the bound is"


@pytest.mark.arms
def test_one_context_cannot_decide_the_growth_gate(tmp_path):
    """Known before anything runs: a one-context grid is refused when the matrix is read."""
    from .conftest import cli

    text = MATRIX.read_text().replace("contexts: {quick: [32, 64]}", "contexts: {quick: [32]}")
    shutil.copy(PATCH, tmp_path / PATCH.name)
    (tmp_path / "matrix.yaml").write_text(text)
    proc = cli("plan", "--matrix", tmp_path / "matrix.yaml")
    assert (
        proc.returncode == 2
        and "suites.speculative.gates.contexts.quick: expected a list of at least 2" in proc.stderr
    ), proc.stderr


@pytest.mark.arms
def test_a_checkpoint_not_on_the_runner_is_argued(defect_run):
    _, rows = defect_run
    for arm in ("mlx-lm-0.32.2", "mlx-lm-verify-defect"):
        row = rows[(arm, "argued")]
        assert (
            row["verdict"] == "argued"
            and "argued-not-measured" in row["reason"]
            and row["checkpoint"] == "tiny-local"
        )


@pytest.mark.arms
def test_a_checkpoint_on_the_runner_is_run(defect_run, tmp_path, real_cache):
    _, rows = defect_run
    made = rows[("mlx-lm-0.32.2", "synthetic")]["metrics"]["checkpoints"]["target"]
    shutil.copy(PATCH, tmp_path / PATCH.name)
    text = MATRIX.read_text().replace(
        "runners: {}  # none here: argued-not-measured",
        f'runners: {{linux-cpu: "{made}"}}  # this runner holds it',
    )
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(text)
    _, got = _suite(matrix, tmp_path / "out", real_cache, arms=("mlx-lm-0.32.2",))
    row = next(r for r in got if r["evidence"] == "checkpoint")
    assert row["verdict"] == "pass", row["reason"]
    assert row["metrics"]["checkpoints"] == {"checkpoint": made}
    assert {r["draft"] for r in row["metrics"]["rows"]} == {"self"}


def test_flag_rounds_count_drafted_and_accepted_tokens():
    # up to 3 drafts a round, 8 tokens: 3 drafted, all accepted, + 1 own; 3 drafted, 1 accepted, + 1
    # own;
    # 2 left: 2 drafted, none accepted, + 1 own; 1 left: 1 drafted and accepted
    flags = [True, True, True, False, True, False, False, True]
    assert _flag_rounds(flags, 8, 3) == {
        "drafted": 3 + 3 + 2 + 1,
        "accepted": 3 + 1 + 0 + 1,
        "rounds": 4,
    }
    with pytest.raises(RuntimeError):
        _flag_rounds([True, True, True, True], 8, 3)


def test_absent_packages_get_placeholders_that_refuse_to_run():
    code = textwrap.dedent("""
        import sys
        from mlagate.worker.speculation import AbsentImporter
        finder = AbsentImporter(("mlagate_absent_probe",))
        sys.meta_path.append(finder)
        from mlagate_absent_probe.sub import Tokenizer, AutoThing
        class Mine(Tokenizer):
            pass
        AutoThing.register(Mine)  # a no-op, as mlx-lm's tokenizer_utils needs at import
        for call in (lambda: Tokenizer(), lambda: Mine(), lambda: AutoThing.from_pretrained("x")):
            try:
                call()
            except ImportError as exc:
                assert "is not installed in this worker" in str(exc)
            else:
                raise SystemExit("a placeholder ran")
        import json
        print(json.dumps(sorted(finder.used)))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["mlagate_absent_probe"]
    assert AbsentImporter().find_spec("json", None) is None, "only the named packages"


def test_checkpoint_keys_name_the_recipe(tmp_path):
    from mlagate import checkpoints

    base = checkpoints.Synthetic(
        "mlx-lm 0.32.2",
        "mlx_lm.models.deepseek_v3",
        "Model",
        "ModelArgs",
        {"num_hidden_layers": 2},
        seed=0,
    )
    assert (
        base.key
        == checkpoints.Synthetic(
            "mlx-lm 0.32.2",
            "mlx_lm.models.deepseek_v3",
            "Model",
            "ModelArgs",
            {"num_hidden_layers": 2},
            seed=0,
        ).key
    )
    changed = [
        checkpoints.Synthetic(
            "mlx-lm 0.32.2",
            "mlx_lm.models.deepseek_v3",
            "Model",
            "ModelArgs",
            {"num_hidden_layers": 3},
            seed=0,
        ),
        checkpoints.Synthetic(
            "mlx-lm 0.32.2",
            "mlx_lm.models.deepseek_v3",
            "Model",
            "ModelArgs",
            {"num_hidden_layers": 2},
            seed=1,
        ),
        checkpoints.Synthetic(
            "mlx-lm 0.32.3",
            "mlx_lm.models.deepseek_v3",
            "Model",
            "ModelArgs",
            {"num_hidden_layers": 2},
            seed=0,
        ),
        checkpoints.Synthetic(
            "mlx-lm 0.32.2",
            "mlx_lm.models.deepseek_v3",
            "Model",
            "ModelArgs",
            {"num_hidden_layers": 2},
            quant={"group_size": 64, "bits": 4},
        ),
        checkpoints.Synthetic(
            "mlx-lm 0.32.2",
            "mlx_lm.models.deepseek_v3",
            "Model",
            "ModelArgs",
            {"num_hidden_layers": 2},
            perturb={"seed": 7, "scale": 0.15},
        ),
    ]
    assert len({base.key, *(c.key for c in changed)}) == 1 + len(changed)
    assert base.folder(tmp_path) == tmp_path / "checkpoints" / base.key
    assert checkpoints.tiny_config({"num_hidden_layers": 1, "first_k_dense_replace": 1}, 2) == {
        "num_hidden_layers": 2,
        "first_k_dense_replace": 2,
    }
    with pytest.raises(checkpoints.CheckpointError, match="layer count"):
        checkpoints.tiny_config({"hidden_size": 8}, 2)
    with pytest.raises(checkpoints.CheckpointError, match="holds no config.json"):
        checkpoints.real(str(tmp_path))
