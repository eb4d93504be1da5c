"""Documents typed at depth (issue 37): a result's metrics are read against its suite's contract by
every verb, merged documents are typed in every part a page renders, folders that cannot be read
and manifests that are not regular files are refused in one line (exit 2), never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mlagate.contract import metrics, suites

from . import input_corpora, input_fuzz

# each example issue 37 reproduced at 3e1e071, by (corpus, case name)
EXAMPLES = [
    *(
        ("documents", f"{verb}: {name}")
        for verb in ("merge", "report", "compare", "costs")
        for name in (
            "marginal_cost metrics: a cache length 'abc'",
            "marginal_cost metrics: a list where a table belongs",
        )
    ),
    ("documents", "report: equivalence metrics: a list where a table belongs"),
    ("documents", "compare: crossover metrics: a width 'wide'"),
    ("documents", "report: marginal_cost metrics well typed"),
    ("documents", "report: marginal_cost metrics of another version"),
    *(("documents", f"merge: manifest {name}") for name in ("a FIFO", "a link to /dev/zero")),
    ("documents", "merge: manifest a folder"),
    ("documents", "resume: manifest a folder"),
    ("history", "--rerender: a folder whose merged.json mutation lacks mutants"),
    ("history", "--rerender: a folder whose merged.json gaps.missing an int"),
    ("history", "--rerender: a folder whose merged.json head_run an int"),
    ("history", "--rerender: a folder whose merged.json a result's metrics malformed"),
]


def _judge_all(cases, root: Path) -> list[input_fuzz.Verdict]:
    with ThreadPoolExecutor(2) as pool:
        return list(
            pool.map(lambda ic: input_fuzz.judge(ic[1], root / str(ic[0])), enumerate(cases))
        )


def test_every_example_of_the_issue_is_a_one_line_refusal_or_a_skip(tmp_path):
    pools = {
        "documents": {c.name: c for c in input_fuzz.document_cases(10_000)},
        "history": {c.name: c for c in input_corpora.history_cases(10_000)},
    }
    missing = [name for kind, name in EXAMPLES if name not in pools[kind]]
    assert not missing, f"examples not in their corpus: {missing}"
    verdicts = _judge_all([pools[kind][name] for kind, name in EXAMPLES], tmp_path)
    problems = [f"{v.case.name}: {v.problems[0]}" for v in verdicts if v.problems]
    assert not problems, "\n".join(problems)
    by_name = {v.case.name: v for v in verdicts}
    refusal = by_name["report: marginal_cost metrics: a cache length 'abc'"].stderr
    assert "r0.json: metrics.marginal.L=2.per_T: 'abc' does not match" in refusal, refusal
    assert "suite marginal_cost's metrics schema, version 2" in refusal
    listed = by_name["merge: manifest a FIFO"].stderr
    assert "manifest.json: not a regular file" in listed, listed


# --- folders the user cannot read: run as an unprivileged user when the tests run as root ---


def _as_user() -> list[str]:
    """The command prefix under which a folder of mode 0 cannot be read (root reads anything)."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: no user to whom a folder is unreadable")
    # root without the two capabilities that let it read any folder: the folder made mode 0 is
    # unreadable, while the test's own interpreter (tox keeps its environments in a folder of
    # mode 0700, unreadable to another user) still imports mlagate
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]


@pytest.mark.parametrize("where", ["run", "run/results"])
@pytest.mark.parametrize("verb", ["merge", "report", "compare", "costs"])
def test_a_folder_that_cannot_be_read_is_one_line(verb, where):
    import subprocess
    import sys

    root = Path(tempfile.mkdtemp(prefix="mlagate-unreadable-"))
    try:
        os.chmod(root, 0o777)
        folder = input_fuzz.run_folder(root)
        for dirpath, _, files in os.walk(root):
            os.chmod(dirpath, 0o777)
            for f in files:
                os.chmod(os.path.join(dirpath, f), 0o644)
        os.chmod(root / where, 0)
        argv = {
            "merge": ["merge", str(folder), "--out", str(root / "out")],
            "report": ["report", str(folder), "--out", str(root / "out")],
            "compare": ["compare", str(folder), str(folder)],
            "costs": ["costs", str(folder)],
        }[verb]
        proc = subprocess.run(
            [*_as_user(), sys.executable, "-m", "mlagate", *argv],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "MLAGATE_CACHE": str(root / "cache")},
        )
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert lines[0] == f"mlagate: error: {root / where}: cannot read: Permission denied"
    finally:
        os.chmod(root / where, 0o755)
        shutil.rmtree(root)


# --- the loader, on any suite's contract -----------------------------------------------------


def _suite(tmp_path: Path, version: int = 3) -> Path:
    """A suite kept beside a matrix, with a metrics schema of its own."""
    body = tmp_path / "test_serving.py"
    body.write_text("def test_serving(mla):\n    pass\n")
    (tmp_path / "serving.suite.yaml").write_text(
        "schema: mlagate.suite/1\nkind: correctness\nfailure_kinds: [runtime_raised]\n"
        "gates: {}\n"
        f"metrics:\n  version: {version}\n  schema:\n    type: object\n    properties:\n"
        "      rows:\n        type: object\n        propertyNames: {pattern: '^batch=[0-9]+$'}\n"
        "        additionalProperties: {type: number}\n"
    )
    return body


def _row(**change) -> dict:
    row = input_fuzz.result(suite="serving", metrics={"rows": {"batch=3": 0.5}})
    row.update(change)
    return row


def test_the_loader_checks_any_suite_contract_it_is_given(tmp_path):
    body = _suite(tmp_path)
    known = {"serving": body}
    assert metrics.check(_row(), "r.json", known)["metrics"] == {"rows": {"batch=3": 0.5}}
    with pytest.raises(metrics.MetricsError) as bad:
        metrics.check(_row(metrics={"rows": {"batch=x": 0.5}}), "r.json", known)
    assert str(bad.value).startswith("r.json: metrics.rows: 'batch=x' does not match")
    assert str(bad.value).endswith("(suite serving's metrics schema, version 3)")
    with pytest.raises(metrics.MetricsError, match=r"r.json: metrics.rows: \[1\] is not of type"):
        metrics.check(_row(metrics={"rows": [1]}), "r.json", known)
    # without the contract there is nothing to check against; so it goes for a shipped-only reader
    assert metrics.check(_row(metrics={"rows": [1]}), "r.json") is not None


def test_a_result_of_another_metrics_version_is_kept_but_gives_no_figures(tmp_path):
    body = _suite(tmp_path)
    old = _row(metrics_version=2, metrics={"rows": [1]})
    assert metrics.check(old, "r.json", {"serving": body}) is old
    d = suites.load(body)
    assert not d.typed(old) and d.typed(_row(metrics_version=3)) and d.typed(_row())


def test_results_written_by_the_harness_carry_their_metrics_version(tmp_path):
    from mlagate import results

    case = {
        "id": "serving::m::a::g::float32::cpu",
        "suite": "serving",
        "module": "m",
        "arm": "a",
        "geometry": "g",
        "dtype": "float32",
        "backend": "cpu",
        "profile": "quick",
        "runner": "r",
    }
    result = results.Result(case=case, verdict="pass", metrics_version=3)
    path = results.write(result, tmp_path, "r0")
    assert json.loads(path.read_text())["metrics_version"] == 3
    assert results.read(path)["metrics_version"] == 3
    assert (
        metrics.version("marginal_cost")
        == suites.load(metrics._shipped()["marginal_cost"]).metrics_version
    )


def test_the_live_progress_refuses_a_result_whose_metrics_break_its_contract(tmp_path, capsys):
    from mlagate.gate import progress

    a, b = "marginal_cost::m::a::g::float32::cpu", "marginal_cost::m::b::g::float32::cpu"
    good = input_fuzz.result(case_id=a, suite="marginal_cost", metrics={"l1_median_s": {"64": 1}})
    bad = input_fuzz.result(case_id=b, suite="marginal_cost", metrics={"l1_median_s": [1]})
    follower = progress.Follower(tmp_path, {a, b})
    input_fuzz.write(tmp_path / "results" / "a.json", good)
    input_fuzz.write(tmp_path / "results" / "b.json", bad)
    state = progress.State(total=2, estimates={}, parallel={})
    assert [r["case_id"] for r in follower.poll(state)] == [a]
    follower.poll(state)  # said once
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"mlagate: error: {tmp_path / 'results' / 'b.json'}: metrics.l1_median_s: [1] is not of "
        "type 'object' (suite marginal_cost's metrics schema, version 2)"
    ]


@pytest.mark.parametrize("good", [True, False])
def test_report_checks_a_suite_kept_beside_its_matrix(tmp_path, good):
    from mlagate.report import build
    from mlagate.report.merged import ReportError

    body = _suite(tmp_path)
    row = _row() if good else _row(metrics={"rows": {"batch=x": 0.5}})
    folder = input_fuzz.run_folder(tmp_path, rows=[row])
    input_fuzz.write(
        folder / "merged.json",
        {
            "schema": "mlagate.merged/1",
            "commit": "c0",
            "counts": {},
            "results": [],
            "suites": {"serving": {"kind": "correctness", "file": str(body)}},
        },
    )
    if good:
        assert build.build([folder], tmp_path / "out").merged["counts"]["pass"] == 1
    else:
        with pytest.raises(ReportError, match=r"case .*: metrics.rows: 'batch=x' does not match"):
            build.build([folder], tmp_path / "out")


def test_only_a_result_that_ran_to_its_end_is_held_to_the_schema(tmp_path):
    known = {"serving": _suite(tmp_path)}
    partial = {"metrics": {"rows": [1]}}
    raised = {"kind": "runtime_raised", "kinds": ["runtime_raised"], "details": {}}
    judged = {"kind": "wrong_path", "kinds": ["wrong_path"], "details": {}}
    for kept in (
        _row(verdict="argued", **partial),
        _row(verdict="invalid", **partial),
        _row(verdict="fail", failure=raised, **partial),
    ):
        assert metrics.check(kept, "r.json", known) is kept
    for refused in (
        _row(verdict="pass", **partial),
        _row(verdict="fail", failure=judged, **partial),
    ):
        with pytest.raises(metrics.MetricsError):
            metrics.check(refused, "r.json", known)
