"""The serving suites are shown able to fail: the fake runtime's arms plant a defect in its batch
cache (finalize forgets the padding it rolled; filter keeps the wrong rows' padding once a row
leaves; extract keeps a row's padding), in its padding handling (the attention drops the batch
cache's padding term) in its quantized cache (its biases dropped when read back; a token's
rounding made to depend on the later tokens of its step), in its prompt-cache round trip (a
loaded cache loses its last token) and in its rotating cache (it never evicts).
Each fails the suite that serves through what it broke, there only (the padding defects on the
padded rows only), and passes the others and probes,
a single-sequence suite that cannot see them; the unplanted arms pass every one."""

import json

import pytest

from .conftest import FIXTURES

MATRIX = FIXTURES / "fake-serving.yaml"
PLANTED = ("fake-batchbug", "fake-padblind")
# the step before which row 0 leaves the batch: after 5 widths, the uniform rejection and its
# decode (the fixture asks for no transaction route: the fake runtime has none)
LEAVE = 7
EXTRACT = 10  # the per-row rejection's extract route, over rows 1 and 2: after the leave's 2 steps
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
        assert row["classes"]["tested"] == ["BatchKVCache"] and row["batching"] == "lm"
    for suite in ("probes", "serving_prompt_reuse"):  # one sequence each
        assert verdicts[(suite, arm)]["verdict"] == "pass", suite
    q = verdicts[("serving_quantized", arm)]  # its batched mode serves through the batch cache
    assert q["failure"]["kinds"] == ["quantized_mismatch"], q["reason"]
    for label, row in q["metrics"]["cases"].items():
        assert row["rows_over"] == ([1, 2] if "/batched/" in label else []), label


def test_a_planted_filter_defect_fails_the_kept_rows_after_a_row_leaves_only(verdicts):
    """filter keeping the first rows' padding: every row equals its plain run until row 0
    leaves the batch, then the kept rows (given another row's padding) differ; the cold batch
    shows it too; the single-sequence suites pass."""
    r = verdicts[("serving_batched", "fake-filterbug")]
    assert r["verdict"] == "fail" and r["failure"]["kinds"] == ["batch_row_mismatch"]
    first = r["reason"].split(";")[0]  # problems in row and step order: the earliest first
    assert f"row 1 step {LEAVE + 1} (L=1)" in first, r["reason"]
    for path, row in r["metrics"]["cases"].items():  # cold: rows 1 and 2 had paddings 1 and 1,
        over = [1] if path == "cold" else [] if path.endswith("=uniform") else [1, 2]  # now 0, 1
        assert row["rows_over"] == over, path  # the uniform rejection comes before the leave
        outcome = r["metrics"]["configurations"][path]["outcome"]
        assert outcome == ("equal" if not over else "differs"), path
    for suite in ("probes", "serving_quantized", "serving_prompt_reuse"):
        assert verdicts[(suite, "fake-filterbug")]["verdict"] == "pass", suite


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
    paths = ("path=natural", "path=absorbed", "path=materialised")
    routes = ("", "/rejection=uniform", "/rejection=extract")
    assert set(cases) == {p + r for p in paths for r in routes} | {"cold"}
    assert {c["outcome"] for c in r["metrics"]["configurations"].values()} == {"equal"}
    # the prefill and 7 steps for the 3 rows (5 widths, the uniform rejection and its decode);
    # then 4 for the rows kept (the leave's decode and verify, the extract route: rows rejecting
    # 5 and 0 tokens of a verify of 8, and its decode): each rejection its two steps
    assert all(c["max_ulps"] <= 64 for c in cases.values())
    for p in paths:
        assert [cases[p + r]["compared"] for r in routes] == [3 * 6 + 2 * 2, 3 * 2, 2 * 2], p
    assert cases["cold"]["compared"] == 3 * 2 + 2 * 2 and cases["cold"]["max_ulps"] <= 64
    assert all("rejection" not in c for c in cases.values())  # every rejection was expressed
    assert all("per_row_rejection" not in c for c in cases.values())
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


def test_the_steps_of_a_per_row_rejection_by_both_routes_and_of_rows_leaving():
    """The per-row rejection: a verify of the widest width whose rows reject their own counts
    (cycled over the rows in the batch, at most width - 1), then a decode: by the transaction
    route over every row, by the extract route over the rows kept after gates.leave (a decode
    before which those rows leave, then a verify of the widest width); every step holds tokens
    for every row."""
    from mlagate.harness import serving as sv

    g = {"rows": [5, 3, 2], "widths": [1, 4], "rejected": 1, "leave": [0]}
    g |= {"rejected_rows_transaction": [0, 2, 9], "rejected_rows_extract": [2, 0, 1]}
    rows, steps = sv.rows_and_steps(g, 50, 1)
    assert [len(r) for r in rows] == [5, 3, 2]
    assert [s["width"] for s in steps] == [1, 4, 4, 1, 4, 1, 1, 4, 4, 1]
    assert steps[2]["trim"] == 1 and "route" not in steps[2]
    assert (steps[4]["route"], steps[4]["trim"]) == ("transaction", [0, 2, 3])
    assert (steps[8]["route"], steps[8]["trim"]) == ("extract", [0, 2, 0])  # rows 1 and 2
    assert steps[6]["keep"] == [1, 2] and not any("keep" in s for s in steps[:6] + steps[7:])
    assert all(len(t) == s["width"] for s in steps for t in s["tokens"])
    assert all(len(s["tokens"]) == 3 for s in steps)


def test_a_planted_extract_defect_fails_per_row_rejection_on_the_padded_rows_only(verdicts):
    """extract() keeps a row's left padding: only the steps after the rows rejected different
    counts by the extract route (taken out of the batch, trimmed, merged back) move, on the
    rows still in the batch then (both padded: the fake runtime's filter keeps their padding)."""
    r = verdicts[("serving_batched", "fake-extractpad")]
    assert r["verdict"] == "fail" and r["failure"]["kinds"] == ["batch_row_mismatch"]
    first = r["reason"].split(";")[0]  # problems in row and step order: the earliest first
    assert f"step {EXTRACT + 1} (L=1)" in first, r["reason"]  # the decode after the merge
    assert f" step {EXTRACT} " not in r["reason"]  # the verify ran before the extraction
    for path, row in r["metrics"]["cases"].items():  # row 0 has left
        assert row["rows_over"] == ([1, 2] if path.endswith("=extract") else []), path
    outcomes = {k: c["outcome"] for k, c in r["metrics"]["configurations"].items()}
    assert {k for k, o in outcomes.items() if o == "differs"} == {
        f"path={p}/rejection=extract" for p in ("natural", "absorbed", "materialised")
    }
    for suite in ("probes", "serving_quantized", "serving_prompt_reuse"):  # no per-row trims
        assert verdicts[(suite, "fake-extractpad")]["verdict"] == "pass", suite


def test_a_route_the_runtime_cannot_take_fails_not_expressible(tmp_path):
    """Asked for the transaction route, the fake runtime (no speculative cache transaction)
    fails serving_batched with kind not_expressible, one problem a path, never a quiet pass; the
    batched steps it does not hide are still compared (and pass)."""
    from .conftest import FIXTURES, cli

    text = MATRIX.read_text().replace(
        "rejected_rows_transaction: []", "rejected_rows_transaction: [0, 3, 6]"
    )
    assert "[0, 3, 6]" in text
    (tmp_path / "m.yaml").write_text(text)
    for path in [FIXTURES / "fakemla-tree", *FIXTURES.glob("*.patch")]:  # beside the matrix
        (tmp_path / path.name).symlink_to(path)
    out = tmp_path / "out"
    args = ["run", "--matrix", tmp_path / "m.yaml", "--out", out, "--suite", "serving_batched"]
    proc = cli(*args, "--module", "fake/good", "--arm", "fake-stock", cache=tmp_path / "cache")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (r,) = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    assert r["verdict"] == "fail" and r["failure"]["kinds"] == ["not_expressible"], r["reason"]
    assert r["reason"].count("the transaction route: the runtime has no speculative") == 3
    for p in ("natural", "absorbed", "materialised"):
        parts = [c for label, c in r["metrics"]["cases"].items() if label.startswith(f"path={p}")]
        assert sum(c["compared"] for c in parts) == 3 * 10 + 2 * 4, p
        assert all(c["rows_over"] == [] for c in parts), p
        configs = r["metrics"]["configurations"]
        assert configs[f"path={p}/rejection=transaction"]["outcome"] == "cannot serve"  # listed,
        assert configs[f"path={p}"]["outcome"] == "equal"  # and undeclared: it fails the case


def test_a_rotating_cache_that_never_evicts_fails_past_its_window_only(verdicts):
    """make_prompt_cache(model, max_kv_size=32) gives a "rotating" cache that keeps every token:
    within the window it equals the plain cache and it is causal, but past the window no row
    differs from its plain run: rotating_mismatch, single and batched, every path; the other
    suites pass."""
    r = verdicts[("serving_rotating", "fake-norotate")]
    assert r["verdict"] == "fail" and r["failure"]["kinds"] == ["rotating_mismatch"], r["reason"]
    assert r["reason"].startswith("W=32/single/path=natural: past max_kv_size=32 every row")
    assert "the cache never evicts (+3 more)" in r["reason"]  # 6 configurations
    assert all(c["rows_over"] == [] for c in r["metrics"]["cases"].values())  # while it fits
    assert all(c["broken"] == 0 for c in r["metrics"]["causal"].values())
    for suite in ("serving_batched", "serving_quantized", "serving_prompt_reuse", "probes"):
        assert verdicts[(suite, "fake-norotate")]["verdict"] == "pass", suite


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
    assert vlm["verdict"] == "pass", vlm["reason"]  # what its batches cannot serve is listed
    configs = vlm["metrics"]["configurations"]
    assert {k for k, c in configs.items() if c["outcome"] == "cannot serve"} == {
        f"W=32/batched/path={p}" for p in ("natural", "absorbed", "materialised")
    }
    assert "_make_cache takes no max_kv_size" in configs["W=32/batched/path=natural"]["reason"]
    assert {k: set(v) for k, v in vlm["metrics"]["findings"].items()} == {
        "vlm-batches-never-rotate": {
            f"W=32/batched/path={p}" for p in ("natural", "absorbed", "materialised")
        }
    }
    for r in (lm, vlm):
        for label, c in r["metrics"]["cases"].items():
            assert c["compared"] > 0 and not c["rows_over"], label  # inside the window
            assert c["max_ulps"] == 0 or "batched" in label, label
        for label, c in r["metrics"]["causal"].items():
            assert any("Rotating" in k for k in c["classes"]), label
            broken = 2 if (r is lm and "single" in label) else 0  # rows 30 and 20 past W
            assert c["broken"] == broken, label


@pytest.mark.arms
def test_real_batches_reject_per_row_by_both_routes(tmp_path, run_cli, real_cache):
    """The per-row rejection on deepseek_v3 and glm5_next, each route its own configuration: the
    transaction route (rows rejecting 0, 3 and 6 tokens through mlx-vlm 0.7.10's speculative
    cache transaction; mlx-lm 0.32.2 has none: cannot serve, no-speculative-cache-transaction)
    and the extract route (the rows kept after row 0 left rejecting 5 and 0 tokens through
    mlx-lm's _merge_caches or each mlx-vlm row cache's merge): each row equals its own plain
    run, the decodes after included (34 steps of the plain rows, then 6, 6 and 4 per route);
    glm5_next's BatchPoolingCache cannot be trimmed nor taken apart, so its uniform and extract
    routes cannot serve (pool-cache-cannot-be-trimmed; the extract batch stops after 2 steps).
    Every case passes: what a runtime cannot serve is listed, not failed."""
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
    compared = {"": 34, "uniform": 6, "transaction": 6, "extract": 4}
    for r in measured:
        assert (r["verdict"], r["failure"]) == ("pass", None), r["case_id"]
        pool, lm = r["module"].endswith("glm5_next"), r["module"].startswith("mlx-lm")
        cannot = {
            "transaction": "no-speculative-cache-transaction" if lm else None,
            "uniform": "pool-cache-cannot-be-trimmed" if pool else None,
            "extract": "pool-cache-cannot-be-trimmed" if pool else None,
        }
        configs = r["metrics"]["configurations"]
        for path in ("natural", "absorbed", "materialised"):
            for route, steps in compared.items():
                label = f"path={path}" + (f"/rejection={route}" if route else "")
                finding = cannot.get(route)
                got = configs[label]
                if finding:
                    assert (got["outcome"], got["finding"]) == ("cannot serve", finding), label
                else:
                    assert got == {"outcome": "equal"}, label
                    assert r["metrics"]["cases"][label]["compared"] == steps, label
                if route == "extract" and pool:
                    assert r["metrics"]["cases"][label]["compared"] == 2, label


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
