"""What a backend cannot run (`backend_limits`), stated once and applied to every arm, head, base
and vendored copy whose module runs the operation: MLX's CPU gather_mm has no bfloat16, so the
equivalence cases (which run bfloat16 rows) of the LongCat modules are skipped on CPU, with the
limit's reason, and planned everywhere else."""

from __future__ import annotations

import pytest
import yaml

from mlagate import matrix, plan
from mlagate.gate import headbase
from mlagate.scan.discovery import Found
from tests.conftest import ROOT

SHIPPED = ROOT / "matrix.yaml"
LONGCAT = ("mlx-lm/longcat_flash", "mlx-vlm/longcat_flash", "mlx-vlm/longcat_flash_sparse")


def cases(m: matrix.Matrix, backend: str, suites=("equivalence",)) -> list[plan.Case]:
    sel = plan.Selection(suites=suites)
    return plan.expand(m, sel, "quick", backend, "linux-cpu", keep_skipped=True)


def test_every_arm_of_a_module_that_runs_the_op_skips_the_bf16_suite_on_cpu_only():
    shipped = matrix.load(SHIPPED)
    on_cpu = cases(shipped, "cpu")
    limited = [c for c in on_cpu if c.expectation.startswith("backend limit:")]
    skipped = {(c.module, c.arm) for c in limited if c.expected == "skip"}
    assert skipped == {
        (m, a.id) for m in LONGCAT for a in shipped.arms_for(shipped.modules[m])
    }  # the patched arms and mlx-vlm 0.7.10 too: no arm is named
    assert ("mlx-vlm/longcat_flash_sparse", "mlx-vlm-0.7.10") in skipped
    for c in limited:
        assert c.expected == "skip"
        assert c.expectation.startswith("backend limit: MLX's CPU gather_mm has no bfloat16")
    assert not [c for c in cases(shipped, "metal") if c.expectation.startswith("backend limit:")]
    # a float32 suite of the same modules runs on CPU
    assert all(c.expected != "skip" for c in cases(shipped, "cpu", ("threshold",)))


def test_a_module_without_the_op_is_planned():
    """The planted defect: the limit decides by the module's ops, so a LongCat module that does
    not name gather_mm is planned (and would raise on CPU)."""
    text = SHIPPED.read_text().replace(
        "    ops: [gather_mm]  # its tiny model builds routed experts (SwitchGLU: gather_mm)\n", ""
    )
    parsed = matrix.parse(text, SHIPPED)  # beside the shipped patches
    assert not [c for c in cases(parsed, "cpu") if c.expectation.startswith("backend limit:")]
    longcat = [c for c in cases(parsed, "cpu") if c.module in LONGCAT]
    assert longcat and all(c.expected != "skip" for c in longcat)


def vlm_trees(tmp_path):
    shipped = matrix.load(SHIPPED)
    mods = {m.id: m for m in shipped.modules.values() if m.runtime == "mlx-vlm"}
    for side in ("head", "base"):
        for m in mods.values():
            path = (tmp_path / side).joinpath(*m.import_path.split(".")).with_suffix(".py")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"class {m.attention}:\n    pass\n")
    return shipped, {mid: Found(m.import_path, m.attention, mid, mid) for mid, m in mods.items()}


def test_head_and_base_meet_the_limit_with_no_expectation_carried(tmp_path):
    """mlx-vlm's own tree: longcat_flash_sparse exists only in 0.7.10 (no stock arm holds it,
    so no stock finding could be carried): head and base skip it on CPU all the same."""
    shipped, found = vlm_trees(tmp_path)
    runtime = shipped.runtimes["mlx-vlm"]
    doc = headbase.derive(shipped, runtime, tmp_path / "head", tmp_path / "base", found)
    derived = matrix.parse(yaml.safe_dump(doc), tmp_path / "derived.yaml")
    skipped = {(c.module, c.arm) for c in cases(derived, "cpu") if c.expected == "skip"}
    assert skipped == {(m, side) for m in LONGCAT[1:] for side in ("head", "base")}


BAD = [
    ("backend_limits: [{backend: tpu, dtype: bfloat16, op: gather_mm, reason: r}]",
     "backend_limits[0].backend: expected cpu or metal or cuda"),
    ("backend_limits: [{backend: cpu, dtype: bf16, op: gather_mm, reason: r}]",
     "backend_limits[0].dtype: expected float32 or bfloat16 or float16"),
    ("backend_limits: [{backend: cpu, dtype: bfloat16, op: 'mx.gather', reason: r}]",
     "backend_limits[0].op: expected an MLX operation name"),
    ("backend_limits: [{backend: cpu, dtype: bfloat16, op: gather_mm}]",
     "backend_limits[0].reason: required key is missing"),
    ("backend_limits: [{backend: cpu, dtype: bfloat16, op: gather_mm, reason: r, arm: x}]",
     "backend_limits[0].arm: unknown key"),
    ("backend_limits: [{backend: cpu, dtype: bfloat16, op: gather_qmm, reason: r}]",
     "modules.mlx-lm/longcat_flash.ops[0]: no backend_limits entry names op 'gather_mm'"),
]  # fmt: skip


@pytest.mark.parametrize("entry, message", BAD)
def test_a_bad_limit_is_one_line_naming_the_key(entry, message):
    text = SHIPPED.read_text()
    start = text.index("backend_limits:")
    end = text.index("\n\n", start)
    text = text[:start] + entry + text[end:]
    with pytest.raises(matrix.MatrixError) as err:
        matrix.parse(text, SHIPPED)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_copied_matrix_without_its_patches_says_where_they_are_looked_for(tmp_path):
    copy = tmp_path / "matrix.yaml"
    copy.write_text(SHIPPED.read_text())
    with pytest.raises(matrix.MatrixError) as err:
        matrix.load(copy)
    assert str(err.value).endswith(
        f"no such patch file: {tmp_path}/patches/mlx-lm-0.32.2-mla-threshold.patch (patch paths "
        "resolve beside the matrix file: a copied matrix needs its patches/ folder beside it)"
    )


def _closure_calls(site, import_path: str, op: str, package: str) -> bool:
    """Whether the module's file, or a file of its runtime's package it imports (transitively),
    calls `<something>.op(`: read, never imported."""
    import ast
    from pathlib import Path

    seen, todo = set(), [import_path]
    while todo:
        imp = todo.pop()
        base = Path(site).joinpath(*imp.split("."))
        files = (base.with_suffix(".py"), base / "__init__.py")
        path = next((p for p in files if p.is_file()), None)
        if imp in seen or path is None:
            continue
        seen.add(imp)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        pkg = imp if path.name == "__init__.py" else imp.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == op:
                return True
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    parent = pkg.rsplit(".", node.level - 1)[0] if node.level > 1 else pkg
                    mod = f"{parent}.{node.module}" if node.module else parent
                else:
                    mod = node.module or ""
                if mod.split(".")[0] == package:
                    todo += [mod] + [f"{mod}.{a.name}" for a in node.names]
    return False


@pytest.mark.arms
def test_every_module_that_names_an_op_reaches_it_in_each_of_its_arms(real_cache):
    """A declaration the source contradicts fails: each `ops` entry is called somewhere in the
    module's import closure inside its runtime (LongCat's SwitchGLU -> mx.gather_mm)."""
    from tests.vendored import stock_site

    shipped = matrix.load(SHIPPED)
    checked = 0
    for m in shipped.modules.values():
        for arm in shipped.arms_for(m) if m.ops else ():
            site = stock_site(real_cache, arm.id)
            package = shipped.runtimes[m.runtime].package
            for op in m.ops:
                assert _closure_calls(site, m.import_path, op, package), (m.id, arm.id, op)
                checked += 1
    assert checked == 6  # 3 arms of mlx-lm's longcat_flash, 2 of mlx-vlm's, 1 of the sparse one
    llama = stock_site(real_cache, "mlx-lm-0.32.2")  # a model without experts reaches none
    assert not _closure_calls(llama, "mlx_lm.models.llama", "gather_mm", "mlx_lm")
