"""The serving suites are shown able to fail: the fake runtime's arms plant a defect in its batch
cache (finalize forgets the padding it rolled; extract keeps a row's padding), in its padding
handling (the attention drops the batch cache's padding term) in its quantized cache (its biases
dropped when read back; a token's rounding made to depend on the later tokens of its step) and
in its prompt-cache round trip (a loaded cache loses its last token).
Each fails the suite that serves through what it broke, there only (the padding defects on the
padded rows only), and passes the others and probes,
a single-sequence suite that cannot see them; the unplanted arms pass every one."""

import json

import pytest

from .conftest import FIXTURES

MATRIX = FIXTURES / "fake-serving.yaml"
PLANTED = ("fake-batchbug", "fake-padblind")
SUITES = (
    "serving_batched",
    "serving_quantized",
    "serving_prompt_reuse",
    "serving_rotating",
    "probes",
)


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    from .conftest import cli

    out = tmp_path_factory.mktemp("serving")
    cache = tmp_path_factory.mktemp("cache")
    args = ["run", "--matrix", MATRIX, "--out", out, "-n", "2", "--module", "fake/good"]
    for suite in SUITES:
        args += ["--suite", suite]
    proc = cli(*args, cache=cache)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    return {(r["suite"], r["arm"]): r for r in rows}


@pytest.mark.parametrize("arm", PLANTED)
def test_a_planted_padding_defect_fails_batched_rows_on_the_padded_rows_only(verdicts, arm):
    r = verdicts[("serving_batched", arm)]
    assert r["verdict"] == "fail" and r["failure"]["kinds"] == ["batch_row_mismatch"]
    assert "row 1 step 1 (L=1)" in r["reason"]
    for path, row in r["metrics"]["cases"].items():
        assert row["rows_over"] == [1, 2], path  # the unpadded row 0 is untouched
        assert row["classes"]["tested"] == ["BatchKVCache"] and row["route"] == "lm"
    for suite in ("probes", "serving_prompt_reuse"):  # one sequence each
        assert verdicts[(suite, arm)]["verdict"] == "pass", suite
    q = verdicts[("serving_quantized", arm)]  # its batched mode serves through the batch cache
    assert q["failure"]["kinds"] == ["quantized_mismatch"], q["reason"]
    for label, row in q["metrics"]["cases"].items():
        assert row["rows_over"] == ([1, 2] if "/batched/" in label else []), label


def test_a_planted_quantized_cache_defect_fails_quantized_serving_only(verdicts):
    r = verdicts[("serving_quantized", "fake-quantbug")]
    assert r["verdict"] == "fail", r["reason"]
    assert r["failure"]["kinds"] == ["quantized_mismatch"], r["reason"]
    for label, row in r["metrics"]["cases"].items():
        assert row["rows_over"] == [0, 1, 2], label
    for suite in ("probes", "serving_batched", "serving_prompt_reuse"):
        assert verdicts[(suite, "fake-quantbug")]["verdict"] == "pass", suite
    assert all(c["broken"] == 0 for c in r["metrics"]["causal"].values())  # causal: not its kind


def test_a_planted_non_causal_quantized_cache_fails_the_quantized_causal_check_only(verdicts):
    """Each token's rounding depends on the tokens after it in its step: a few ULP, far inside
    quant_ulps (the plain-cache comparison passes), caught by the bitwise causal check."""
    r = verdicts[("serving_quantized", "fake-quantcausal")]
    assert r["verdict"] == "fail", r["reason"]
    assert r["failure"]["kinds"] == ["causality_broken"], r["reason"]
    assert "changed the logits at position" in r["reason"]
    for label, row in r["metrics"]["cases"].items():
        assert row["rows_over"] == [], label  # within quant_ulps of the plain run
    causal = r["metrics"]["causal"]
    assert set(causal) == set(r["metrics"]["cases"])
    assert all(c["broken"] >= 1 and c["decode_max_ulps"] <= 128 for c in causal.values())
    for suite in ("probes", "serving_batched", "serving_prompt_reuse"):
        assert verdicts[(suite, "fake-quantcausal")]["verdict"] == "pass", suite


def test_a_planted_round_trip_defect_fails_save_and_load_and_not_trim(verdicts):
    r = verdicts[("serving_prompt_reuse", "fake-roundtrip")]
    assert r["verdict"] == "fail", r["reason"]
    assert r["failure"]["kinds"] == ["reuse_mismatch"], r["reason"]
    cases = r["metrics"]["cases"]
    assert len(cases) == 2 * (1 + 3)  # per mode: the first prefix natural, the last on 3 paths
    for label, row in cases.items():
        assert (row["kept_ulps"] > 0) == label.startswith("save_load/"), label
    for suite in ("probes", "serving_batched", "serving_quantized"):
        assert verdicts[(suite, "fake-roundtrip")]["verdict"] == "pass", suite
    stock = verdicts[("serving_prompt_reuse", "fake-stock")]
    assert stock["verdict"] == "pass", stock["reason"]
    assert all(row["kept_ulps"] == 0 for row in stock["metrics"]["cases"].values())


@pytest.mark.parametrize("arm", ["fake-stock", "fake-patched"])
def test_a_working_batch_cache_gives_every_row_its_plain_run_within_its_budget(verdicts, arm):
    """Bitwise on MLX's reference BLAS; OpenBLAS picks its kernel by row count, so a few ULP
    (the fixture's same_path_ulps: 64 on the CPU), where the planted defects above move the
    padded rows by far more."""
    r = verdicts[("serving_batched", arm)]
    assert r["verdict"] == "pass", r["reason"]
    cases = r["metrics"]["cases"]
    assert set(cases) == {"path=natural", "path=absorbed", "path=materialised"}
    # 8 steps a row: the prefill, 5 widths, the uniform rejection and its decode; then 2 more:
    # rows rejecting 5, 0 and 2 tokens of a verify of 8 (extract, trim, merge) and a decode
    assert all(c["max_ulps"] <= 64 and c["compared"] == 3 * 10 for c in cases.values())
    assert all("rejection" not in c for c in cases.values())  # every rejection was expressed
    assert cases["path=natural"]["classes"] == {
        "tested": ["BatchKVCache"],
        "reference": ["KVCache"],
    }


def test_a_working_quantized_cache_passes_within_its_measured_budget(verdicts):
    r = verdicts[("serving_quantized", "fake-stock")]
    assert r["verdict"] == "pass", r["reason"]
    cases = r["metrics"]["cases"]
    assert len(cases) == 2 * 2 * 3  # q8 and q4, single and batched, natural and both forced
    for label, row in cases.items():
        quantized = "BatchQuantizedKVCache" if "/batched/" in label else "QuantizedKVCache"
        assert quantized in row["classes"]["tested"], label
        assert row["compared"] == 3 * 8, label  # q4 against the plain run kept from q8: all of it
        assert 0 < row["max_ulps"] <= (16384 if label.startswith("q8") else 262144), label
    causal = r["metrics"]["causal"]  # every quantized configuration: causal and decode-equal
    assert set(causal) == set(cases)
    for label, c in causal.items():
        assert (c["pairs"], c["broken"]) == (4, 0), label
        assert any("QuantizedKVCache" in k for k in c["classes"]), label
        assert c["decode_max_ulps"] <= 128, label


def test_a_planted_extract_defect_fails_per_row_rejection_on_the_padded_rows_only(verdicts):
    """extract() keeps a row's left padding: only the steps after the rows rejected different
    counts (taken out of the batch, trimmed, merged back) move, and only on padded rows."""
    r = verdicts[("serving_batched", "fake-extractpad")]
    assert r["verdict"] == "fail" and r["failure"]["kinds"] == ["batch_row_mismatch"]
    assert "row 1 step 9 (L=1)" in r["reason"], r["reason"]  # the decode after the merge
    assert " step 8 " not in r["reason"]  # the verify step itself ran before the extraction
    for path, row in r["metrics"]["cases"].items():
        assert row["rows_over"] == [1, 2], path
    for suite in ("probes", "serving_quantized", "serving_prompt_reuse"):  # no per-row trims
        assert verdicts[(suite, "fake-extractpad")]["verdict"] == "pass", suite


def test_a_runtime_without_a_rotating_cache_is_not_servable_there(verdicts):
    """The fake runtime's make_prompt_cache takes no max_kv_size: a finding, never a pass."""
    r = verdicts[("serving_rotating", "fake-stock")]
    assert r["verdict"] == "fail" and r["failure"]["kinds"] == ["not_servable"], r["reason"]
    assert "make_prompt_cache takes no max_kv_size" in r["reason"]


@pytest.mark.arms
def test_a_rotating_cache_passes_where_the_runtime_is_right_and_fails_where_it_is_not(
    tmp_path, run_cli, real_cache
):
    """deepseek_v3 (DeepSeek-V3 geometry) on its runtimes' rotating caches: mlx-vlm 0.7.10 one
    row at a time passes every check (its batches cannot rotate: not_servable); mlx-lm 0.32.2's
    RotatingKVCache gives a verify step past the window other logits than decoding (the
    prefill_decode_mismatch finding), while its batched rotating cache passes, and both equal
    the plain cache bitwise while they fit and stay causal past it."""
    from .conftest import ROOT

    proc = run_cli(
        *("run", "--suite", "serving_rotating", "--module", "mlx-lm/deepseek_v3"),
        *("--module", "mlx-vlm/deepseek_v3", "--arm", "mlx-lm-0.32.2", "--arm", "mlx-vlm-0.7.10"),
        *("--out", tmp_path),
        cwd=ROOT,
        cache=real_cache,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr  # every verdict as expected
    rows = [json.loads(p.read_text()) for p in (tmp_path / "results").glob("*.json")]
    rows = {r["arm"]: r for r in rows if r["geometry"]["id"] == "deepseek-v3"}
    lm, vlm = rows["mlx-lm-0.32.2"], rows["mlx-vlm-0.7.10"]
    assert lm["failure"]["kinds"] == ["prefill_decode_mismatch"], lm["reason"]
    assert vlm["failure"]["kinds"] == ["not_servable"], vlm["reason"]
    assert "_make_cache takes no max_kv_size" in vlm["reason"]
    for r in (lm, vlm):
        for label, c in r["metrics"]["cases"].items():
            assert c["compared"] > 0 and not c["rows_over"], label  # inside the window
            assert c["max_ulps"] == 0 or "batched" in label, label
        for label, c in r["metrics"]["causal"].items():
            assert any("Rotating" in k for k in c["classes"]), label
            broken = 2 if (r is lm and "single" in label) else 0  # rows 30 and 20 past W
            assert c["broken"] == broken, label


@pytest.mark.arms
def test_real_batches_reject_per_row_through_extract_trim_and_merge(tmp_path, run_cli, real_cache):
    """mlx-lm 0.32.2 (its _merge_caches) and mlx-vlm 0.7.10 (each row cache's merge): rows of
    deepseek_v3 rejecting 5, 0 and 2 tokens each equal their own plain runs, the decode after
    included (14 steps a row); glm5_next's BatchPoolingCache cannot be trimmed, so its batch
    stops at the per-row step and says so."""
    from .conftest import ROOT

    proc = run_cli(
        *("run", "--suite", "serving_batched", "--module", "mlx-lm/deepseek_v3"),
        *("--module", "mlx-vlm/deepseek_v3", "--module", "mlx-vlm/glm5_next"),
        *("--arm", "mlx-lm-0.32.2", "--arm", "mlx-vlm-0.7.10", "--out", tmp_path),
        cwd=ROOT,
        cache=real_cache,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    rows = [json.loads(p.read_text()) for p in (tmp_path / "results").glob("*.json")]
    measured = [r for r in rows if r["verdict"] != "argued"]
    assert {r["module"] for r in measured} == {
        "mlx-lm/deepseek_v3",
        "mlx-vlm/deepseek_v3",
        "mlx-vlm/glm5_next",
    }
    for r in measured:
        assert r["verdict"] == "pass", r["reason"]
        for label, c in r["metrics"]["cases"].items():
            if r["module"].endswith("glm5_next"):
                assert c["compared"] == 3 * 13 and "not expressible" in c["rejection"], label
            else:
                assert c["compared"] == 3 * 14 and "rejection" not in c, label


def test_causal_variants_change_one_token_of_the_widest_untrimmed_step():
    from mlagate.harness import servingcausal

    steps = [
        {"tokens": [[1], [2]], "width": 1},
        {"tokens": [[1, 2, 3, 4], [5, 6, 7, 8]], "width": 4},
        {"tokens": [[9] * 6, [9] * 6], "width": 6, "trim": 2},  # a rejection: never fed here
    ]
    runs, pairs, where = servingcausal.variants([[1, 2, 3], [4, 5]], steps, 64)
    assert pairs == [("wide", "decode"), ("j=1", "wide"), ("j=2", "wide"), ("j=3", "wide")]
    assert where["j=2|wide"] == {"starts": [4, 3], "L": 4, "j": 2}  # prompt + the decode
    assert [len(s["tokens"][0]) for s in runs["decode"]["steps"]] == [1, 1, 1, 1, 1]
    changed = runs["j=2"]["steps"][-1]["tokens"]
    assert [t[:2] + t[3:] for t in changed] == [[1, 2, 4], [5, 6, 8]]
    assert [t[2] for t in changed] != [3, 7]
    one = [{"tokens": [[1], [2]], "width": 1}]
    assert servingcausal.variants([[1], [2]], one, 64)[1] == [("wide", "decode")]  # L = 1
