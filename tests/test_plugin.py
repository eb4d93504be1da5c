"""The pytest plugin through pytester: a suite's asserts become verdicts, written as JSON."""

import json
import shutil

import pytest

from . import runplans
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


def _options(suite_dir, tmp_path) -> list[str]:
    """The hand-off of the probes suite over the fake matrix, as mlagate run writes it."""
    out, cache = tmp_path / "out", tmp_path / "cache"
    plan = runplans.write(suite_dir.path / "matrix.yaml", out, cache, suites=("probes",))
    return runplans.options(plan, out, cache)


def test_outcomes_map_to_verdicts_and_results_are_written(suite_dir, tmp_path):
    out = tmp_path / "out"
    result = suite_dir.runpytest_subprocess(*_options(suite_dir, tmp_path))
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
    assert rows["fake/good|pass"]["schema"] == "mlagate.result/3"
    assert rows["fake/opaque|fail"]["failure"]["kind"] == "unclassified"  # a bare assert
    assert rows["fake/good|pass"]["failure"] is None


def test_under_xdist_every_case_is_written_once(suite_dir, tmp_path):
    out = tmp_path / "out"
    result = suite_dir.runpytest_subprocess("-n", "2", *_options(suite_dir, tmp_path))
    result.assert_outcomes(passed=5, failed=1, skipped=2)
    assert len(list((out / "results").glob("*.json"))) == 8


def test_a_damaged_run_plan_is_a_usage_error_naming_it(suite_dir, tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"schema": "mlagate.run-plan/1"}))
    result = suite_dir.runpytest_subprocess("--mlagate-handoff", str(plan))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{plan}: *missing key 'matrix'*"])


def test_a_suite_without_a_run_plan_runs_nothing(suite_dir, tmp_path):
    """The harness reads only the plan: no matrix of its own, no case expanded here."""
    result = suite_dir.runpytest_subprocess("--mlagate-out", str(tmp_path / "out"))
    assert result.ret != pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*--mlagate-handoff: no hand-off given*"])
    assert not (tmp_path / "out" / "results").exists()
