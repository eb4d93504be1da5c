"""The one JSON document reader: every bad document is a one-line error naming the file and key."""

import json
import os

import pytest

from mlagate import documents

GOOD = {
    "result": {
        "schema": "mlagate.result/3",
        "case_id": "s::m::a::g::float32::cpu",
        "suite": "s",
        "module": "m",
        "arm": "a",
        "verdict": "pass",
        "expected": "pass",
        "control": False,
        "expected_kinds": [],
        "baseline": None,
        "retry": False,
        "failure": None,
        "attempts": [],
        "health": None,
    },
    "manifest": {
        "schema": "mlagate.manifest/1",
        "runner": "r",
        "profile": "p",
        "shard": "1/2",
        "plan": "x",
        "cases": ["s::m::a::g::float32::cpu"],
    },
    "plan": {
        "schema": "mlagate.plan/1",
        "jobs": [{"runner": "r", "shard": "1/1", "case_ids": ["s::m::a::g::float32::cpu"]}],
    },
    "merged": {"schema": "mlagate.merged/1", "commit": "abc", "counts": {"pass": 1}, "results": []},
    "costs": {
        "schema": "mlagate.costs/1",
        "suites": {"probes": {"default": 1.5, "modules": {"m": 2}}},
    },
    "figures": {
        "schema": "mlagate.figures/1",
        "figures_version": [],
        "commit": "abc",
        "counts": {},
        "figures": {"a|b|c|d|e": 1.0},
    },
    "arm-content": {"schema": "mlagate.arm-content/1", "files": {"site/x.py": "0" * 64}},
    "arm": {
        "schema": "mlagate.arm/1",
        "arm": "a",
        "runtime": "r",
        "source": {"kind": "pypi", "spec": "mlx-lm==0.32.2", "ref": None},
        "patches": [{"name": "p.patch", "sha256": "0" * 64}],
        "needs": [],
        "activate_install": [],
        "version": "0.32.2",
        "key": "0123456789abcdef0123",
        "notes": [],
        "created": "2026-12-01T22:50:31Z",
    },
    "merge": {
        "schema": "mlagate.merge/1",
        "sources": ["a"],
        "counts": {"pass": 1},
        "missing": [],
        "missing_shards": [],
        "unplanned": [],
        "exit_code": 0,
    },
    "machine": {"schema": "mlagate.machine/1", "cores": 2, "start": {"load_1m": 0.5}},
    "compare": {
        "schema": "mlagate.compare/1",
        "a": "A",
        "b": "B",
        "worse": 0,
        "verdicts": [],
        "figures": [],
    },
}
BAD = {  # kind -> (a change to the good document, the key the error names)
    "result": ({"verdict": "great"}, "verdict"),
    "manifest": ({"shard": "1/30000000"}, "shard"),
    "plan": ({"jobs": [{"runner": "r", "shard": "1/1", "case_ids": [1]}]}, "jobs.0.case_ids.0"),
    "merged": ({"commit": "javascript:alert(1)"}, "commit"),
    "costs": ({"suites": {"probes": {"default": -1}}}, "suites.probes.default"),
    "figures": ({"counts": {"pass": "<img>"}}, "counts.pass"),
    "arm-content": ({"files": {"x": "not a digest"}}, "files.x"),
    "arm": ({"patches": [{"name": "p", "sha256": "x"}]}, "patches.0.sha256"),
    "merge": ({"missing": [1]}, "missing.0"),
    "machine": ({"start": {"load_1m": "high"}}, "start.load_1m"),
    "compare": ({"worse": -1}, "worse"),
}


@pytest.mark.parametrize("kind", sorted(GOOD))
def test_a_good_document_loads_and_a_bad_one_names_its_key(kind, tmp_path):
    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps(GOOD[kind]))
    assert documents.load(path, kind) == GOOD[kind]
    change, key = BAD[kind]
    path.write_text(json.dumps({**GOOD[kind], **change}))
    with pytest.raises(documents.DocumentError) as err:
        documents.load(path, kind)
    assert str(err.value).startswith(f"{path}: {key}: ") and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "data, why",
    [
        (b"[" * 100_000, "nested too deeply"),
        (b'{"schema": "mlagate.result/1", "n": ' + b"1" * 5000 + b"}", "not valid JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"{", "not valid JSON"),
        (b"[]", "schema is"),
        (b'{"schema": {"deep": 1}}', "schema is not a string"),
    ],
)
def test_bad_bytes_are_one_line(data, why, tmp_path):
    path = tmp_path / "d.json"
    path.write_bytes(data)
    with pytest.raises(documents.DocumentError, match=why) as err:
        documents.load(path, "result")
    assert "\n" not in str(err.value)


def test_only_regular_files_of_bounded_size(tmp_path):
    os.mkfifo(tmp_path / "fifo.json")
    os.symlink(tmp_path / "loop.json", tmp_path / "loop.json")
    (tmp_path / "big.json").write_bytes(b" " * 2000)
    for name, why in (
        ("fifo.json", "not a regular file"),
        ("loop.json", "cannot read"),
        (".", "not a regular file"),
    ):
        with pytest.raises(documents.DocumentError, match=why):
            documents.load(tmp_path / name, "result")
    with pytest.raises(documents.DocumentError, match="larger than 1000 bytes"):
        documents.read_bytes(tmp_path / "big.json", max_bytes=1000)


RESULT = GOOD["result"]


@pytest.mark.parametrize(
    "text, why",
    [
        ('{"duration_s": NaN}', "NaN is not a number"),
        ('{"duration_s": Infinity}', "Infinity is not a number"),
        ('{"duration_s": -Infinity}', "Infinity is not a number"),
        ('{"duration_s": 1e400}', "out of range"),
        ('{"n": ' + "9" * 401 + "}", "integer of 401 digits"),
        ('{"n": -' + "9" * 25 + "}", "integer of 26 digits"),
        ('{"reason": "\\ud800"}', "lone UTF-16 surrogate"),
        ('{"\\udfff": 1}', "lone UTF-16 surrogate"),
    ],
)
def test_numbers_and_strings_json_should_not_hold_are_refused(text, why, tmp_path):
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(documents.DocumentError, match=why) as err:
        documents.load(path, "result")
    assert "\n" not in str(err.value)


def test_a_surrogate_pair_is_text():
    assert documents.parse('{"r": "\\ud83d\\ude00"}', "x") == {"r": "\U0001f600"}


@pytest.mark.parametrize(
    "change, key",
    [
        ({"duration_s": 1e308}, "duration_s"),
        ({"runner": "/etc"}, "runner"),
        ({"runner": "../../x"}, "runner"),
        ({"runner": ""}, "runner"),
        ({"geometry": {"id": ["a"]}}, "geometry.id"),
        ({"case_id": "a\nb"}, "case_id"),
        ({"case_id": ""}, "case_id"),
        ({"case_id": "s::m::a::g::float32"}, "case_id"),
        ({"case_id": "s::m::a::g::float32::cpu::x"}, "case_id"),
        ({"case_id": "s::m::::g::float32::cpu"}, "case_id"),
        ({"reason": "x" * 1_000_001}, "reason"),
        ({"backend": "cpu/../x"}, "backend"),
    ],
)
def test_result_fields_are_bounded(change, key, tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({**RESULT, **change}))
    with pytest.raises(documents.DocumentError) as err:
        documents.load(path, "result")
    assert str(err.value).startswith(f"{path}: {key}: ")


@pytest.mark.parametrize("value", [1.7e308, -1.7e308, 1e16])
def test_history_figures_are_bounded(value, tmp_path):
    path = tmp_path / "f.json"
    path.write_text(json.dumps({**GOOD["figures"], "figures": {"a|b|c|d|e": value}}))
    with pytest.raises(documents.DocumentError, match="figures.a|b|c|d|e"):
        documents.load(path, "figures")


def test_an_arm_manifest_without_a_schema_field_is_upgraded(tmp_path):
    """arm.json as written before it had a schema field (every cache holds some) reads as
    mlagate.arm/1; one with a key no writer wrote is refused, naming it."""
    old = {k: v for k, v in GOOD["arm"].items() if k not in ("schema", "notes", "activate_install")}
    path = tmp_path / "arm.json"
    path.write_text(json.dumps(old))
    assert documents.load(path, "arm") == {**GOOD["arm"], "notes": [], "activate_install": []}
    path.write_text(json.dumps({**old, "extra": 1}))
    with pytest.raises(documents.DocumentError, match="extra"):
        documents.load(path, "arm")
    path.write_text(json.dumps({"version": "tree"}))  # no schema and too few keys: refused
    with pytest.raises(documents.DocumentError, match=f"^{path}: "):
        documents.load(path, "arm")


# Every json.load(s) outside the loader, and why what it reads is no document of mlagate's.
NOT_DOCUMENTS = {
    "documents.py": "the loader itself",
    "gate/outdir.py": "the output folder's lock file (who holds it, for the refusal's text)",
    "harness/events.py": "the case each worker runs now (live, rewritten as it goes)",
    "harness/supervisor.py": "the worker protocol's lines",
    "results.py": "the health record mlagate run passes in the environment",
    "mutate/run.py": "a copy of a dict; the parent verdict cache (rebuilt when unreadable)",
    "worker/activation.py": "the activation spec in the environment",
    "worker/building.py": "a checkpoint's config.json (the model's, not mlagate's)",
    "worker/server.py": "the worker protocol's lines",
}


def json_readers(root):
    """(module path, line) of every json.load / json.loads call under root."""
    import ast

    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            func = getattr(node, "func", None)
            if (
                isinstance(node, ast.Call)
                and isinstance(func, ast.Attribute)
                and func.attr in ("load", "loads")
                and isinstance(func.value, ast.Name)
                and func.value.id == "json"
            ):
                found.append((path.relative_to(root).as_posix(), node.lineno))
    return found


def test_no_document_is_read_past_the_loader(tmp_path):
    from pathlib import Path

    src = Path(documents.__file__).parent
    stray = [f"{m}:{line}" for m, line in json_readers(src) if m not in NOT_DOCUMENTS]
    assert not stray, f"read these through mlagate.documents: {stray}"
    planted = tmp_path / "arms.py"  # as arms.py read arm.json before
    planted.write_text('import json\nm = json.loads(open("arm.json").read())\n')
    assert json_readers(tmp_path) == [("arms.py", 2)]


def test_every_shipped_schema_is_a_valid_json_schema():
    """The loader trusts the shipped schemas (checking them on every load cost plan a third of
    its time); this checks each against its metaschema."""
    from importlib import resources

    import jsonschema

    folder = resources.files("mlagate").joinpath("schemas")
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".json"))
    assert {f"{kind}.json" for kind in documents.KINDS} <= set(names)
    for name in names:
        schema = json.loads(folder.joinpath(name).read_text(encoding="utf-8"))
        jsonschema.validators.validator_for(schema).check_schema(schema)
    with pytest.raises(jsonschema.exceptions.SchemaError):
        jsonschema.Draft202012Validator.check_schema({"type": "no such type"})
