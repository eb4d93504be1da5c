"""Serving verdicts per configuration (mlagate.harness.configurations): what a runtime cannot
serve is listed against its named finding, never failed; anything else that goes wrong fails
the case; a configuration that went worse than on base is a changed configuration in a head
run (mlagate.verdict.outcomes)."""

from types import SimpleNamespace

from mlagate.harness.configurations import Configurations, counts
from mlagate.matrix import Unservable
from mlagate.verdict import outcomes

RAISES = Unservable(
    "quant-raises", "serving_quantized", ("q*/single/*",), "raises", "r", match="swapaxes"
)
NAMED = Unservable(
    "named", "serving_quantized", ("q4*",), "probe", "r", modules=("m/a",), match="no way"
)


def _mla(*declared, module="m/a"):
    case = SimpleNamespace(suite="serving_quantized", module=module, arm="x", backend="cpu")
    matrix = SimpleNamespace(unservable=declared)
    return SimpleNamespace(case=case, ctx=SimpleNamespace(matrix=matrix))


def test_a_declared_raise_is_listed_not_failed_and_an_undeclared_one_fails():
    c = Configurations(_mla(RAISES))
    raised = [
        (
            "runtime_raised",
            "the runtime raised: AttributeError: 'list' object has no "
            "attribute 'swapaxes' at mlx_lm/models/deepseek_v3.py:120",
        )
    ]
    assert c.judge("q8g64/single/path=natural", raised)["outcome"] == "cannot serve"
    assert c.table["q8g64/single/path=natural"]["finding"] == "quant-raises"
    assert not c.problems
    other = [("runtime_raised", "the runtime raised: ValueError: boom at x.py:1")]
    assert c.judge("q8g64/single/path=absorbed", other)["outcome"] == "raised"
    assert c.judge("q8g64/batched/path=natural", raised)["outcome"] == "raised"  # not declared
    assert [k for k, _ in c.problems] == ["runtime_raised", "runtime_raised"]
    assert c.judge("q4g64/single/path=natural", [])["outcome"] == "equal"
    assert counts(c.table) == {"equal": 1, "differs": 0, "cannot serve": 1, "raised": 2}


def test_a_difference_fails_even_where_the_configuration_also_cannot_be_served():
    c = Configurations(_mla(RAISES))
    found = [
        ("quantized_mismatch", "row 1 step 2: 9e9 ULP"),
        ("runtime_raised", "AttributeError: 'list' object has no attribute 'swapaxes'"),
    ]
    e = c.judge("q8g64/single/path=natural", found)
    assert e["outcome"] == "differs" and e["where"] == "row 1 step 2: 9e9 ULP"
    assert [k for k, _ in c.problems] == ["quantized_mismatch"]


def test_a_named_declaration_that_is_served_and_equal_fails_as_fixed():
    c = Configurations(_mla(NAMED))
    c.judge("q4g64/single/path=natural", [])
    assert [k for k, _ in c.problems] == ["finding_fixed"]
    other = Configurations(_mla(NAMED, module="m/b"))  # not its module: nothing declared
    other.judge("q4g64/single/path=natural", [("not_servable", "no way")])
    assert [k for k, _ in other.problems] == ["not_servable"]


def _row(verdict, **configs):
    cfg = {k.replace("_", "/"): {"outcome": v} for k, v in configs.items()}
    return {"verdict": verdict, "expected": "pass", "metrics": {"configurations": cfg}}


def test_a_configuration_worse_on_head_than_on_base_is_red_in_a_head_run():
    base = _row("pass", a="equal", b="cannot serve")
    assert outcomes.relative(_row("pass", a="equal", b="cannot serve"), base) == "as expected"
    for head in (
        _row("pass", a="cannot serve", b="cannot serve"),  # served before, not now
        _row("pass", b="cannot serve"),  # no longer covered
        _row("fail", a="differs", b="cannot serve"),  # equal before, differs now
    ):
        got = outcomes.relative(head, base)
        assert got == outcomes.CHANGED_CONFIGURATION and outcomes.is_red(got), head
    assert outcomes.worse_configurations(
        _row("pass", a="cannot serve", b="cannot serve"), base
    ) == ["a: equal -> cannot serve"]
    better = _row("pass", a="equal", b="equal")
    assert outcomes.relative(better, base) == "as expected"


def test_head_serving_what_base_cannot_is_fixed_by_this_change_and_only_that():
    """A declaration carried to head (headbase._unservable): head serving it and equal fails with
    finding_fixed alone, which against a passing base is a fix, not a regression."""
    base = _row("pass", a="equal", b="cannot serve")
    fixed = {**_row("fail", a="equal", b="equal"), "failure": {"kinds": ["finding_fixed"]}}
    assert outcomes.relative(fixed, base) == outcomes.FIXED_BY_CHANGE
    broke = {**fixed, "failure": {"kinds": ["finding_fixed", "runtime_raised"]}}
    assert outcomes.relative(broke, base) == "regression"


def test_a_release_declaration_holds_for_head_and_base_in_a_derived_matrix():
    from types import SimpleNamespace

    from mlagate.gate.headbase import _unservable

    raw = [
        {"finding": "f", "suite": "s", "modules": ["m"], "arms": ["rel"], "configurations": ["*"]},
        {"finding": "g", "suite": "s", "arms": ["old"], "configurations": ["*"]},
    ]
    got = _unservable(raw, {"rel"}, {"m": {}}, {"m": SimpleNamespace(reuses=None)})
    assert [(e["finding"], e["arms"]) for e in got] == [("f", ["base", "head"])]


def test_the_serving_grid_lists_each_finding_once_with_the_configurations_it_covers():
    from mlagate.report import serving, summary

    def row(arm, **configs):
        return {
            "suite": "serving_quantized",
            "module": "m/a",
            "arm": arm,
            "case_id": f"serving_quantized::m/a::{arm}::g::float32::cpu",
            "geometry": {"id": "g"},
            "verdict": "pass",
            "metrics": {"configurations": configs},
        }

    cannot = {"outcome": "cannot serve", "finding": "f1", "reason": "no <b>way</b>"}
    rows = [
        row("x", q8=cannot, q4={"outcome": "equal"}),
        row("y", q8=cannot, q4={"outcome": "differs", "where": "row 1"}),
    ]
    (g,) = serving.grid(rows)
    assert g["labels"] == ["q8", "q4"] and g["counts"]["cannot serve"] == 2
    assert g["findings"] == [{"name": "f1", "covers": ["m/a x q8", "m/a y q8"]}]
    assert [c["short"] for c in g["lines"][1]["cells"]] == ["—", "≠"]
    text = "\n".join(summary._serving(rows))
    assert "| m/a | y | g | 0 | 1 | 1 | 0 |" in text and "**f1**: 2 configurations" in text
