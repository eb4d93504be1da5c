"""What scan is fed besides source: FIFOs, devices, unreadable files, nothing parseable. Refused
or reported in one line, never a hang; a scan that parsed nothing is not clean (exit 3)."""

import json
import os
import shutil
import stat

import pytest

from mlagate.scan import guards as scanner
from tests.conftest import FIXTURES, cli


@pytest.fixture
def tree(tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    shutil.copy(FIXTURES / "guards" / "pos_eq.py", d / "attn.py")
    return d


def test_a_fifo_and_a_link_to_dev_zero_in_a_tree_are_reported_unopened(tree):
    os.mkfifo(tree / "pipe.py")
    os.symlink("/dev/zero", tree / "zero.py")
    os.mkfifo(tree / "pipe.rs")
    proc = cli("scan", tree, "--format", "json", timeout=60)  # a hang fails on the timeout
    report = json.loads(proc.stdout)
    unread = {f["path"]: f["message"] for f in report["findings"] if f["rule"] == "MLA006"}
    assert unread == {
        "pipe.py": "not read: a FIFO",
        "pipe.rs": "not read: a FIFO",
        "zero.py": "not read: a character device",
    }
    assert proc.returncode == 1 and report["parsed"] == 1  # attn.py's two guards still fail


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_fifo_or_a_device_named_on_the_command_line_is_refused(tmp_path, kind):
    path = tmp_path / "x.py"
    os.mkfifo(path) if kind == "fifo" else os.symlink("/dev/zero", path)
    proc = cli("scan", path, timeout=60)
    what = "a FIFO" if kind == "fifo" else "a character device"
    assert proc.returncode == 2
    assert proc.stderr == f"mlagate: error: scan: {path}: {what}, not a source file or folder\n"


def test_an_unreadable_file_is_reported(tree):
    """Run as another user when root (root reads a mode-000 file)."""
    secret = tree / "secret.py"
    secret.write_text("x = 1\n")
    secret.chmod(0)
    if os.geteuid() != 0:
        report = scanner.scan([tree])
    else:
        report = _as_nobody(lambda: scanner.scan([secret]), tree)
    assert [(f.rule, f.message) for f in report.findings if f.rule == "MLA006"] == [
        ("MLA006", "not parsed: PermissionError: Permission denied")
    ]
    assert report.exit_code == (3 if os.geteuid() == 0 else 1)  # alone it is nothing scanned


def _as_nobody(fn, tree):
    """fn() in a child that dropped to uid/gid 65534 (the files under tree made readable to it
    but for the mode-000 one); returns what it returned."""
    import pickle

    for p in [tree, *tree.parents]:
        if p == p.parent:
            break
        p.chmod(p.stat().st_mode | stat.S_IXOTH)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(r)
            os.setgid(65534)
            os.setuid(65534)
            os.write(w, pickle.dumps(fn()))
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    return pickle.loads(data)


def test_a_scan_that_parsed_nothing_is_not_clean(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no source here\n")
    proc = cli("scan", empty, timeout=60)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout.endswith("nothing scanned: no file could be parsed (exit 3)\n")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "broken.py").write_text("def f(:\n")
    os.mkfifo(bad / "pipe.py")
    assert scanner.scan([bad]).exit_code == 3
    (bad / "ok.py").write_text("x = 1\n")
    assert scanner.scan([bad]).exit_code == 0  # one parsed file: the warnings do not fail


def test_a_file_over_the_size_cap_is_reported_not_read(tree):
    from mlagate.scan import model

    (tree / "huge.py").write_bytes(b"#" * (model.MAX_BYTES + 1))
    (f,) = [f for f in scanner.scan([tree]).findings if f.rule == "MLA006"]
    assert (f.path, f.message) == (
        "huge.py",
        f"not read: {model.MAX_BYTES + 1} bytes, over the {model.MAX_BYTES}-byte cap",
    )
