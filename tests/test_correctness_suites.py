"""Each correctness suite of issue 3 is shown able to fail: the fake runtime plants the defect
that suite exists to catch, next to correct modules that pass.
"""

import json

import pytest

from .conftest import FIXTURES

MATRIX = FIXTURES / "fake-correctness.yaml"


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    from .conftest import cli

    out = tmp_path_factory.mktemp("correctness")
    cache = tmp_path_factory.mktemp("cache")
    mods = ["fake/good", "fake/fixed", "fake/offbyone", "fake/split", "fake/skewed", "fake/liar"]
    args = ["run", "--matrix", MATRIX, "--out", out, "-n", "2"]
    for suite in ("threshold", "dispatch", "l1_unchanged", "equivalence"):
        args += ["--suite", suite]
    for m in mods:
        args += ["--module", m]
    proc = cli(*args, cache=cache)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    return {(r["suite"], r["module"], r["arm"]): r for r in rows}


def test_threshold_catches_an_off_by_one_and_passes_the_exact_formula(verdicts):
    bad = verdicts[("threshold", "fake/offbyone", "fake-stock")]
    assert (
        bad["verdict"] == "fail" and "took absorbed, the formula says materialised" in bad["reason"]
    )
    assert verdicts[("threshold", "fake/fixed", "fake-stock")]["verdict"] == "pass"
    assert verdicts[("threshold", "fake/good", "fake-patched")]["verdict"] == "pass"
    assert verdicts[("threshold", "fake/good", "fake-stock")]["verdict"] == "fail"


def test_dispatch_catches_guards_that_disagree_with_where(verdicts):
    split = verdicts[("dispatch", "fake/split", "fake-stock")]
    assert split["verdict"] == "fail"
    assert split["metrics"]["first_wrong"]["L"] == 2 and split["metrics"]["first_wrong"]["T"] == 16
    assert "the query fold and the output unfold disagree" in split["reason"]
    stock = verdicts[("dispatch", "fake/good", "fake-stock")]
    assert stock["verdict"] == "fail" and stock["reason"].startswith(
        "materialised at L = 2, 3, 4, 8 on every warm cache (T = 16, 32); the formula says "
        "absorbed from T = 1; first wrong choice at L=2 T=16: took materialised"
    )
    assert verdicts[("dispatch", "fake/good", "fake-patched")]["verdict"] == "pass"


def test_a_control_is_confirmed_only_by_the_failure_kind_of_its_defect(verdicts):
    """A stock control failing dispatch by the single-query guard (wrong_path) is as expected;
    one failing it because its guards disagree (guards_disagree) is a changed failure, red."""
    from mlagate.verdict import outcomes

    stock = verdicts[("dispatch", "fake/good", "fake-stock")]
    assert stock["control"] and stock["expected_kinds"] == ["wrong_path"]
    assert stock["failure"]["kinds"] == ["wrong_path"] and outcomes.outcome(stock) == "as expected"
    split = verdicts[("dispatch", "fake/split", "fake-stock")]
    assert split["control"] and split["failure"]["kind"] == "guards_disagree"
    assert outcomes.outcome(split) == "changed failure" and outcomes.red(split)
    boundary = verdicts[("threshold", "fake/good", "fake-stock")]
    assert boundary["failure"]["kinds"] == ["boundary_off"]
    assert outcomes.outcome(boundary) == "as expected"
    wider = verdicts[("threshold", "fake/offbyone", "fake-stock")]  # one too wide, cold too
    assert wider["failure"]["kinds"] == ["boundary_off", "wrong_path"]
    assert outcomes.outcome(wider) == "changed failure"
    line = outcomes.controls_line([r for r in verdicts.values() if r["suite"] == "dispatch"])
    assert "changed failure" in line and "every stock control" not in line


def test_l1_unchanged_catches_one_ulp_and_passes_a_true_fix(verdicts):
    nudged = verdicts[("l1_unchanged", "fake/good", "fake-nudged")]
    assert (
        nudged["verdict"] == "fail"
        and "L = 1 output differs from fake-stock at element" in nudged["reason"]
    )
    assert verdicts[("l1_unchanged", "fake/good", "fake-patched")]["verdict"] == "pass"
    assert ("l1_unchanged", "fake/fixed", "fake-stock") not in verdicts, (
        "only arms with a baseline run l1_unchanged"
    )


def test_equivalence_catches_a_slightly_wrong_path(verdicts):
    skewed = verdicts[("equivalence", "fake/skewed", "fake-stock")]
    assert (
        skewed["verdict"] == "fail" and "float32/none/L=2: absorbed p99 error" in skewed["reason"]
    )
    fixed = verdicts[("equivalence", "fake/fixed", "fake-stock")]
    assert fixed["verdict"] == "pass"
    assert set(fixed["metrics"]["errors_ulps"]) == {
        f"{d}/{q}/L={L}" for d in ("float32", "bfloat16") for q in ("none", "q4g64") for L in (2, 8)
    }


def test_equivalence_marks_a_label_the_counters_deny_invalid(verdicts):
    liar = verdicts[("equivalence", "fake/liar", "fake-stock")]
    assert (
        liar["verdict"] == "invalid"
        and "forced absorbed but the counters saw split" in liar["reason"]
    )
