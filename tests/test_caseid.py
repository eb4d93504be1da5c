"""Case identity as a typed value: parsed once where an id comes in, formatted once, the text
that documents carry unchanged."""

import ast
import hashlib
import json
from pathlib import Path

import pytest

from mlagate import cli, headrun
from mlagate.caseid import CaseId, CaseIdError
from mlagate.matrix import load
from mlagate.plan import Selection, expand

SRC = Path(__file__).parents[1] / "src" / "mlagate"


def test_an_id_parses_to_its_fields_and_formats_back_to_the_same_text():
    text = "dispatch::mlx-lm/deepseek_v3::mlx-lm-0.32.2::deepseek-v3::float32::cpu"
    c = CaseId.parse(text)
    assert (c.suite, c.module, c.arm, c.geometry, c.dtype, c.backend, c.aa) == (
        "dispatch", "mlx-lm/deepseek_v3", "mlx-lm-0.32.2", "deepseek-v3", "float32", "cpu", False
    )  # fmt: skip
    assert str(c) == text and str(CaseId.parse(text + "::aa")) == text + "::aa"
    assert CaseId.parse(text + "::aa").aa and c.param == text.split("::", 1)[1]
    assert str(c.on_arm("base")) == text.replace("mlx-lm-0.32.2", "base")


@pytest.mark.parametrize(
    "bad",
    ["", "a", "s::m::a::g::float32", "s::m::a::g::float32::cpu::xx", "s::m::::g::float32::cpu",
     "s::m::a::g::float32::cpu::aa::aa", None, 3],
)  # fmt: skip
def test_a_malformed_id_is_one_line_naming_it(bad):
    with pytest.raises(CaseIdError) as err:
        CaseId.parse(bad, "where.json")
    assert str(err.value).startswith("where.json: case id ") and "\n" not in str(err.value)
    assert repr(bad) in str(err.value)


def test_the_plans_ids_and_result_files_are_those_of_the_typed_value():
    """Every case the shipped matrix expands to (A/A ones too): the id text and the result
    file's name are the ones the case id formats, the same as before the type."""
    m = load(Path(__file__).parents[1] / "matrix.yaml")
    cases = expand(m, Selection(), "quick", "cpu", "linux-cpu")
    cases += expand(m, Selection(), "quick", "cpu", "linux-cpu", aa=True)
    assert any(c.aa for c in cases) and any(c.checkpoint for c in cases)
    for c in cases:
        parsed = CaseId.parse(c.id)
        assert parsed == c.case_id and str(parsed) == c.id
        assert (parsed.suite, parsed.module, parsed.arm) == (c.suite, c.module, c.arm)
        assert parsed.geometry == (c.checkpoint or c.geometry) and parsed.aa == c.aa
    text = "probes::mlx-lm/deepseek_v3::a::g::float32::cpu::aa"
    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    stem = f"probes__mlx-lm_deepseek_v3__a__g__float32__cpu__aa-{digest}"
    assert CaseId.parse(text).file_stem == stem


def test_a_head_run_pairs_by_the_typed_value_and_refuses_a_bad_planned_id():
    ids = {side: f"s::m::{side}::g::float32::cpu" for side in ("head", "base")}
    rows = [
        {"case_id": ids[s], "arm": s, "suite": "s", "module": "m", "verdict": v, "expected": "pass"}
        for s, v in (("head", "pass"), ("base", "fail"))
    ]
    j = headrun.judge(rows, list(ids.values()), False, "main")
    assert [r["outcome"] for r in j.rows] == ["fixed by this change"]
    assert j.rows[0]["base"] is rows[1]
    with pytest.raises(CaseIdError, match="case id 's::head'"):
        headrun.judge(rows, [*ids.values(), "s::head"], False, "main")


def test_a_manifest_with_a_bad_case_id_is_one_line_exit_2(tmp_path, capsys):
    out = tmp_path / "run"
    (out / "results").mkdir(parents=True)
    manifest = {
        "schema": "mlagate.manifest/1", "runner": "linux-cpu", "profile": "quick",
        "backend": "cpu", "shard": "1/1", "plan": "x", "cases": ["probes::m"],
    }  # fmt: skip
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert cli.main(["merge", str(out), "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cases.0: case id 'probes::m'" in err, err


NOT_CASE_IDS = {"harness/crashes.py": "a pytest node id (path::test[param])"}


def _splits_on_separator(node) -> bool:
    """`x.split("::")`, `.rsplit`, `.partition` or `"::".join(...)`, or the literal "::aa"."""
    if isinstance(node, ast.Constant):
        return node.value == "::aa"
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    attr, on = node.func.attr, node.func.value
    if attr == "join":
        return isinstance(on, ast.Constant) and on.value == "::"
    return attr in ("split", "rsplit", "partition", "rpartition") and any(
        isinstance(a, ast.Constant) and a.value == "::" for a in node.args
    )


def test_no_code_splits_or_joins_a_case_id_on_its_separator():
    """Only mlagate.caseid knows how an id is made: a new `.split("::")` or `"::".join` over an
    id fails here (scan/ reads Rust paths, whose separator is the same string)."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in ("caseid.py", *NOT_CASE_IDS) or rel.startswith("scan/"):
            continue
        tree = ast.parse(path.read_text())
        found += [f"{rel}:{n.lineno}" for n in ast.walk(tree) if _splits_on_separator(n)]
    assert found == []
    planted = ast.parse('x = row["case_id"].split("::")[2]; y = "::".join(parts)')
    assert sum(map(_splits_on_separator, ast.walk(planted))) == 2
