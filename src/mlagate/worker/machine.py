"""Facts about this machine: CPU model, cores, memory and load (stdlib only: workers import it).

A run writes OUT/machine.json with the facts at its start and its end; a worker's fingerprint
carries the fixed ones (CPU model, cores, memory).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path

from mlagate.worker import blas

SCHEMA = "mlagate.machine/1"
FILE = "machine.json"


def _sysctl(name: str) -> str | None:
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _sysctl("machdep.cpu.brand_string") or platform.processor() or platform.machine()


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except (OSError, ValueError, IndexError):
        pass
    size = _sysctl("hw.memsize")
    return round(int(size) / 1024**3, 1) if size and size.isdigit() else None


def fixed() -> dict:
    """What does not change during a run: for the fingerprint (in a worker computing with
    OpenBLAS, also its build: version, core type, threads)."""
    facts = {"cpu_model": cpu_model(), "cores": os.cpu_count(), "memory_gib": memory_gib()}
    built = blas.build()
    return facts | ({"blas_build": built} if built else {})


def load() -> dict:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return {"load_1m": None}
    return {
        "load_1m": round(one, 2),
        "load_5m": round(five, 2),
        "load_15m": round(fifteen, 2),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def record(out: Path, when: str, earlier: dict | None = None) -> dict:
    """Write OUT/machine.json: the fixed facts and the load at `when` (start or end), added to
    what record returned at the start (earlier); the file is read only by mlagate.documents."""
    path = Path(out) / FILE
    data = dict(earlier) if earlier else {"schema": SCHEMA, **fixed()}
    data[when] = load()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, path)
    return data
