"""Runs that never mix: the pytest child of `mlagate run` dies with it, and every run has an id.

`mlagate run` starts pytest in a session of its own (call) with MLAGATE_PARENT_PID and
MLAGATE_RUN_ID set. Each process that loads mlagate's plugin (pytest and its xdist workers)
watches its parent (watch_parent): once the parent is gone, even by kill -9, it kills its
process group, so nothing of a dead run goes on writing results. On Linux the pytest child
also asks the kernel for SIGTERM when its parent dies (PR_SET_PDEATHSIG), which its watcher
turns into the same group kill, and each arm worker (a session of its own) is killed by the
kernel when the process that started it dies (die_with_parent). A run reads back only results
that carry its run id.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import signal
import subprocess
import sys
import threading
import time

PARENT_ENV = "MLAGATE_PARENT_PID"
RUN_ENV = "MLAGATE_RUN_ID"
_PR_SET_PDEATHSIG = 1


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(4)


def _pdeathsig(sig: int = signal.SIGTERM) -> None:
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        except (OSError, AttributeError):
            pass


def die_with_parent() -> None:
    """preexec_fn of an arm worker (a session of its own): on Linux the kernel kills it when the
    process that started it dies, even inside a runtime call that never reads its pipe again."""
    _pdeathsig(signal.SIGKILL)


def popen(args: list[str], env: dict[str, str], **kw) -> subprocess.Popen:
    """Start args in a new session tied to this process (it dies with it, see watch_parent)."""
    env = {**env, PARENT_ENV: str(os.getpid())}
    return subprocess.Popen(args, env=env, start_new_session=True, preexec_fn=_pdeathsig, **kw)


def kill(proc: subprocess.Popen) -> None:
    """Kill a process started by popen, with its whole group."""
    _killpg(proc.pid)
    proc.wait()


def call(args: list[str], env: dict[str, str]) -> int:
    """Run args in a new session tied to this process; on any exception here, kill its group."""
    proc = popen(args, env)
    try:
        return proc.wait()
    except BaseException:
        kill(proc)
        raise


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def watch_parent(interval: float = 0.2) -> threading.Thread | None:
    """In a process started under `mlagate run`: kill this process group once the parent is gone."""
    if PARENT_ENV not in os.environ:
        return None
    expected = (
        int(os.environ[PARENT_ENV]) if "PYTEST_XDIST_WORKER" not in os.environ else os.getppid()
    )
    if os.getpgrp() == os.getpid():
        signal.signal(signal.SIGTERM, lambda *_: _killpg(os.getpgrp()))

    def watch() -> None:
        while os.getppid() == expected:
            time.sleep(interval)
        _killpg(os.getpgrp())
        os._exit(1)

    thread = threading.Thread(target=watch, name="mlagate-lifeline", daemon=True)
    thread.start()
    return thread
