"""Runs that never mix: kill -9 of `mlagate run` takes its pytest (and xdist workers) with it,
and a run counts only results that carry its own run id; set-aside names never collide."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mlagate import lifeline, matrix
from mlagate.gate import run as execute
from mlagate.gate.request import RunRequest
from mlagate.harness import events
from mlagate.plan import Selection


def _slow(fake_matrix: Path) -> None:
    good = fake_matrix.parent / "fakemla-tree" / "fakemla" / "models" / "good.py"
    good.write_text(
        good.read_text().replace(
            "        L = x.shape[1]\n",
            "        L = x.shape[1]\n        __import__('time').sleep(1.0)\n",
            1,
        )
    )


def _children_of(pid: int) -> list[int]:
    """Processes started under that mlagate run (they carry its pid in MLAGATE_PARENT_PID)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"{lifeline.PARENT_ENV}={pid}".encode() in env:
            found.append(int(entry.name))
    return found


def test_kill_9_of_a_run_leaves_no_process_and_no_late_result(fake_matrix, fake_cache, tmp_path):
    _slow(fake_matrix)
    out = tmp_path / "out"
    env = {**os.environ, "MLAGATE_CACHE": str(fake_cache)}
    cmd = [
        sys.executable,
        "-m",
        "mlagate",
        "run",
        "--matrix",
        str(fake_matrix),
        "--module",
        "fake/good",
        "-n",
        "2",
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not _children_of(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(3)  # xdist workers and arm workers are up and running cases
    assert _children_of(proc.pid), "the run started pytest"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = (
        time.monotonic() + 5
    )  # a case step sleeps 1 s: a run left alive would take far longer
    while _children_of(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _children_of(proc.pid) == [], "every process of the killed run is gone"
    before = (
        sorted(p.name for p in (out / "results").glob("*.json"))
        if (out / "results").exists()
        else []
    )
    time.sleep(2)
    after = (
        sorted(p.name for p in (out / "results").glob("*.json"))
        if (out / "results").exists()
        else []
    )
    assert after == before, "nothing of the killed run writes results later"


# an older run's process writing results (atomically, as mlagate does) into this run's folder
STRAY = """
import json, os, sys, time, pathlib
d = pathlib.Path(sys.argv[1]) / "results"
for i in range(400):
    d.mkdir(parents=True, exist_ok=True)
    for f in [f for f in d.glob("*.json") if not f.name.startswith("zz-")][:3]:
        try:
            r = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        r["run_id"], r["verdict"] = "old", "fail"
        r["failure"] = {"kind": "unclassified", "kinds": ["unclassified"], "details": {}}
        tmp = d / (".zz-" + f.name + ".tmp")
        tmp.write_text(json.dumps(r))
        os.replace(tmp, d / ("zz-" + f.name))
    time.sleep(0.05)
"""


def test_a_run_counts_only_its_own_results(fake_matrix, fake_cache, tmp_path):
    m = matrix.load(fake_matrix)
    out = tmp_path / "out"
    stray = [sys.executable, "-c", STRAY, str(out)]
    writer = subprocess.Popen(stray)  # an older run still writing into this folder
    try:
        outcome = execute.run(
            RunRequest(
                m,
                Selection(modules=("fake/good",)),
                "quick",
                "cpu",
                next(iter(m.runners)),
                out,
                cache=fake_cache,
            )
        )
    finally:
        writer.kill()
        writer.wait()
    ids = {r["run_id"] for r in outcome.summary.rows}
    assert len(ids) == 1 and "old" not in ids and None not in ids
    written = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    assert any(r.get("run_id") == "old" for r in written), (
        "the stray writer did write into the folder"
    )
    assert all(r["verdict"] != "fail" for r in outcome.summary.rows)


def test_set_aside_names_never_collide(tmp_path):
    out = tmp_path / "out"
    moved = set()
    for _ in range(5):  # five runs in the same second
        (out / "results").mkdir(parents=True)
        (out / "results" / "a.json").write_text("{}")
        moved.add(execute.set_aside(out))
    assert len(moved) == 5 and all((p / "a.json").exists() for p in moved)


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _xdist_name(pid: int) -> str | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"PYTEST_XDIST_WORKER="):
            return item.split(b"=", 1)[1].decode()
    return None


def _worker_in_a_case(run_pid: int, out: Path, deadline: float) -> int | None:
    """The pid of an xdist worker 0.5 to 2 s into a case it still runs (each step of the slowed
    module sleeps 1 s): its events file names the case, and no result of it has landed."""
    while time.monotonic() < deadline:
        time.sleep(0.1)
        for name, now in events.current(out).items():
            if not 0.5 <= time.time() - now["started"] <= 2.0:
                continue
            # an xdist worker names itself only after it started: its arm worker inherits it
            arm_workers = [p for p in _children_of(run_pid) if _xdist_name(p) == name]
            pids = sorted({_ppid(p) for p in arm_workers} - {-1})
            landed = any(
                json.loads(r.read_text()).get("case_id") == now["case"]
                for r in (out / "results").glob("*.json")
            )
            if pids and not landed:
                return pids[0]
    return None


def test_an_xdist_worker_crash_makes_the_case_invalid_with_logs_and_replay(
    fake_matrix, fake_cache, tmp_path
):
    _slow(fake_matrix)
    out = tmp_path / "out"
    env = {**os.environ, "MLAGATE_CACHE": str(fake_cache)}
    cmd = [
        sys.executable,
        "-m",
        "mlagate",
        "run",
        "--matrix",
        str(fake_matrix),
        "--module",
        "fake/good",
        "-n",
        "2",
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    victim = _worker_in_a_case(proc.pid, out, deadline=time.monotonic() + 120)
    assert victim, "found an xdist worker that has just started a case"
    os.kill(victim, signal.SIGKILL)
    stdout, _ = proc.communicate(timeout=300)
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    crashed = [r for r in rows if "crashed running this case" in r["reason"]]
    assert len(crashed) == 1, stdout[-2000:]
    (row,) = crashed
    assert (
        row["verdict"] == "invalid"
        and row["replay"].startswith("mlagate run")
        and "crashed" in row["stderr"]
    )
    assert "--- worker-" in row["stderr"], "the tail of the crashed worker's arm-worker log"
    assert f"replay {row['case_id']}: {row['replay']}" in stdout
