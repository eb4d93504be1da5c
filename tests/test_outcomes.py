"""Outcomes you can trust: a fail's kind against its expectation (changed failure), every
attempt kept (flaky), an unfit machine's timings (invalid unless overridden), result/1 read
through its upgrade, and one exit-code table for every verb."""

import importlib
import json
import re
import tarfile
import types
import zlib
from pathlib import Path

import pytest

from mlagate import cli, documents, results, upgrade
from mlagate.harness import Failed, check, policy
from mlagate.harness.case import CaseRun
from mlagate.matrix import MatrixError, load
from mlagate.report import junit, summary
from mlagate.report import merged as merged_doc
from mlagate.verdict import outcomes

from .conftest import FIXTURES

REFERENCE = Path(__file__).parents[1] / "docs" / "reference" / "cpu"


def _row(verdict, expected="pass", control=False, kinds=(), failure=None, **extra):
    return {
        "schema": "mlagate.result/2",
        "case_id": f"dispatch::m::stock::g{zlib.crc32(f'{verdict}{failure}{extra}'.encode())}"
        "::float32::cpu",
        "suite": "dispatch",
        "module": "m",
        "arm": "stock",
        "verdict": verdict,
        "expected": expected,
        "control": control,
        "expected_kinds": list(kinds),
        "retry": False,
        "failure": (
            {"kind": failure[0], "kinds": list(failure), "details": {}} if failure else None
        ),
        "attempts": [],
        "health": None,
        "reason": "r",
        "started": "2026-12-01T00:00:00Z",
        **extra,
    }


def test_a_control_failing_with_another_kind_is_a_changed_failure_and_red():
    right = _row("fail", "fail", True, ["wrong_path"], ["wrong_path"])
    other = _row("fail", "fail", True, ["wrong_path"], ["runtime_raised"])
    mixed = _row("fail", "fail", True, ["wrong_path"], ["wrong_path", "guards_disagree"])
    assert outcomes.outcome(right) == "as expected"
    assert outcomes.outcome(other) == outcomes.outcome(mixed) == "changed failure"
    assert outcomes.exit_code(outcomes.counts([right])) == 0
    assert outcomes.exit_code(outcomes.counts([right, other])) == 1
    line = outcomes.controls_line([right, other, mixed])
    assert "1 of 3 control cases confirmed failing by their failure kind" in line
    assert "2 changed failure" in line and "every stock control" not in line
    assert outcomes.controls_line([right]).endswith("every stock control fails as it must")
    # a known finding without a kind takes any kind; one naming a kind takes only that one
    assert outcomes.outcome(_row("fail", "fail", failure=["runtime_raised"])) == "as expected"
    named = _row("fail", "fail", kinds=["boundary_off"], failure=["runtime_raised"])
    assert outcomes.outcome(named) == "changed failure"


def test_the_policy_gives_every_fail_a_kind():
    with pytest.raises(Failed) as err:
        check([("wrong_path", "a"), ("guards_disagree", "b"), ("wrong_path", "c")], shown=1)
    end = policy.ending(err.value)
    assert end.verdict == "fail" and end.reason == "a (+2 more)"
    assert end.failure["kind"] == "wrong_path"
    assert end.failure["kinds"] == ["wrong_path", "guards_disagree"]
    assert end.failure["details"]["per_kind"] == {"wrong_path": 2, "guards_disagree": 1}
    assert policy.ending(AssertionError("bare")).failure["kinds"] == ["unclassified"]
    assert policy.ending(None).failure is None


def test_a_case_that_failed_then_passed_is_flaky_and_red_unless_its_suite_may_retry():
    first = _row("fail", failure=["wrong_path"], run_id="r1")
    then = dict(
        _row("pass", run_id="r2"), case_id=first["case_id"], attempts=[results.attempt(first)]
    )
    assert outcomes.outcome(then) == "flaky"
    assert outcomes.exit_code(outcomes.counts([then])) == 1
    allowed = dict(then, retry=True)
    assert outcomes.outcome(allowed) == "flaky" and not outcomes.red(allowed)
    assert outcomes.exit_code(outcomes.counts([allowed])) == 0
    # an invalid attempt measured nothing: invalid then pass is no flake
    was_invalid = dict(then, attempts=[results.attempt(_row("invalid"))])
    assert outcomes.outcome(was_invalid) == "as expected"
    xml = junit.render([then])
    assert (
        "<flakyFailure" in xml and 'type="flaky"' in xml and "attempts: fail (r1), pass (r2)" in xml
    )
    md = summary.render({"commit": "c", "counts": {"pass": 1}, "results": [then]})
    assert "| flaky | pass |" in md and "[attempts: fail (r1), pass (r2)]" in md


def test_two_sources_of_one_case_keep_both_attempts(tmp_path):
    first = _row("fail", failure=["wrong_path"], run_id="r1", started="2026-12-01T00:00:00Z")
    then = dict(first, verdict="pass", failure=None, run_id="r2", started="2026-12-01T01:00:00Z")
    doc = merged_doc.merge([("a", [first]), ("b", [then])], "c")
    (row,) = doc["results"]
    assert row["run_id"] == "r2" and [a["run_id"] for a in row["attempts"]] == ["r1"]
    assert outcomes.outcome(row) == "flaky" and doc["outcomes"]["flaky"] == 1


def test_a_retry_setting_is_validated(fake_matrix):
    text = fake_matrix.read_text()
    path = fake_matrix
    path.write_text(
        text.replace(
            "    kind: correctness  # kind\n", "    kind: correctness\n    retry: true\n", 1
        )
    )
    assert load(path).suites["probes"].retry
    path.write_text(
        text.replace(
            "    kind: correctness  # kind\n", "    kind: correctness\n    retry: often\n", 1
        )
    )
    with pytest.raises(MatrixError, match="suites.probes.retry"):
        load(path)


def _with_expectation(path: Path, entry: str) -> Path:
    text = (FIXTURES / "fake-matrix.yaml").read_text()
    path.write_text(text + "expectations:\n" + entry)
    return path


def test_a_known_fail_names_its_failure_kinds(fake_matrix):
    entry = (
        "  - {suite: probes, module: fake/split, arm: fake-stock, verdict: fail, "
        "reason: planted, kind: %s}\n"
    )
    (e,) = load(_with_expectation(fake_matrix, entry % "guards_disagree")).expectations
    assert e.kinds == ("guards_disagree",)
    (e,) = load(
        _with_expectation(fake_matrix, entry % "[guards_disagree, wrong_path]")
    ).expectations
    assert e.kinds == ("guards_disagree", "wrong_path")
    with pytest.raises(MatrixError, match=r"expectations\[0\]\.kind.*one of wrong_path"):
        load(_with_expectation(fake_matrix, entry % "boundary_off"))
    with pytest.raises(MatrixError, match=r"expectations\[0\]\.kind\[1\].*one of wrong_path"):
        load(_with_expectation(fake_matrix, entry % "[wrong_path, boundary_off]"))
    with pytest.raises(MatrixError, match=r"expectations\[0\]\.kind: a known fail names"):
        load(_with_expectation(fake_matrix, entry.replace(", kind: %s", "")))
    with pytest.raises(MatrixError, match="a failure kind goes with verdict fail"):
        load(
            _with_expectation(
                fake_matrix, entry.replace("verdict: fail", "verdict: pass") % "wrong_path"
            )
        )


def _case_run(tmp_path, record):
    """A CaseRun of a performance case whose finish reads the health record of this process."""
    matrix = load(FIXTURES / "fake-perf.yaml")
    run = CaseRun.__new__(CaseRun)
    run.ctx = types.SimpleNamespace(matrix=matrix, out=tmp_path)
    run.case = types.SimpleNamespace(suite="marginal_cost", file_stem="case")
    case = {
        "id": "marginal_cost::m::a::g::float32::cpu",
        "suite": "marginal_cost",
        "module": "m",
        "arm": "a",
        "geometry": "g",
        "dtype": "float32",
        "backend": "cpu",
        "profile": "quick",
        "runner": "r",
        "expected": "fail",
        "control": True,
        "expected_kinds": ["too_slow"],
    }
    run.result = results.Result(case=case)
    run._t0 = 0.0
    return run


@pytest.mark.parametrize("override", [False, True])
def test_a_timing_from_an_unfit_machine_is_invalid_without_an_override(
    tmp_path, monkeypatch, override
):
    record = {
        "fit": False,
        "failed": [{"name": "load", "detail": "5.4 on 2 CPUs"}],
        "override": override,
    }
    monkeypatch.setenv(results.HEALTH_ENV, json.dumps(record))
    failure = {"kind": "too_slow", "kinds": ["too_slow"], "details": {}}
    row = results.read(_case_run(tmp_path, record).finish("fail", "slow", failure=failure))
    assert row["health"]["fit"] is False and row["health"]["override"] is override
    if override:
        assert row["verdict"] == "fail" and outcomes.outcome(row) == "as expected"
        assert "overridden: load: 5.4 on 2 CPUs" in row["reason"]
    else:
        assert row["verdict"] == "invalid" and row["failure"] is None
        assert row["health"]["measured_verdict"] == "fail"
        assert row["reason"].startswith("the machine was unfit for timings (load: 5.4 on 2 CPUs)")
    line = results.unfit_line([row])
    assert line == (
        f"machine unfit for timings: 1 performance results, {0 if override else 1} made invalid, "
        f"{1 if override else 0} kept by an explicit override (--allow-unfit)"
    )
    monkeypatch.setenv(results.HEALTH_ENV, json.dumps({**record, "fit": True, "failed": []}))
    fit = results.read(_case_run(tmp_path / "b", record).finish("fail", "slow", failure=failure))
    assert fit["verdict"] == "fail" and fit["health"]["fit"] is True


def _old_outcome(row: dict) -> str:
    """The outcome rule of result/1 (main at 8dd4a35), kept here to compare case by case."""
    verdict, expected = row["verdict"], row.get("expected")
    if verdict == "invalid":
        return "invalid"
    if expected is None:
        return "regression" if verdict == "fail" else "as expected"
    if verdict == expected:
        return "as expected"
    if expected == "pass" and verdict == "fail":
        return "regression"
    if expected == "fail" and verdict == "pass":
        return "lost control" if row.get("control") else "fixed"
    return "regression"


# every committed reference archive (the CPU results, and the H200 ones written the same way)
ARCHIVES = sorted(
    p.relative_to(REFERENCE.parent).as_posix() for p in REFERENCE.parent.rglob("*.tgz")
)


OLDER = ("mlagate.result/1", "mlagate.result/2")  # what older committed archives hold
CURRENT = "mlagate.result/3"  # and newer ones (read as written)


def _verdict_changes(archive) -> list[str]:
    """Each reference case whose verdict or outcome differs once read through the upgrade, by
    case id (with a count check: no case lost or added; an A/A case run twice is two)."""
    raw = {}
    with tarfile.open(archive) as tar:
        for m in tar.getmembers():
            if m.isfile() and m.name.endswith(".json") and "/results/" in f"/{m.name}":
                doc = json.loads(tar.extractfile(m).read())
                raw[doc["case_id"], doc.get("runner"), doc.get("started")] = doc
    rows = merged_doc.load_source(archive)
    assert len(rows) == len(raw) > 0
    changed = []
    for row in rows:
        old = raw[row["case_id"], row.get("runner"), row.get("started")]
        assert old["schema"] in (*OLDER, CURRENT) and row["schema"] == CURRENT
        assert row.get("upgraded_from") == (old["schema"] if old["schema"] in OLDER else None)
        if old["schema"] == CURRENT:
            continue  # judged by today's rules when it was written
        if (row["verdict"], outcomes.outcome(row)) != (old["verdict"], _old_outcome(old)):
            changed.append(row["case_id"])
    older = sum(r["schema"] in OLDER for r in raw.values())
    if older:
        line = results.upgraded_line(rows)
        assert sum(int(n) for n in re.findall(r"(\d+) results written as", line)) == older
    return changed


@pytest.mark.parametrize("name", ARCHIVES)
def test_the_reference_results_upgrade_without_a_verdict_change(name):
    assert _verdict_changes(REFERENCE.parent / name) == []


def test_the_reference_comparison_sees_an_upgrade_that_changes_a_verdict(monkeypatch):
    """A planted upgrade step that turns one fail into a pass is caught, case by case."""
    good = upgrade.STEPS["result"]["mlagate.result/1"]
    flipped = []

    def bad(doc):
        if doc["verdict"] == "fail" and not flipped:
            flipped.append(doc["case_id"])
            doc = dict(doc, verdict="pass")
        return good[1](doc)

    monkeypatch.setitem(upgrade.STEPS["result"], "mlagate.result/1", (good[0], bad))
    assert _verdict_changes(REFERENCE / "results.tgz") == flipped != []


def test_a_result_1_folder_is_upgraded_and_reported(tmp_path, capsys):
    folder = tmp_path / "run" / "results"
    folder.mkdir(parents=True)
    base = {"schema": "mlagate.result/1", "suite": "dispatch", "module": "m", "arm": "a"}
    for i, (verdict, expected, control) in enumerate(
        [("fail", "fail", True), ("pass", "pass", False), ("fail", None, False)]
    ):
        doc = dict(
            base,
            case_id=f"dispatch::m::a::g{i}::float32::cpu",
            verdict=verdict,
            expected=expected,
            control=control,
        )
        (folder / f"c{i}.json").write_text(json.dumps(doc))
    row = documents.load(folder / "c0.json", "result")
    assert row["failure"]["kind"] == upgrade.UNRECORDED and row["expected_kinds"] == []
    assert [outcomes.outcome(results.read(folder / f"c{i}.json")) for i in range(3)] == [
        "as expected",
        "as expected",
        "regression",
    ]
    out = tmp_path / "html"
    assert cli.main(["report", str(tmp_path / "run"), "--out", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert "upgraded: 3 results written as mlagate.result/1, read as mlagate.result/3" in page
    assert "upgraded: 3 results" in (out / "summary.md").read_text()
    # a result/1 document that is bad under its own schema is named by its key
    (folder / "c1.json").write_text(json.dumps(dict(base, case_id="c1", verdict="great")))
    with pytest.raises(documents.DocumentError, match="c1.json: verdict: "):
        documents.load(folder / "c1.json", "result")
    # and one whose case id is no case id, by that key
    (folder / "c1.json").write_text(json.dumps(dict(base, case_id="dispatch::m", verdict="pass")))
    with pytest.raises(documents.DocumentError, match="c1.json: case_id: case id 'dispatch::m'"):
        documents.load(folder / "c1.json", "result")


# --- one exit-code table ---------------------------------------------------------------------


@pytest.mark.parametrize("verb", sorted(cli.VERBS))
def test_every_verb_maps_interrupt_bad_input_and_refusal_to_one_table(verb, monkeypatch, capsys):
    from mlagate.commands import runopts
    from mlagate.errors import UsageError

    args = {
        "plan": [],
        "arms": [],
        "scan": [],
        "run": [],
        "merge": ["x", "--out", "y"],
        "compare": ["a", "b"],
        "costs": ["x"],
        "health": [],
        "report": ["x"],
        "mutate": ["--arm", "a"],
        "discover": ["x"],
        "calibrate": ["x", "--runner", "r"],
        "store": ["stats", "x"],
        "repro": ["a::b::c::d::e::f", "--out", "o"],
        "bisect": ["--head", "x", "--good", "a", "--bad", "b"],
    }[verb]
    module = importlib.import_module(cli.VERBS[verb])
    for raised, code in (
        (KeyboardInterrupt(), 130),
        (UsageError("--x: bad"), 2),
        (runopts.Refused("unfit"), 3),
    ):

        def boom(_args, raised=raised):
            raise raised

        monkeypatch.setattr(module, "main", boom)
        assert cli.main([verb, *args]) == code, (verb, raised)
    err = capsys.readouterr().err
    assert "mlagate: interrupted; results written so far are kept" in err
    with pytest.raises(SystemExit) as usage:
        cli.main([verb, "--no-such-option"])
    assert usage.value.code == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--matrix", "{nowhere}/m.yaml"],
        ["run", "--matrix", "{nowhere}/m.yaml", "--out", "{tmp}/o"],
        ["arms", "--matrix", "{nowhere}/m.yaml"],
        ["scan", "--root", "{nowhere}"],
        ["merge", "{nowhere}", "--out", "{tmp}/m"],
        ["compare", "{nowhere}/a", "{nowhere}/b"],
        ["costs", "{nowhere}", "--out", "{tmp}/c.json"],
        ["health", "--min-free-gb", "lots"],
        ["report", "{nowhere}", "--out", "{tmp}/r"],
        ["mutate", "--matrix", "{nowhere}/m.yaml", "--arm", "a"],
        ["discover", "{nowhere}"],
        ["calibrate", "{nowhere}", "--runner", "linux-cpu", "--out", "{tmp}/c"],
    ],
)
def test_every_verb_exits_2_on_bad_input_in_one_line(argv, tmp_path, capsys):
    argv = [a.format(nowhere=tmp_path / "nowhere", tmp=tmp_path) for a in argv]
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse: a usage error
        code = exc.code
    assert code == 2, argv
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 or err.startswith("usage:"), err
    assert "Traceback" not in err


FLAKY = '''"""Planted flake: in the first worker to import it (the marker file absent) the output
unfold reads L <= 2 while the query fold reads L == 1 (at L = 2 the runtime raises); in every later
one both read L == 1 (as good.py)."""

import os

from .base import AttentionBase, ModelArgs, make_model  # noqa: F401

_marker = os.environ.get("MLAGATE_FLAKY_MARKER", "")
WIDEST = 2 if _marker and not os.path.exists(_marker) else 1
if WIDEST == 2:
    open(_marker, "w").close()


class FlakyAttention(AttentionBase):
    def __call__(self, x, mask=None, cache=None):
        L = x.shape[1]
        q, lat, mask = self.project(x, cache)
        if L == 1:
            q = self.embed_q(q)
            k = v = lat
        else:
            k = self.embed_q(lat, transpose=False)
            v = self.unembed_out(lat)
        out = self.attend(q, k, v, mask)
        if L <= WIDEST:
            out = self.unembed_out(out)
        return self.finish(out)


Model = make_model(FlakyAttention)
'''


def test_a_planted_flaky_case_is_flaky_in_the_table_report_junit_and_history(
    fake_matrix, fake_cache, tmp_path, run_cli, monkeypatch
):
    tree = fake_matrix.parent / "fakemla-tree" / "fakemla" / "models"
    (tree / "flaky.py").write_text(FLAKY)
    text = fake_matrix.read_text()
    at = text.index("  fake/split:")
    fake_matrix.write_text(
        text[:at]
        + "  fake/flaky:\n    runtime: fakemla\n    import: fakemla.models.flaky\n"
        + "    attention: FlakyAttention\n    model: Model\n    args: ModelArgs\n"
        + "    geometries: [tiny]\n"
        + text[at:]
    )
    monkeypatch.setenv("MLAGATE_FLAKY_MARKER", str(tmp_path / "flaked"))
    out = tmp_path / "out"
    first = run_cli(
        "run", "--matrix", fake_matrix, "--module", "fake/flaky", "--out", out, cache=fake_cache
    )
    assert first.returncode == 1 and "regression" in first.stdout, first.stdout + first.stderr
    again = run_cli("run", "--matrix", fake_matrix, "--resume", out, "--failed", cache=fake_cache)
    assert again.returncode == 1, again.stdout + again.stderr
    (row,) = results.load_dir(out / "results")
    assert row["verdict"] == "pass" and outcomes.outcome(row) == "flaky"
    (earlier,) = row["attempts"]
    assert earlier["verdict"] == "fail" and earlier["failure"]["kind"] == "runtime_raised"
    assert earlier["run_id"] and earlier["run_id"] != row["run_id"]
    assert "flaky           pass" in again.stdout and "[attempts: fail" in again.stdout
    assert "gate: red: 0 as expected, 1 flaky" in again.stdout
    html, hist = tmp_path / "html", tmp_path / "hist"
    assert (
        cli.main(["report", str(out), "--out", str(html), "--history", str(hist), "--commit", "c1"])
        == 0
    )
    assert "<flakyFailure" in (html / "junit.xml").read_text()
    assert "| flaky | pass |" in (html / "summary.md").read_text()
    assert "flaky: " in (html / "index.html").read_text()
    index = (hist / "index.html").read_text()
    assert "<th>flaky</th>" in index and "<td>1</td>" in index


def test_merge_machine_and_compare_documents_go_through_the_one_loader(tmp_path, capsys):
    run = tmp_path / "run" / "results"
    run.mkdir(parents=True)
    (run / "c.json").write_text(json.dumps(_row("pass")))
    (tmp_path / "run" / "merge.json").write_text(json.dumps({"schema": "mlagate.merge/1"}))
    with pytest.raises(merged_doc.ReportError, match="merge.json: <root>: missing key 'missing'"):
        merged_doc.merge_gaps([tmp_path / "run"])
    (tmp_path / "run" / "merge.json").unlink()
    (tmp_path / "run" / "machine.json").write_text(
        json.dumps({"schema": "mlagate.machine/1", "cores": "many"})
    )
    assert cli.main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "html")]) == 0
    assert "machine.json: cores: 'many' is not of type" in capsys.readouterr().err
    from mlagate.report import compare

    doc = compare.compare([_row("pass")], [_row("fail")]).to_json()
    assert documents.validate(dict(doc, a="A", b="B"), "compare", "compare")["worse"] > 0
    with pytest.raises(documents.DocumentError, match="compare: worse: "):
        documents.validate(dict(doc, a="A", b="B", worse=-1), "compare", "compare")


def _processes_with(env_item: bytes) -> list[int]:
    from pathlib import Path

    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and env_item in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_ctrl_c_on_a_run_exits_130(fake_matrix, fake_cache, tmp_path):
    """SIGINT while a case is in flight. The module imports for ten minutes in its worker, so
    the run cannot end before the signal (a short run once finished first and took the
    signal in the interpreter's shutdown)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    module = fake_matrix.parent / "fakemla-tree" / "fakemla" / "models" / "fixed.py"
    module.write_text(module.read_text() + "\nimport time as _t\n_t.sleep(600)\n")
    env = {**os.environ, "MLAGATE_CACHE": str(fake_cache)}
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlagate", "run", "--matrix", str(fake_matrix), "--out", str(out)]
        + ["--suite", "probes", "--module", "fake/fixed"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # a shell without job control starts its background commands with SIGINT ignored, and
        # a Python started so keeps ignoring it: give the run the default, as a terminal would
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while not (out / "plan.json").exists() and time.monotonic() < deadline:
        time.sleep(0.02)  # the run has planned and is starting its workers
    time.sleep(1)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert b"mlagate: interrupted; results written so far are kept" in err
    assert b"Traceback" not in err
    if sys.platform.startswith("linux"):  # the arm worker, stuck in its import, dies with the run
        tag = f"MLAGATE_PARENT_PID={proc.pid}".encode()
        deadline = time.monotonic() + 10
        while (left := _processes_with(tag)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, f"processes of the interrupted run still alive: {left}"
