"""The output folder of mlagate run: held by one run, resumed after a killed run (fake runtime)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mlagate.gate import outdir

SLOW = "\nimport time as _t\n_t.sleep({s})\n"


def _slow(matrix, module, seconds):
    """Make the fake module import slowly in its worker (the copy under tmp_path only)."""
    path = matrix.parent / "fakemla-tree" / "fakemla" / "models" / f"{module}.py"
    path.write_text(path.read_text() + SLOW.format(s=seconds))
    return path


def _start(matrix, out, cache, *extra):
    env = {**os.environ, "MLAGATE_CACHE": str(cache), "CI": "true"}
    cmd = [
        sys.executable,
        "-m",
        "mlagate",
        "run",
        "--matrix",
        str(matrix),
        "--out",
        str(out),
        *map(str, extra),
    ]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def _wait_for(pred, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.1)
    return False


def _pids_naming(path):
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(path).encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def _verdicts(out):
    return {
        json.loads(p.read_text())["case_id"]: json.loads(p.read_text())
        for p in (out / "results").glob("*.json")
    }


def test_a_second_run_on_a_held_folder_refuses_and_the_first_keeps_its_results(
    fake_matrix, fake_cache, tmp_path, run_cli
):
    out = tmp_path / "out"
    _slow(fake_matrix, "skewed", 4)
    first = _start(fake_matrix, out, fake_cache)
    assert _wait_for(
        lambda: (out / "results").is_dir() and any((out / "results").glob("*.json"))
    ), "the first run wrote nothing"
    second = run_cli(
        "run", "--matrix", fake_matrix, "--suite", "probes", "--out", out, cache=fake_cache
    )
    assert second.returncode == 2
    assert second.stderr.startswith(
        f"mlagate: error: --out {out}: in use by pid {first.pid} (mlagate run --matrix"
    )
    assert second.stderr.count("\n") == 1
    stdout, stderr = first.communicate(timeout=300)
    assert first.returncode == 1, stdout + stderr
    rows = _verdicts(out)
    assert len(rows) == 8 and not (out / "previous").exists(), (
        "nothing was moved away from the first run"
    )
    assert "8/8 cases: 4 passed, 2 failed, 1 invalid, 1 argued-not-measured" in stdout


def test_the_lock_is_dropped_when_its_holder_dies(tmp_path):
    out = tmp_path / "out"
    code = (
        f"from mlagate.gate import outdir; import time\nwith outdir.hold({str(out)!r}, "
        "['holder']):\n    print('held', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    try:
        try:
            with outdir.hold(out):
                raise AssertionError("a held folder was taken")
        except outdir.FolderBusy as exc:
            assert f"in use by pid {proc.pid} (holder," in str(exc)
    finally:
        proc.kill()
        proc.wait()
    with outdir.hold(out) as info:
        assert info["pid"] == os.getpid()


def test_resume_after_a_killed_run_reruns_only_the_unfinished_cases(
    fake_matrix, fake_cache, tmp_path, run_cli
):
    out = tmp_path / "out"
    slow = _slow(fake_matrix, "skewed", 600)
    first = _start(fake_matrix, out, fake_cache)
    assert _wait_for(
        lambda: (
            len(list((out / "results").glob("*.json"))) >= 7
            if (out / "results").is_dir()
            else False
        )
    )
    workers = _pids_naming(fake_cache)  # the arm workers live in sessions of their own
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    before = _verdicts(out)
    before_files = {p.name: p.stat().st_mtime_ns for p in (out / "results").glob("*.json")}
    planned = json.loads((out / "manifest.json").read_text())["cases"]
    unfinished = sorted(set(planned) - set(before))
    assert unfinished == ["probes::fake/skewed::fake-stock::tiny::float32::cpu"], unfinished
    slow.write_text(slow.read_text().replace("_t.sleep(600)", ""))
    proc = run_cli("run", "--resume", out, "--matrix", fake_matrix, cache=fake_cache)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    invalid = [cid for cid, r in before.items() if r["verdict"] == "invalid"]
    assert invalid == ["probes::fake/opaque::fake-stock::tiny::float32::cpu"]
    assert "running 2 cases" in proc.stdout, "the unfinished case and the invalid one, nothing else"
    after = _verdicts(out)
    assert sorted(after) == sorted(planned) and after[unfinished[0]]["verdict"] == "pass"
    kept = {
        p.name
        for p in (out / "results").glob("*.json")
        if p.stat().st_mtime_ns == before_files.get(p.name)
    }
    assert len(kept) == 6, "the six finished, valid results were not re-run"
    assert "4 passed, 2 failed, 1 invalid, 1 argued-not-measured" in proc.stdout


def test_resume_failed_reruns_the_failing_cases_only(fake_matrix, fake_cache, tmp_path, run_cli):
    out = tmp_path / "out"
    assert run_cli("run", "--matrix", fake_matrix, "--out", out, cache=fake_cache).returncode == 1
    proc = run_cli("run", "--resume", out, "--failed", "--matrix", fake_matrix, cache=fake_cache)
    assert proc.returncode == 1
    assert (
        "running 2 cases" in proc.stdout
        and "4 passed, 2 failed, 1 invalid, 1 argued-not-measured" in proc.stdout
    )
    bad = run_cli(
        "run", "--resume", out, "--suite", "probes", "--matrix", fake_matrix, cache=fake_cache
    )
    assert bad.returncode == 2 and bad.stderr.startswith(
        "mlagate: error: --suite: does not go with --resume"
    )
    none = run_cli(
        "run", "--resume", tmp_path / "nothing", "--matrix", fake_matrix, cache=fake_cache
    )
    assert (
        none.returncode == 2
        and "manifest.json: no run to resume here" in none.stderr
        and none.stderr.count("\n") == 1
    )


def test_long_options_are_never_abbreviated(fake_matrix, fake_cache, tmp_path, run_cli):
    proc = run_cli(
        "run",
        "--matrix",
        fake_matrix,
        "--suit",
        "probes",
        "--out",
        tmp_path / "o",
        cache=fake_cache,
    )
    assert proc.returncode == 2 and "unrecognized arguments: --suit" in proc.stderr
    assert not (tmp_path / "o").exists()
