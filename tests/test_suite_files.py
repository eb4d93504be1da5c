"""One rule finds a suite's files (Suite.file): the matrix reader, `mlagate run` and the reuse
keys agree on them, for shipped suites and for one beside the matrix (`file:`)."""

import dataclasses
import shutil

from mlagate import matrix
from mlagate.gate import run as gate_run
from mlagate.gate.reuse import keys
from mlagate.hashing import file_sha
from mlagate.paths import shipped_suite

from .conftest import ROOT

PROBES = "  probes:  # records the path each module takes"


def _agree(m, sid):
    s = m.suites[sid]
    assert gate_run.suite_file(m, sid) == s.file
    files = keys.suite_files(m, sid)
    assert files["test"] == file_sha(s.file)
    assert files["contract"] == file_sha(s.file.with_name(f"{sid}.suite.yaml"))
    return s.file


def test_shipped_suites_are_found_by_one_rule():
    m = matrix.load(ROOT / "matrix.yaml")
    for sid, s in m.suites.items():
        want = ROOT / "suites" / s.kind / f"test_{sid}.py"
        assert shipped_suite(s.kind, sid) == want
        assert _agree(m, sid) == want
        assert dataclasses.replace(s, path=None).file == want  # a Suite built without a path


def test_a_suite_beside_the_matrix_is_found_there(tmp_path):
    shutil.copytree(ROOT / "patches", tmp_path / "patches")
    for name in ("test_probes.py", "probes.suite.yaml"):
        shutil.copy(ROOT / "suites" / "correctness" / name, tmp_path / name)
    text = (ROOT / "matrix.yaml").read_text()
    line = text[text.index(PROBES) : text.index("\n", text.index(PROBES)) + 1]
    text = text.replace(line, line + "    file: test_probes.py\n", 1)
    (tmp_path / "matrix.yaml").write_text(text)
    m = matrix.load(tmp_path / "matrix.yaml")
    assert _agree(m, "probes") == tmp_path / "test_probes.py"
    (tmp_path / "test_probes.py").write_text("# changed\n")
    assert (
        keys.suite_files(m, "probes")["test"]
        != keys.suite_files(matrix.load(ROOT / "matrix.yaml"), "probes")["test"]
    )
