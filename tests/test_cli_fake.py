"""The CLI as a subprocess against the fake runtime: exit codes, one-line errors, results on
disk."""

import json

import pytest

from mlagate.report import merged as merged_doc


def _results(out):
    return {
        r["module"] + "|" + (r["checkpoint"] or r["geometry"]["id"]): r
        for r in map(lambda p: json.loads(p.read_text()), (out / "results").glob("*.json"))
    }


def test_run_records_pass_fail_invalid_and_argued(fake_matrix, fake_cache, tmp_path, run_cli):
    out = tmp_path / "out"
    proc = run_cli("run", "--matrix", fake_matrix, "--out", out, cache=fake_cache)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = _results(out)
    assert rows["fake/good|tiny"]["verdict"] == "pass"
    assert rows["fake/liar|tiny"]["verdict"] == "fail"
    assert "forced absorbed at L=2 T=16: the counters saw split" in rows["fake/liar|tiny"]["reason"]
    assert rows["fake/opaque|tiny"]["verdict"] == "invalid"
    assert rows["fake/opaque|tiny"]["reason"].startswith("Invalid: unforceable")
    argued = rows["fake/good|tiny-real"]
    assert (
        argued["verdict"] == "argued"
        and argued["evidence"] == "argued"
        and argued["counters"] == []
    )
    good = rows["fake/good|tiny"]
    assert good["evidence"] == "synthetic" and good["fingerprint"]["arm"] == "fake-stock"
    assert good["metrics"]["forced"] == {"absorbed": "absorbed", "materialised": "materialised"}
    assert {o["path"] for o in good["counters"]} == {"absorbed", "materialised"}
    assert (
        rows["fake/split|tiny"]["verdict"] == "fail"
        and "no single path (split" in rows["fake/split|tiny"]["reason"]
    )
    assert {rows[f"fake/{m}|tiny"]["verdict"] for m in ("fixed", "offbyone", "skewed")} == {"pass"}
    assert "4 passed, 2 failed, 1 invalid, 1 argued-not-measured" in proc.stdout
    assert (
        "replay probes::fake/liar::fake-stock::tiny::float32::cpu: mlagate run --suite probes "
        "--module fake/liar --arm fake-stock --profile quick --out "
        "reports/replay/probes__fake_liar__fake-stock__tiny__float32__cpu-" in proc.stdout
    )
    assert f" --matrix {fake_matrix}\n" in proc.stdout


def test_only_invalid_cases_left_exits_3(fake_matrix, fake_cache, tmp_path, run_cli):
    proc = run_cli(
        "run",
        "--matrix",
        fake_matrix,
        "--module",
        "fake/opaque",
        "--out",
        tmp_path / "o",
        cache=fake_cache,
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr


def test_all_gates_pass_exits_0(fake_matrix, fake_cache, tmp_path, run_cli):
    proc = run_cli(
        "run",
        "--matrix",
        fake_matrix,
        "--module",
        "fake/good",
        "--out",
        tmp_path / "o",
        cache=fake_cache,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_unknown_names_on_the_command_line_are_one_line_errors(fake_matrix, fake_cache, run_cli):
    for flag, name, word in (
        ("--module", "fake/nope", "module"),
        ("--arm", "nope", "arm"),
        ("--suite", "nope", "suite"),
    ):
        proc = run_cli("plan", "--matrix", fake_matrix, flag, name, cache=fake_cache)
        assert proc.returncode == 2
        assert (
            proc.stderr.startswith(f"mlagate: error: unknown {word} {name!r}")
            and proc.stderr.count("\n") == 1
        )


def test_a_cpu_that_cannot_be_pinned_is_a_one_line_error(
    fake_matrix, fake_cache, tmp_path, run_cli
):
    out = tmp_path / "out"
    (out / "results").mkdir(parents=True)
    (out / "results" / "earlier.json").write_text("{}")
    proc = run_cli("run", "--matrix", fake_matrix, "--cpu", "4096", "--out", out, cache=fake_cache)
    assert proc.returncode == 2
    assert (
        proc.stderr.startswith("mlagate: error: --cpu 4096: not a CPU this process may run on")
        and proc.stderr.count("\n") == 1
    )
    assert (out / "results" / "earlier.json").exists(), "nothing already measured is moved or lost"


def test_an_import_path_missing_from_its_arm_is_named(fake_matrix, fake_cache, run_cli):
    fake_matrix.write_text(
        fake_matrix.read_text().replace(
            "import: fakemla.models.liar", "import: fakemla.models.lair"
        )
    )
    proc = run_cli("plan", "--matrix", fake_matrix, cache=fake_cache)
    assert proc.returncode == 2
    assert (
        proc.stderr
        == f"mlagate: error: {fake_matrix}: modules.fake/liar.import: fakemla.models.lair does "
        "not exist in arm fake-stock (tree)\n"
    )


def test_an_unregistered_module_fails_the_plan_naming_it(fake_matrix, fake_cache, run_cli):
    text = fake_matrix.read_text()
    start, end = text.index("  fake/opaque:"), text.index("checkpoints:")
    fake_matrix.write_text(text[:start] + text[end:])
    proc = run_cli("plan", "--matrix", fake_matrix, cache=fake_cache)
    assert proc.returncode == 2  # bad input, as from run (it was 1 from plan, 2 from run)
    assert "fakemla.models.opaque:OpaqueAttention" in proc.stderr
    proc = run_cli(
        "run", "--matrix", fake_matrix, "--out", fake_matrix.parent / "o", cache=fake_cache
    )
    assert proc.returncode == 2 and "fakemla.models.opaque:OpaqueAttention" in proc.stderr


def test_an_earlier_runs_results_are_set_aside_not_counted(
    fake_matrix, fake_cache, tmp_path, run_cli
):
    out = tmp_path / "out"
    (out / "results").mkdir(parents=True)
    planted = {
        "schema": "mlagate.result/1",
        "case_id": "probes::fake/offbyone::fake-stock::tiny::float32::cpu",
        "verdict": "pass",
    }
    (out / "results" / "stale.json").write_text(json.dumps(planted))
    proc = run_cli(
        "run",
        "--matrix",
        fake_matrix,
        "--suite",
        "probes",
        "--module",
        "fake/fixed",
        "--out",
        out,
        cache=fake_cache,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "earlier results in" in proc.stderr
    assert not (out / "results" / "stale.json").exists()
    assert list((out / "previous").glob("*/stale.json")), "set aside, not deleted"
    assert {json.loads(p.read_text())["module"] for p in (out / "results").glob("*.json")} == {
        "fake/fixed"
    }
    (out / "results").rename(out / "results-now")
    with pytest.raises(merged_doc.ReportError, match="holds no result JSON"):
        merged_doc.load_source(out)  # what was set aside is never read back as a result
