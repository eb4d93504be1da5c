"""The pytest plugin through pytester: a suite's asserts become verdicts, written as JSON."""

import json
import shutil

import pytest

from .conftest import FIXTURES

SUITE = """
import pytest
from mlagate.harness.plugin import Invalid

pytestmark = pytest.mark.mla_suite("probes")

def test_suite(mla):
    key, info = mla.build()
    obs = mla.step(key, 8, 2)
    mla.metric("path", obs["path"])
    if mla.module.id == "fake/liar":
        raise Invalid("planted invalid")
    assert mla.module.id != "fake/opaque", "planted failure"
"""


@pytest.fixture
def suite_dir(pytester, tmp_path):
    shutil.copytree(FIXTURES / "fakemla-tree", pytester.path / "fakemla-tree")
    shutil.copy(FIXTURES / "fake-matrix.yaml", pytester.path / "matrix.yaml")
    pytester.makepyfile(test_custom=SUITE)
    pytester.makeini("[pytest]\n")
    return pytester


def test_outcomes_map_to_verdicts_and_results_are_written(suite_dir, tmp_path):
    out = tmp_path / "out"
    result = suite_dir.runpytest_subprocess(
        "--mlagate-matrix",
        "matrix.yaml",
        "--mlagate-out",
        str(out),
        "--mlagate-cache",
        str(tmp_path / "cache"),
    )
    result.assert_outcomes(passed=5, failed=1, skipped=2)
    result.stdout.fnmatch_lines(
        ["*mlagate verdicts*", "*5 passed, 1 failed, 1 invalid, 1 argued-not-measured*"]
    )
    rows = {
        r["module"] + "|" + r["verdict"]: r
        for r in (json.loads(p.read_text()) for p in (out / "results").glob("*.json"))
    }
    assert {"fake/good|pass", "fake/opaque|fail", "fake/liar|invalid", "fake/good|argued"} <= set(
        rows
    )
    assert rows["fake/opaque|fail"]["reason"].startswith("planted failure")
    assert rows["fake/liar|invalid"]["reason"] == "Invalid: planted invalid"
    assert rows["fake/good|pass"]["metrics"]["path"] == "materialised"
    assert rows["fake/good|pass"]["schema"] == "mlagate.result/2"
    assert rows["fake/opaque|fail"]["failure"]["kind"] == "unclassified"  # a bare assert
    assert rows["fake/good|pass"]["failure"] is None


def test_under_xdist_every_case_is_written_once(suite_dir, tmp_path):
    out = tmp_path / "out"
    result = suite_dir.runpytest_subprocess(
        "-n",
        "2",
        "--mlagate-matrix",
        "matrix.yaml",
        "--mlagate-out",
        str(out),
        "--mlagate-cache",
        str(tmp_path / "cache"),
    )
    result.assert_outcomes(passed=5, failed=1, skipped=2)
    assert len(list((out / "results").glob("*.json"))) == 8


def test_a_bad_matrix_is_a_usage_error(suite_dir, tmp_path):
    (suite_dir.path / "matrix.yaml").write_text("version: 1\n")
    result = suite_dir.runpytest_subprocess("--mlagate-matrix", "matrix.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*matrix.yaml:1: <root>.arms: required key is missing*"])
