"""Suites are contracts held as data: a document that names a suite file (a history commit's
merged.json, a run folder's plan.json) never makes mlagate import or run it; `compare` and the
report read the contract beside it; `mlagate plan` imports nothing of pytest, the worker or
the harness."""

import json
import subprocess
import sys

from mlagate.report import build as report_build

from .test_compare import _row
from .test_report import write_results

CONTRACT = """\
schema: mlagate.suite/1
kind: correctness
failure_kinds: [wrong_path]
gates: {}
metrics:
  version: 1
  schema: {type: object, required: [toy_paths], properties: {toy_paths: {type: array}}}
key_figures:
  - {id: toy_absorbed, label: absorbed toy steps, unit: steps,
     value: "length(toy_paths[?@ == 'absorbed'])"}
"""


def _planted(tmp_path):
    """A suite file that writes a marker when it is imported or run, with its contract."""
    marker = tmp_path / "MARKER"
    body = tmp_path / "planted" / "test_toy.py"
    body.parent.mkdir()
    body.write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n")
    (body.parent / "toy.suite.yaml").write_text(CONTRACT)
    return body, marker


def _toy(paths):
    row = dict(_row("pass", "pass", case="toy::m::stock::g::float32::cpu"), suite="toy")
    return dict(row, schema="mlagate.result/1", metrics={"toy_paths": paths} if paths else {})


def test_a_history_naming_a_suite_file_compares_it_and_never_runs_it(tmp_path, run_cli):
    body, marker = _planted(tmp_path)
    hist = tmp_path / "history"
    for commit, paths in (("c1", ["absorbed", "absorbed"]), ("c2", None)):
        src = write_results(tmp_path / commit, [_toy(paths)])
        report_build.build([src], tmp_path / f"html-{commit}", history=hist, commit=commit)
        merged = hist / commit / "merged.json"
        doc = json.loads(merged.read_text())
        doc["suites"] = {"toy": {"kind": "correctness", "file": str(body)}}
        merged.write_text(json.dumps(doc))
    proc = run_cli("compare", "c1", "c2", "--history", hist)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "worse    m|toy_absorbed|stock|g|cpu: 2 -> absent" in proc.stdout, proc.stdout
    page = run_cli("report", "--history", hist, tmp_path / "c2", "--out", tmp_path / "html")
    assert page.returncode == 0, page.stderr
    assert not marker.exists()


def test_a_run_plan_naming_a_suite_file_never_runs_it(fake_matrix, fake_cache, tmp_path, run_cli):
    body, marker = _planted(tmp_path)
    out = tmp_path / "out"
    sel = ("--matrix", fake_matrix, "--module", "fake/good", "--suite", "probes")
    assert run_cli("run", *sel, "--out", out, cache=fake_cache).returncode == 0
    plan = json.loads((out / "plan.json").read_text())
    plan["matrix"]["suites"]["probes"]["path"] = str(body)
    (out / "plan.json").write_text(json.dumps(plan))
    proc = run_cli("report", out, "--out", tmp_path / "html")
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists()


def test_plan_imports_neither_pytest_the_worker_nor_the_harness():
    probe = (
        "import sys, io, contextlib\n"
        "from mlagate import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    rc = cli.main(['plan'])\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pytest', '_pytest')\n"
        "       or m.startswith(('mlagate.worker', 'mlagate.harness'))]\n"
        "print(rc, len(sys.modules), sorted(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    rc, count, bad = out.stdout.split(" ", 2)
    assert rc == "0" and bad.strip() == "[]", out.stdout + out.stderr
    assert int(count) < 300, f"{count} modules imported by mlagate plan"


def test_the_page_tells_an_expected_failure_from_a_regression(tmp_path):
    import re

    control = dict(_row("fail", "fail", True, case="probes::m::stock::g::float32::cpu"))
    regression = dict(
        _row("fail", "pass", case="probes::m::z-patched::g::float32::cpu"), arm="z-patched"
    )
    rows = [dict(r, schema="mlagate.result/1", reason="r") for r in (control, regression)]
    src = write_results(tmp_path / "run", rows)
    report_build.build([src], tmp_path / "html", commit="abc")
    html = (tmp_path / "html" / "index.html").read_text()
    chips = dict(re.findall(r'aria-label="([^"]+)" data-verdict="fail" data-look="([^"]+)"', html))
    assert chips == {"expected fail": "expected", "regression": "regression"}, chips
    assert "\u2298</a>" in html  # the expected failure's own symbol, not the regression's cross
    looks = re.findall(r'<tr class="problem fail" id="[^"]+" data-look="([^"]+)"', html)
    assert looks == ["regression", "expected"], "the failing-cases table leads with red outcomes"


def test_a_broken_contract_is_a_one_line_error_naming_it(tmp_path, run_cli):
    import shutil

    from .conftest import FAKE_MATRIX, FIXTURES

    shutil.copytree(FIXTURES / "fakemla-tree", tmp_path / "fakemla-tree")
    (tmp_path / "test_toy.py").write_text("def test_toy(mla):\n    pass\n")
    head = "\nsuites:  # suites\n"
    toy = head + "  toy:\n    kind: correctness\n    file: test_toy.py\n    gates: {widths: [1]}\n"
    (tmp_path / "m.yaml").write_text(FAKE_MATRIX.read_text().replace(head, toy, 1))
    cases = {
        "": "no contract toy.suite.yaml beside it",
        CONTRACT.replace("gates: {}", "gates: {widths: {type: lst}}"): "gates.widths.type",
        CONTRACT.replace("kind: correctness", "kind: performance"): "its contract says",
        CONTRACT.replace("length(", "length(("): "key_figures.0.value: not a JMESPath",
        CONTRACT.replace(
            "gates: {}",
            "gates: {seed: {type: int}}\nplan_check:\n"
            "  - {rule: aligned_and_misaligned, past_topk: seed}",
        ): "list gates",
        CONTRACT.replace(
            "gates: {}",
            "gates: {seed: {type: int}}\ngate_check:\n  - {rule: batch_rows, rows: seed, "
            "widths: seed, leave: seed, cold_rows: seed, counts: [seed, nope], kept_counts: []}",
        ): "gate_check.0.counts: 'nope' is not a gate",
    }
    for text, said in cases.items():
        contract = tmp_path / "toy.suite.yaml"
        contract.unlink(missing_ok=True)
        if text:
            contract.write_text(
                text.replace("gates: {}", "gates: {widths: {type: list, of: {type: int}}}")
            )
        proc = run_cli("plan", "--matrix", tmp_path / "m.yaml", "--suite", "toy")
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert said in proc.stderr, proc.stderr


def test_every_reference_result_meets_its_suite_metrics_schema(tmp_path):
    import tarfile
    from pathlib import Path

    from mlagate.report.catalogue import Catalogue

    root = Path(__file__).resolve().parents[1] / "docs" / "reference"
    cat = Catalogue.shipped()
    seen = 0
    for tgz in sorted(root.glob("*/*.tgz")):
        with tarfile.open(tgz) as tar:
            for m in tar.getmembers():
                if m.isfile() and m.name.endswith(".json") and "/results/" in f"/{m.name}":
                    row = json.load(tar.extractfile(m))
                    d = cat.entries[row["suite"]].contract
                    assert d.typed(row), f"{tgz.name}:{m.name}: metrics do not meet its contract"
                    seen += 1
    assert seen > 300


def test_an_arm_scan_is_kept_keyed_by_the_arm_content_and_rebuilt_when_it_does_not_read(
    fake_matrix, fake_cache, run_cli
):
    first = run_cli("plan", "--matrix", fake_matrix, "--format", "json", cache=fake_cache)
    assert first.returncode == 0, first.stderr
    kept = sorted(fake_cache.glob("scans/*.json"))
    checks = [p for p in kept if p.name.endswith(".verified.json")]  # arms.verify_all's records
    scans = [p for p in kept if p not in checks]
    assert scans and checks, "the arm scans and checks are kept beside the arms"
    doc = json.loads(scans[0].read_text())
    assert doc["schema"] == "mlagate.arm-scan/1" and doc["key"] == scans[0].stem
    for s in kept:
        s.write_text("{not json")
    again = run_cli("plan", "--matrix", fake_matrix, "--format", "json", cache=fake_cache)
    assert again.returncode == 0 and again.stdout == first.stdout, again.stderr
    assert json.loads(scans[0].read_text())["key"] == scans[0].stem  # scanned and kept again
    assert json.loads(checks[0].read_text())["schema"] == "mlagate.arm-verified/1"  # hashed


def _row2(case, verdict, expected, control=False, kinds=(), got=(), attempts=(), retry=False):
    """A mlagate.result/2 row of the probes suite."""
    failure = {"kind": got[0], "kinds": list(got), "details": {}} if verdict == "fail" else None
    return {
        **_row(verdict, expected, control, case=case),
        "schema": "mlagate.result/2",
        "arm": case.split("::")[2],
        "reason": "r",
        "expected_kinds": list(kinds),
        "retry": retry,
        "failure": failure,
        "attempts": list(attempts),
        "health": None,
    }


def test_a_changed_failure_and_a_flaky_case_have_chips_of_their_own(tmp_path):
    """Each red outcome is told by its symbol and word, not only by colour, and leads the
    failing-cases table (before invalid and expected failures)."""
    import re

    failed = {"run_id": "r1", "verdict": "fail", "failure": None, "reason": "x", "started": None}
    case = "probes::m::{}::g::float32::cpu".format
    rows = [
        _row2(case("a-stock"), "fail", "fail", True, ["wrong_path"], ["wrong_path"]),
        _row2(case("b-stock"), "fail", "fail", True, ["wrong_path"], ["runtime_raised"]),
        _row2(case("c-patched"), "pass", "pass", attempts=[failed]),
        _row2(case("d-patched"), "pass", "pass", attempts=[failed], retry=True),
        _row2(case("e-stock"), "pass", "fail", True, ["wrong_path"]),
    ]
    src = write_results(tmp_path / "run", rows)
    report_build.build([src], tmp_path / "html", commit="abc")
    html = (tmp_path / "html" / "index.html").read_text()
    chip = r'<a class="chip v-([a-z-]+)[^"]*" [^>]*aria-label="([^"]+)"[^>]*>([^<]*)</a>'
    assert sorted(re.findall(chip, html)) == [
        ("changed-failure", "changed failure (another kind than the expected one)", "\u2260"),
        ("expected", "expected fail", "\u2298"),
        ("flaky", "flaky (failed and passed in its attempts)", "\u2248"),
        ("flaky-allowed", "flaky, its suite may retry (not red)", "\u2248"),
        ("lost-control", "lost control", "!"),
    ]
    looks = re.findall(r'<tr class="problem [a-z]+" id="[^"]+" data-look="([^"]+)"', html)
    assert sorted(looks[:3]) == ["changed-failure", "flaky", "lost-control"], looks
    assert looks[3:] == ["expected"], "red first, then the expected failures"
