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
