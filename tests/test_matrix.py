import dataclasses
import re
from pathlib import Path

import pytest

from mlagate import matrix
from mlagate.matrix import MatrixError

from .conftest import FAKE_MATRIX, ROOT

SHIPPED = ROOT / "matrix.yaml"


def test_shipped_matrix_loads_into_frozen_dataclasses():
    m = matrix.load(SHIPPED)
    assert m.version == 1
    assert {"mlx-lm-0.32.2", "mlx-lm-0.32.2-patched", "mlx-vlm-0.6.17", "mlx-vlm-0.7.10"} <= set(
        m.arms
    )
    assert m.arms["mlx-lm-0.32.2-patched"].patches[0].is_file()
    with pytest.raises(AttributeError):
        m.arms["mlx-lm-0.32.2"].role = "patched"
    with pytest.raises(TypeError):
        m.modules["mlx-lm/deepseek_v3"].config["x"] = 1


def test_the_gates_reference_in_the_docs_is_generated_from_the_suites():
    from mlagate.contract import gatedoc

    text = (ROOT / "docs" / "matrix.md").read_text()
    block = text[text.index(gatedoc.BEGIN) : text.index(gatedoc.END) + len(gatedoc.END)]
    assert block == gatedoc.render(), (
        "docs/matrix.md is stale: regenerate it with python -m mlagate.contract.gatedoc"
    )


def test_every_section_of_the_matrix_is_described_in_the_docs():
    text = (ROOT / "docs" / "matrix.md").read_text()
    shipped = matrix.load(SHIPPED)
    for section in (
        "runtimes",
        "arms",
        "geometries",
        "modules",
        "checkpoints",
        "suites",
        "runners",
        "profiles",
    ):
        assert f"`{section}." in text, section
    for key in (
        "expectations[]",
        "allowlist[]",
        *(f.name for f in dataclasses.fields(shipped.profiles["quick"]) if f.name != "id"),
    ):
        assert f"`{key}`" in text, key


BASE = FAKE_MATRIX.read_text()


def _parse(text: str, tmp_path: Path):
    (tmp_path / "fakemla-tree").mkdir(exist_ok=True)
    return matrix.parse(text, tmp_path / "m.yaml")


@pytest.mark.parametrize(
    ("edit", "key", "line_of"),
    [
        (
            lambda t: t.replace(
                "    role: stock  # role", "    role: stock  # role\n    colour: red  # unknown"
            ),
            "arms.fake-stock.colour",
            "colour:",
        ),
        (
            lambda t: t.replace("kv_lora_rank: 64", "kv_lora_rank: sixty-four"),
            "geometries.tiny.kv_lora_rank",
            "sixty-four",
        ),
        (
            lambda t: t.replace(
                "geometries: [tiny]  # geometries\n  fake/liar",
                "geometries: [huge]  # geometries\n  fake/liar",
            ),
            "modules.fake/good.geometries[0]",
            "[huge]",
        ),
        (
            lambda t: t.replace(
                "    runtime: fakemla  # runtime\n    import: fakemla.models.liar",
                "    runtime: nope  # runtime\n    import: fakemla.models.liar",
            ),
            "modules.fake/liar.runtime",
            "runtime: nope",
        ),
        (
            lambda t: t.replace("  fake/liar:  # planted", "  fake/good:  # planted"),
            "fake/good",
            "fake/good:  # planted",
        ),
        (
            lambda t: t.replace("version: 1  # schema version", "version: 2  # schema version"),
            "version",
            "version: 2",
        ),
        (
            lambda t: t.replace("    dtype: float32  # dtype", "    dtype: float8  # dtype"),
            "profiles.quick.dtype",
            "float8",
        ),
        (
            lambda t: t.replace("    heads: 2  # heads", ""),
            "profiles.quick.heads",
            "quick:  # quick",
        ),
    ],
    ids=[
        "unknown-key",
        "wrong-type",
        "dangling-geometry",
        "dangling-runtime",
        "duplicate-id",
        "version",
        "bad-enum",
        "missing-key",
    ],
)
def test_bad_input_is_one_line_naming_file_line_and_key(tmp_path, edit, key, line_of):
    text = edit(BASE)
    assert text != BASE
    with pytest.raises(MatrixError) as err:
        _parse(text, tmp_path)
    message = str(err.value)
    assert "\n" not in message
    expected_line = next(i for i, line in enumerate(text.splitlines(), 1) if line_of in line)
    assert message.startswith(f"{tmp_path / 'm.yaml'}:{expected_line}: {key}"), message


def test_invalid_yaml_names_the_line(tmp_path):
    with pytest.raises(MatrixError, match=r"m\.yaml:4: <yaml>: not valid YAML"):
        _parse("version: 1\nruntimes: {a: 1}\narms: [unclosed: x\nnext: 2\n", tmp_path)


def test_missing_patch_file_is_named(tmp_path):
    text = BASE.replace(
        "    role: stock  # role",
        "    patches: [no-such.patch]  # patches\n    role: stock  # role",
    )
    with pytest.raises(
        MatrixError,
        match=r"arms\.fake-stock\.patches\[0\]: no such patch file: \S*/no-such\.patch \(patch ",
    ):
        _parse(text, tmp_path)


def test_cli_reports_a_malformed_matrix_in_one_line_without_traceback(tmp_path, run_cli):
    bad = tmp_path / "matrix.yaml"
    bad.write_text(BASE.replace("kv_lora_rank: 64", "kv_lora_rank: [64]"))
    (tmp_path / "fakemla-tree").mkdir()
    proc = run_cli("plan", "--matrix", bad)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert re.match(
        rf"mlagate: error: {re.escape(str(bad))}:\d+: geometries.tiny.kv_lora_rank: expected a "
        r"positive integer",
        proc.stderr,
    )


def test_sparse_suites_and_deep_configs_are_read():
    m = matrix.load(SHIPPED)
    assert m.suites["pool_equivalence"].sparse and m.suites["trim_after_rejection"].sparse
    assert not m.suites["speculative_transaction"].sparse
    assert m.modules["mlx-vlm/glm5_next"].deep["layer_types"] == (
        "deepseek_sparse_attention",
        "deepseek_sparse_attention",
    )
    with pytest.raises(TypeError):
        m.modules["mlx-vlm/glm5_next"].deep["x"] = 1


def test_a_deep_config_that_is_not_a_mapping_is_named(tmp_path):
    text = BASE.replace(
        "    attention: GoodAttention  # attention class",
        "    attention: GoodAttention  # attention class\n    deep: [1, 2]  # wrong",
    )
    with pytest.raises(
        MatrixError, match=r"modules\.fake/good\.deep: expected a mapping of config keys"
    ):
        _parse(text, tmp_path)


def test_a_suite_sparse_flag_must_be_a_boolean(tmp_path):
    text = BASE.replace(
        "    kind: correctness  # kind",
        "    kind: correctness  # kind\n    sparse: maybe  # wrong",
        1,
    )
    assert text != BASE
    with pytest.raises(MatrixError, match=r"suites\.\w+\.sparse: expected bool"):
        _parse(text, tmp_path)


def test_a_suite_dtype_is_checked_and_sets_its_cases_dtype(tmp_path):
    pinned = "      dtype: float32  # every profile"
    shipped = SHIPPED.read_text()
    assert pinned in shipped
    bad = shipped.replace(pinned, "      dtype: float8  # wrong", 1)
    with pytest.raises(
        MatrixError,
        match=r"suites\.pool_equivalence\.gates\.dtype: expected one of float32, bfloat16, "
        r"float16, got 'float8'",
    ):
        matrix.parse(bad, SHIPPED)
    good = matrix.parse(shipped.replace(pinned, "      dtype: bfloat16  # pinned", 1), SHIPPED)
    from mlagate.plan import Selection, expand

    cases = expand(good, Selection(suites=("pool_equivalence",)), "quick", "cpu", "linux-cpu")
    assert cases and {c.dtype for c in cases} == {"bfloat16"} != {good.profiles["quick"].dtype}


def test_aa_cases_of_a_baseline_suite_have_ids_of_their_own():
    from mlagate.plan import Selection, expand

    m = matrix.load(SHIPPED)
    sel = Selection(suites=("l1_parity", "marginal_cost"), modules=("mlx-lm/deepseek_v3",))
    normal = {(c.suite, c.arm, c.geometry): c for c in expand(m, sel, "quick", "cpu", "linux-cpu")}
    aa = {
        (c.suite, c.arm, c.geometry): c
        for c in expand(m, sel, "quick", "cpu", "linux-cpu", aa=True)
    }
    patched = ("l1_parity", "mlx-lm-0.32.2-patched", "deepseek-v3")
    assert (
        aa[patched].aa
        and aa[patched].id == normal[patched].id + "::aa"
        and aa[patched].replay().endswith(" --aa")
    )
    assert ("l1_parity", "mlx-lm-0.32.2", "deepseek-v3") in aa and (
        "l1_parity",
        "mlx-lm-0.32.2",
        "deepseek-v3",
    ) not in normal, "A/A pairs every arm with itself"
    timing = ("marginal_cost", "mlx-lm-0.32.2-patched", "deepseek-v3")
    assert not aa[timing].aa and aa[timing].id == normal[timing].id, (
        "a suite without a baseline is the same case in A/A mode"
    )


@pytest.mark.parametrize(
    "path", [SHIPPED, *sorted((ROOT / "tests" / "fixtures").glob("*.yaml"))], ids=lambda p: p.name
)
def test_the_validated_matrix_travels_as_json_unchanged(path):
    import json

    m = matrix.load(path)
    assert matrix.from_json(json.loads(json.dumps(matrix.to_json(m)))) == m


@pytest.mark.parametrize(
    ("value", "shown"), [("[1]", "a list"), ("{a: 1}", "a mapping"), ("'x'", "'x'")]
)
def test_a_gate_of_the_wrong_shape_is_named_never_shown_as_an_internal_object(value, shown):
    shipped = SHIPPED.read_text()
    line = "      samples_at_formula: 15"
    assert line in shipped
    bad = shipped.replace(line, f"      samples_at_formula: {value}", 1)
    with pytest.raises(MatrixError) as err:
        matrix.parse(bad, SHIPPED)
    assert str(err.value).endswith(f"got {shown}") and "object at 0x" not in str(err.value)


@pytest.mark.parametrize(
    ("gate", "value", "why"),
    [
        ("leave", "[3]", "row 3 is not a row of rows (3 rows)"),
        ("leave", "[0, 1, 2]", "every row of rows leaves: at least one must stay"),
        ("leave", "[0, 0]", "names a row twice"),
        ("cold_rows", "[2]", "every row of cold_rows leaves: at least one must stay"),
        ("rejected_rows_transaction", "[0, 8]", "8 is not below the widest width 8"),
        ("rejected_rows_transaction", "[1, 2, 3, 4]", "4 counts for 3 rows"),
        ("rejected_rows_extract", "[5, 0, 2]", "3 counts for 2 rows: the last would never be"),
    ],
)
def test_serving_batched_row_indices_and_counts_are_checked_against_rows(gate, value, why):
    """serving_batched's leave and per-row counts meet its rows when the matrix is read: a
    row index past the rows (or every row) leaving, or a count the run would clip or never use,
    is a one-line error naming the gate at fault (exit 2 at the CLI), not ignored at run time."""
    shipped = SHIPPED.read_text()
    at = shipped.index(f"      {gate}: ", shipped.index("  serving_batched:"))
    end = shipped.index("\n", at)
    bad = shipped[:at] + f"      {gate}: {value}" + shipped[end:]
    with pytest.raises(MatrixError) as err:
        matrix.parse(bad, SHIPPED)
    message = str(err.value)
    key = "leave" if gate == "cold_rows" else gate  # a cold batch of one: its row would leave
    assert "\n" not in message and f"suites.serving_batched.gates.{key}: " in message, message
    assert why in message, message
