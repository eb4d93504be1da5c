"""An output folder held by one run at a time: a lock file that names its holder.

fcntl.flock (standard library, Linux and macOS, the platforms MLX runs on) is used rather than
a lock library because the refusal must name the holder: the lock file itself carries the
holder's pid, command and start time, and the kernel drops the lock when the holder dies.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import sys
import time
from contextlib import contextmanager
from pathlib import Path

LOCK_NAME = ".mlagate.lock"


class FolderBusy(ValueError):
    """Another run holds the output folder; one line naming the holder."""


def holder(out: Path) -> dict:
    """What the lock file says about its holder (empty when unreadable)."""
    try:
        data = json.loads((Path(out) / LOCK_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _refusal(out: Path) -> FolderBusy:
    who = holder(out)
    pid = who.get("pid", "?")
    command = who.get("command", "an unknown command")
    since = who.get("started", "an unknown time")
    return FolderBusy(
        f"--out {out}: in use by pid {pid} ({command}, started {since}); "
        "wait for it to finish or give another --out"
    )


@contextmanager
def hold(out: Path, command: list[str] | None = None):
    """Hold OUT for the duration of the block; refuse at once when another process holds it."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _refusal(out) from None
        info = {
            "pid": os.getpid(),
            "command": shlex.join(command or ["mlagate", *sys.argv[1:]]),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(info).encode())
        yield info
    finally:
        os.close(fd)  # closing drops the lock; the file stays, naming the last holder
