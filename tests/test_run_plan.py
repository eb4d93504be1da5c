"""One `mlagate run` reads the matrix and expands the cases once: the CLI process writes
OUT/plan.json and the pytest processes (the xdist controller and its workers) take everything
from it. Counted across processes with a sitecustomize that wraps matrix.parse and plan.expand."""

import json
import os
import subprocess
import sys

from .conftest import FAKE_MATRIX

COUNTER = """
import os
if os.environ.get("MLAGATE_COUNT_FILE"):
    import mlagate.matrix as _m
    import mlagate.plan as _p

    def _counted(name, fn):
        def wrapper(*a, **k):
            with open(os.environ["MLAGATE_COUNT_FILE"], "a") as fh:
                fh.write(f"{name} {os.getpid()}\\n")
            return fn(*a, **k)
        return wrapper

    _m.parse = _counted("parse", _m.parse)
    _p.expand = _counted("expand", _p.expand)
"""


def test_one_run_parses_the_matrix_and_expands_the_cases_once(tmp_path):
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(COUNTER)
    count = tmp_path / "count.txt"
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path / "hook"),
        "MLAGATE_COUNT_FILE": str(count),
        "MLAGATE_CACHE": str(tmp_path / "cache"),
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlagate",
            "run",
            "--matrix",
            FAKE_MATRIX,
            "--suite",
            "probes",
            "-n",
            "2",
            "--out",
            tmp_path / "out",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    calls = count.read_text().split()
    names, pids = calls[0::2], set(calls[1::2])
    assert names.count("parse") == 1 and names.count("expand") == 1 and len(pids) == 1, (
        calls,
        proc.stdout[-2000:],
        proc.stderr[-2000:],
    )
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    results = list((tmp_path / "out" / "results").glob("*.json"))
    assert plan["schema"] == "mlagate.run-plan/1" and len(results) == len(plan["cases"]) > 0


def test_a_damaged_run_plan_is_one_line_naming_the_file_and_key(tmp_path):
    import pytest

    from mlagate import runplan

    plan = tmp_path / "plan.json"
    for doc, where in (
        ({"schema": "mlagate.run-plan/1"}, "missing key 'matrix'"),
        ({"schema": "mlagate.plan/1"}, "schema is 'mlagate.plan/1', expected mlagate.run-plan/1"),
    ):
        plan.write_text(json.dumps(doc))
        with pytest.raises(runplan.HandOffError, match=f"{plan}: .*{where}"):
            runplan.read(plan)
    plan.write_text("{")
    with pytest.raises(runplan.HandOffError, match="not valid JSON"):
        runplan.read(plan)
