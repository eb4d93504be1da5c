"""A runtime tree that ships a file meant to be copied over another runtime's (it imports its
siblings by that runtime's package path) cannot be imported where it was found: `run --head`
says so in one line with what to do (an overlay: arm) and exits 3, instead of running every
case into the same ModuleNotFoundError on both sides and calling that green."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlagate import headrun
from mlagate.scan import importable
from mlagate.verdict import outcomes
from tests.conftest import ROOT, cli

SHIPPED = ROOT / "matrix.yaml"
STOCK = "mlx_lm/models/deepseek_v3.py"


def _mlx_lm_deepseek_v3() -> str:
    """mlx-lm 0.32.2's deepseek_v3.py as installed in the arm cache (read, never imported)."""
    from tests.vendored import stock_site

    cache = Path.home() / ".cache" / "mlagate"
    return (stock_site(cache) / STOCK).read_text(encoding="utf-8")


def overlay_tree(root: Path, absolute: bool) -> Path:
    """omlx/: a fix of deepseek_v3 shipped to be copied over mlx-lm's file; absolute: its
    sibling imports name mlx_lm (as such files do), else they stay relative."""
    text = _mlx_lm_deepseek_v3()
    if absolute:
        text = text.replace("from .", "from mlx_lm.models.")
    (root / "omlx" / "patches").mkdir(parents=True)
    (root / "omlx" / "__init__.py").write_text("")
    (root / "omlx" / "patches" / "__init__.py").write_text("")
    (root / "omlx" / "patches" / "deepseek_v3.py").write_text(text)
    return root


def test_run_head_on_a_file_meant_for_another_runtime_exits_3_with_one_line(tmp_path):
    tree = overlay_tree(tmp_path / "tree", absolute=True)
    proc = cli("run", "--head", tree, "--matrix", SHIPPED, "--out", tmp_path / "out")
    assert (proc.returncode, proc.stdout) == (3, ""), proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(
        f"mlagate: cannot measure: --head {tree}: omlx/patches/deepseek_v3.py imports mlx_lm "
        "(the package of runtime mlx-lm), not omlx: it cannot be imported where it was found"
    )
    assert "gate it as an `overlay:` arm on an arm of mlx-lm" in proc.stderr


def test_only_unguarded_module_level_imports_of_another_runtime_count(tmp_path):
    pkg = tmp_path / "rt"
    pkg.mkdir()
    (pkg / "a.py").write_text(
        "import os\n"
        "try:\n    import mlx_vlm\nexcept ImportError:\n    mlx_vlm = None\n"
        "def later():\n    import mlx_lm\n"
        "if True:\n    from mlx_lm.models import base\n"
    )
    (pkg / "b.py").write_text("from .c import x\nimport rt.c\n")
    foreign = {"mlx_lm", "mlx_vlm"}
    assert importable.foreign_imports(tmp_path, "rt.a", foreign) == ["mlx_lm"]
    assert importable.foreign_imports(tmp_path, "rt.b", foreign) == []
    assert importable.foreign_imports(tmp_path, "rt.missing", foreign) == []


def test_a_relative_copy_is_importable_where_it_was_found(tmp_path):
    """The planted contrast: the same file with its sibling imports relative passes the check."""
    tree = overlay_tree(tmp_path / "tree", absolute=False)
    mods = {"omlx/deepseek_v3": "omlx.patches.deepseek_v3"}
    importable.check(tree, "--head tree", "omlx", {"mlx_lm": "mlx-lm", "omlx": "omlx"}, mods)


def _raised(side: str, message: str, at: str, **more) -> dict:
    return {
        "verdict": "fail",
        "expected": "pass",
        "reason": f"the runtime raised: build failed in {side}: {message} at {at}",
        "failure": {"kind": "runtime_raised", "kinds": ["runtime_raised"], "details": {"at": at}},
        **more,
    }


FOREIGN = ("ModuleNotFoundError: No module named 'mlx_lm'", "omlx/patches/deepseek_v3.py:12")
OWN = ("ImportError: cannot import name 'x' from 'omlx.base'", "omlx/models/a.py:3 in <module>")
CONFIG = ("TypeError: __init__() got an unexpected keyword argument 'n'", "omlx/models/a.py:9")


@pytest.mark.parametrize(
    "head, base, outcome",
    [
        (FOREIGN, FOREIGN, "cannot import"),  # was "still failing as on base": green
        (CONFIG, CONFIG, "cannot build"),
        (OWN, OWN, "cannot build"),  # the tree's own import, broken on both sides
        (OWN, None, "regression"),  # broken by this change: red
        (FOREIGN, None, "cannot import"),
    ],
)
def test_a_case_that_could_not_build_on_both_sides_is_not_still_failing(head, base, outcome):
    head_row = _raised("head", *head)
    base_row = _raised("base", *base) if base else {"verdict": "pass", "expected": "pass"}
    assert outcomes.relative(head_row, base_row) == outcome
    ids = {side: f"s::m::{side}::g::float32::cpu" for side in ("head", "base")}
    rows = [{**head_row, "arm": "head", "case_id": ids["head"]}]
    rows += [{**base_row, "arm": "base", "case_id": ids["base"]}]
    j = headrun.judge(rows, list(ids.values()), False, "main")
    assert [r["outcome"] for r in j.rows] == [outcome]
    assert j.exit_code == (1 if outcome == "regression" else 3)


def test_a_plain_run_of_a_file_that_cannot_import_where_it_is_exits_3():
    row = _raised("overlaid", *FOREIGN)
    assert outcomes.outcome(row) == "cannot import"
    assert outcomes.exit_code(outcomes.counts([row])) == 3
    assert outcomes.outcome(_raised("a", *OWN)) == "regression"  # a broken own import stays red
    argued = _raised("a", *FOREIGN, expected="fail", expectation="known finding: raises")
    assert outcomes.outcome(argued) == "as expected"  # the matrix argues it


def _row(arm: str, verdict: str, kinds=("wrong_path",), **more) -> dict:
    return {
        "case_id": f"dispatch::m::{arm}::g::float32::cpu",
        "arm": arm,
        "verdict": verdict,
        "failure": {"kind": kinds[0], "kinds": list(kinds)} if verdict == "fail" else None,
        **more,
    }


def test_a_patched_arm_failing_exactly_as_its_baseline_is_not_fixed_not_a_regression():
    """Paired by the result's `baseline` field, never by its expectation's text."""
    patched = _row("p", "fail", expected="pass", baseline="s")
    stock = _row("s", "fail", expected="fail", control=True, expected_kinds=["wrong_path"])
    outcomes.mark_as_baseline([patched, stock])
    assert outcomes.outcome(patched) == "not fixed" and outcomes.is_red("not fixed")
    other = _row("p", "fail", ("guards_disagree",), expected="pass", baseline="s")
    outcomes.mark_as_baseline([other, stock])
    assert outcomes.outcome(other) == "regression"  # fails otherwise than its baseline
    alone = _row("p", "fail", expected="pass", baseline="s")
    outcomes.mark_as_baseline([alone, _row("s", "pass", expected="fail")])
    assert outcomes.outcome(alone) == "regression"
    text_only = _row("p", "fail", expected="pass", expectation="patched arm (baseline s)")
    outcomes.mark_as_baseline([text_only, stock])
    assert outcomes.outcome(text_only) == "regression"  # a reason's text pairs nothing


def test_the_baseline_field_comes_from_the_matrix_and_a_result_2_gets_it_from_its_text():
    """A patched arm's cases carry its baseline (matrix arms.<arm>.baseline) into the hand-off and
    the result; a result/2, which named it only in its expectation, is upgraded to carry it."""
    import json
    from pathlib import Path

    from mlagate import documents, upgrade
    from mlagate.matrix import load
    from mlagate.plan import Selection, expand

    m = load(Path(__file__).parents[1] / "matrix.yaml")
    cases = expand(m, Selection(suites=("dispatch",)), "quick", "cpu", "linux-cpu")
    # the cases a role expects to pass (not argued, no known finding) name their baseline, the
    # same one the expectation's text names (what the upgrade below reads)
    paired = [c for c in cases if c.expectation.endswith(f"(baseline {m.arms[c.arm].baseline})")]
    assert paired and all(c.baseline == m.arms[c.arm].baseline for c in paired)
    assert all(c.baseline is None for c in cases if c not in paired)
    assert all(c.to_json()["baseline"] == c.baseline for c in cases)
    old = {**documents_row(), "expectation": "patched arm (baseline mlx-lm-0.32.2)"}
    up = documents.validate(old, "result", "old.json")
    assert up["schema"] == "mlagate.result/3" and up["baseline"] == "mlx-lm-0.32.2"
    assert up["upgraded_from"] == "mlagate.result/2"
    control = {**documents_row(), "expected": "fail", "expectation": "control: x (baseline y)"}
    assert documents.validate(control, "result", "c.json")["baseline"] is None
    assert upgrade.result_to_3(json.loads(json.dumps(old)))["baseline"] == "mlx-lm-0.32.2"


def documents_row() -> dict:
    """A result/2 of a patched arm's case, as written before the baseline field."""
    return {
        "schema": "mlagate.result/2",
        "case_id": "dispatch::m::p::g::float32::cpu",
        "suite": "dispatch",
        "module": "m",
        "arm": "p",
        "verdict": "fail",
        "expected": "pass",
        "control": False,
        "expected_kinds": [],
        "retry": False,
        "failure": {"kind": "wrong_path", "kinds": ["wrong_path"], "details": {}},
        "attempts": [],
        "health": None,
    }


def test_discover_names_a_module_that_cannot_import_where_it_was_found(tmp_path):
    tree = overlay_tree(tmp_path / "tree", absolute=True)
    proc = cli("discover", tree, "--matrix", SHIPPED)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert (
        "  cannot import  omlx.patches.deepseek_v3: imports mlx_lm, not omlx: it cannot be "
        "imported where it was found; gate it as an `overlay:` arm (docs/matrix.md#arms)"
    ) in proc.stdout
