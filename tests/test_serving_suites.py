"""The serving suites are shown able to fail: the fake runtime's arms plant a defect in its batch
cache (finalize forgets the padding it rolled) and in its padding handling (the attention drops
the batch cache's padding term). Each fails serving_batched on the padded rows only, and passes
probes, a single-sequence suite that cannot see it; the unplanted arms pass both."""

import json

import pytest

from .conftest import FIXTURES

MATRIX = FIXTURES / "fake-serving.yaml"
PLANTED = ("fake-batchbug", "fake-padblind")


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    from .conftest import cli

    out = tmp_path_factory.mktemp("serving")
    cache = tmp_path_factory.mktemp("cache")
    args = ["run", "--matrix", MATRIX, "--out", out, "-n", "2", "--module", "fake/good"]
    for suite in ("serving_batched", "probes"):
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
    assert verdicts[("probes", arm)]["verdict"] == "pass"  # one sequence: nothing to see


@pytest.mark.parametrize("arm", ["fake-stock", "fake-patched"])
def test_a_working_batch_cache_gives_every_row_its_plain_run_bitwise(verdicts, arm):
    r = verdicts[("serving_batched", arm)]
    assert r["verdict"] == "pass", r["reason"]
    cases = r["metrics"]["cases"]
    assert set(cases) == {"path=natural", "path=absorbed", "path=materialised"}
    assert all(c["max_ulps"] == 0 and c["compared"] == 3 * 8 for c in cases.values())
    assert cases["path=natural"]["classes"] == {
        "tested": ["BatchKVCache"],
        "reference": ["KVCache"],
    }
