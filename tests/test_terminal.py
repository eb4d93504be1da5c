"""What mlagate run shows on a terminal (a pseudo-terminal, rendered by the pyte emulator) and in
CI."""

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import time

import pyte

from mlagate.gate import preflight


def _slow(matrix, module, seconds):
    path = matrix.parent / "fakemla-tree" / "fakemla" / "models" / f"{module}.py"
    path.write_text(path.read_text() + f"\nimport time as _t\n_t.sleep({seconds})\n")


def _through_pty(args, env, timeout=300) -> bytes:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks, end = [], time.time() + timeout
    while time.time() < end:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=30)
    os.close(master)
    return b"".join(chunks)


def _screen(raw: bytes, columns=160, rows=1000) -> list[str]:
    screen = pyte.Screen(columns, rows)
    stream = pyte.ByteStream(screen)
    stream.feed(raw.replace(b"\n", b"\r\n") if b"\r\n" not in raw else raw)
    return [line.rstrip() for line in screen.display if line.strip()]


def test_a_terminal_run_is_short_and_shows_progress(fake_matrix, fake_cache, tmp_path):
    _slow(fake_matrix, "skewed", 2)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(MLAGATE_CACHE=str(fake_cache), TERM="xterm-256color")
    env.pop("COLUMNS", None)
    raw = _through_pty(
        [
            sys.executable,
            "-m",
            "mlagate",
            "run",
            "--matrix",
            str(fake_matrix),
            "--out",
            str(tmp_path / "o"),
        ],
        env,
    )
    text = raw.decode("utf-8", "replace")
    assert "/8 cases:" in text and "left" in text, "no live progress with the time left was drawn"
    assert "main  probes::fake/skewed" in text, "the case on the worker was not shown"
    lines = _screen(raw)
    assert len(lines) <= 60, "\n".join(lines)
    assert any(
        "8/8 cases: 4 passed, 2 failed, 1 invalid, 1 argued-not-measured" in ln for ln in lines
    )
    assert sum("4 passed, 2 failed" in ln for ln in lines) == 2, (
        "one table footer and one progress line"
    )
    assert not any("Traceback" in ln or "errors.Failed" in ln or "def test_" in ln for ln in lines)
    assert any("tracebacks included" in ln and "pytest-correctness.log" in ln for ln in lines)
    log = (tmp_path / "o" / "logs" / "pytest-correctness.log").read_text()
    assert "mlagate.harness.errors.Failed" in log, "the tracebacks are in the log"


def test_under_ci_it_prints_plain_lines(fake_matrix, fake_cache, tmp_path):
    env = {**os.environ, "CI": "true", "MLAGATE_CACHE": str(fake_cache), "TERM": "xterm-256color"}
    raw = _through_pty(
        [
            sys.executable,
            "-m",
            "mlagate",
            "run",
            "--matrix",
            str(fake_matrix),
            "--out",
            str(tmp_path / "o"),
        ],
        env,
    )
    text = raw.decode("utf-8", "replace")
    assert "\x1b[" not in text, "no cursor movement or colour under CI"
    assert "[8/8] " in text and text.count("[") >= 8


def test_a_missing_mlx_backend_is_one_line_naming_the_extra(
    fake_matrix, fake_cache, tmp_path, run_cli
):
    broken = tmp_path / "shadow" / "mlx"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("")
    (broken / "core.py").write_text(
        "raise ImportError('libmlx.so: cannot open shared object file')\n"
    )
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = str(broken.parent) + (os.pathsep + env_path if env_path else "")
    try:
        proc = run_cli("run", "--matrix", fake_matrix, "--out", tmp_path / "o", cache=fake_cache)
    finally:
        os.environ["PYTHONPATH"] = env_path
        if not env_path:
            del os.environ["PYTHONPATH"]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "libmlx.so: cannot open shared object file" in proc.stderr
    assert "pip install 'mlagate[cpu]'" in proc.stderr or sys.platform == "darwin"
    assert not (tmp_path / "o" / "results").exists()


def test_preflight_passes_where_mlx_runs():
    preflight.check()


def test_arm_install_shows_what_it_installs_and_how_far(fake_matrix, fake_cache):
    env = {**os.environ, "MLAGATE_CACHE": str(fake_cache), "TERM": "xterm-256color"}
    plan = [sys.executable, "-m", "mlagate", "plan", "--matrix", str(fake_matrix)]
    first = _through_pty(plan, env).decode("utf-8", "replace")
    assert "mlagate: installing arm fake-stock (1 of 1): " in first
    assert "mlagate: installed arm fake-stock tree (" in first
    assert "installing" not in _through_pty(plan, env).decode("utf-8", "replace"), (
        "a cached arm installs nothing"
    )


def test_off_a_terminal_an_install_says_so_in_the_log_once(fake_matrix, fake_cache, run_cli):
    """A CI log shows what was installed (and a cached arm adds nothing)."""
    proc = run_cli("plan", "--matrix", fake_matrix, cache=fake_cache)
    lines = proc.install_lines  # what the helper took out of stderr: the install's two lines
    assert proc.returncode == 0 and proc.stderr == "" and len(lines) == 2, lines
    assert lines[0].startswith("mlagate: installing arm fake-stock (1 of 1): ")
    assert lines[1].startswith("mlagate: installed arm fake-stock tree (")
    again = run_cli("plan", "--matrix", fake_matrix, cache=fake_cache)
    assert again.returncode == 0 and again.stderr == "" and again.install_lines == []


def test_verbose_streams_pytest_output_instead_of_a_log(fake_matrix, fake_cache, tmp_path, run_cli):
    out = tmp_path / "o"
    proc = run_cli(
        "run",
        "--matrix",
        fake_matrix,
        "--module",
        "fake/liar",
        "--out",
        out,
        "-v",
        cache=fake_cache,
    )
    assert proc.returncode == 1
    assert (
        "mlagate.harness.errors.Failed" in proc.stdout and "tracebacks included" not in proc.stdout
    )
    assert not (out / "logs" / "pytest-correctness.log").exists()
