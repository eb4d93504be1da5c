"""What the machine checks read of this machine: a `System` runs its commands and reads its
files (a recorded one replays saved outputs, so tests replay other machines), and a `Check` is
one finding of mlagate.machine.health or mlagate.machine.classes.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok, warn, fail, or skip (could not be read: never counted as ok)
    detail: str


class System:
    """This machine: commands and files the checks read (a recorded one replays saved outputs)."""

    def __init__(self):
        self.sysname = os.uname().sysname

    def run(self, *argv: str) -> str | None:
        """A command's stdout, or None when it is missing, fails or hangs."""
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout if proc.returncode == 0 else None

    def read(self, path: str) -> str | None:
        try:
            return Path(path).read_text(encoding="utf-8")
        except OSError:
            return None

    def cpu_count(self) -> int:
        return os.cpu_count() or 1

    def own_pids(self) -> set[int]:
        """This process and its ancestors (a health check started by an MLX job is not another
        job)."""
        pids, pid = set(), os.getpid()
        while pid > 1 and pid not in pids:
            pids.add(pid)
            stat = self.read(f"/proc/{pid}/stat")
            if stat is None:
                pids.add(os.getppid())
                break
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        return pids

    def governors(self) -> list[str]:
        found = (
            self.read(str(p))
            for p in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor")
        )
        return sorted({g.strip() for g in found if g is not None})

    def environ(self) -> dict[str, str]:
        return dict(os.environ)

    def version(self, package: str) -> str | None:
        """An installed distribution's version (MLX's), or None."""
        from importlib import metadata  # noqa: PLC0415  (25 modules: only where asked)

        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return None
