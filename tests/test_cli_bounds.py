"""Bad command lines: one line, exit 2, no traceback, no hang, before anything runs."""

import json
import os

import pytest

from .conftest import FAKE_MATRIX, cli


@pytest.fixture(scope="module")
def junk(tmp_path_factory):
    d = tmp_path_factory.mktemp("junk")
    (d / "afile").write_text("hi")
    os.symlink(d / "loop", d / "loop")
    os.symlink(d / "nowhere", d / "dangling")
    (d / "deep.json").write_text("[" * 100_000)
    (d / "list.json").write_text("[1, 2]")
    shard = d / "shard"
    (shard / "results").mkdir(parents=True)
    (shard / "manifest.json").write_text(
        json.dumps(
            {
                "schema": "mlagate.manifest/1",
                "runner": "r",
                "profile": "p",
                "shard": "1/30000000",
                "plan": "x",
                "cases": [],
            }
        )
    )
    (d / "results").mkdir()
    (d / "results" / "r.json").write_text("[" * 100_000)
    return d


CASES = [
    (["run", "--matrix", FAKE_MATRIX, "--out", "{d}/afile"], "--out: "),
    (["run", "--matrix", FAKE_MATRIX, "--out", "{d}/afile/sub"], "--out: "),
    (
        ["run", "--matrix", FAKE_MATRIX, "--shard", "1/30000000", "--out", "{d}/o1"],
        "30000000 shards for",
    ),
    (
        ["run", "--matrix", FAKE_MATRIX, "--backend", "gpu", "--out", "{d}/o2"],
        "invalid choice: 'gpu'",
    ),
    (
        [
            "plan",
            "--matrix",
            FAKE_MATRIX,
            "--format",
            "github",
            "--runner",
            "linux-cpu",
            "--shards",
            "30000000",
        ],
        "30000000 shards for",
    ),
    (
        [
            "plan",
            "--matrix",
            FAKE_MATRIX,
            "--format",
            "github",
            "--runner",
            "linux-cpu",
            "--manifest",
            "{d}",
        ],
        "--manifest: ",
    ),
    (["merge", "{d}/shard", "--out", "{d}/m1"], "shard: "),
    (["merge", "{d}/shard", "--out", "{d}/afile"], "--out: "),
    (["merge", "{d}", "--out", "{d}/m2"], "nested too deeply"),
    (["report", "{d}/deep.json", "--out", "{d}/r1"], "nested too deeply"),
    (["report", "{d}/list.json", "--out", "{d}/r2"], "schema is"),
    (["report", "{d}/loop", "--out", "{d}/r3"], "loop"),
    (["report", "{d}/dangling", "--out", "{d}/r4"], "dangling"),
    (["scan", "{d}/loop"], "loop"),
    (["arms", "--import", "{d}/afile"], "afile"),
    (["arms", "--import", "{d}/loop"], "loop"),
    (["arms", "--matrix", FAKE_MATRIX, "--export", "{d}"], "--export: "),
    (["costs", "{d}/shard", "--out", "{d}"], "--out: "),
]


@pytest.mark.parametrize("args, says", CASES, ids=[" ".join(map(str, a))[:60] for a, _ in CASES])
def test_a_bad_command_line_is_one_line_and_exit_2(junk, tmp_path, args, says):
    proc = cli(*[str(a).format(d=junk) for a in args], cache=tmp_path / "cache", timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert says in proc.stderr


def test_scan_reports_unreadable_files_in_a_folder_and_never_crashes(tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    (d / "deep.py").write_text("x = " + "(" * 200_000 + "1" + ")" * 200_000 + "\n")
    (d / "unary.py").write_text("x = " + "-" * 300_000 + "1\n")
    os.symlink(d / "dangling-target", d / "dangling.py")
    os.symlink(d / "loop.py", d / "loop.py")
    proc = cli("scan", d, timeout=60)
    # nothing could be parsed: not clean (exit 3)
    assert "Traceback" not in proc.stderr and proc.returncode == 3, proc.stderr[-2000:]
    for name in ("deep.py", "unary.py", "dangling.py", "loop.py"):
        assert f"{name}:1:1: MLA006 not parsed" in proc.stdout


def test_a_reader_that_stops_early_gets_no_traceback():
    """`mlagate plan --format json | head -1`: the closed pipe ends the command quietly (exit
    141, as a shell reports SIGPIPE), never a BrokenPipeError traceback. The reader is gone
    before the first write (a read end closed up front), so the plan cannot fit in the pipe's
    buffer and exit 0 first."""
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "mlagate", "plan", "--matrix", str(FAKE_MATRIX)]
            + ["--format", "json"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 141 and b"Traceback" not in proc.stderr, proc.stderr.decode()[-2000:]
