"""Machine classes: the machines whose timings stand for one another.

A machine's class is what a timing depends on of the machine it was taken on: the chip (Apple
Silicon) or CPU model and its CPU cores, the GPU and its cores where known, the memory (whole
GiB), the OS (name and major version), MLX's version and backend, and the BLAS the workers load.
Its id, `mc-` and 12 hex digits of the parts' sha256, is the same on every machine with the same
parts, whatever its host name or machine id: a performance result is reused only within its
class (mlagate.gate.reuse.keys), and a runner of the matrix may
name the class it expects (`machine_class:`; `mlagate health` and `mlagate run` report a
mismatch).

A host is one machine serving a runner: named by $RUNNER_NAME (the GitHub Actions runner's
name), else by its host name. Results record the host and class that measured them (`machine`);
neither enters a correctness key.
"""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import dataclass
from pathlib import Path

from mlagate.machine.healthparse import (
    parse_cpu_model,
    parse_gpu_cores,
    parse_gpu_name,
    parse_meminfo,
    parse_memsize,
    parse_os_release,
)
from mlagate.machine.system import Check, System
from mlagate.worker import blas

HOST_ENV = "RUNNER_NAME"  # set by the GitHub Actions runner
GIB = 1024**3
PARTS = ("chip", "cpu_cores", "gpu", "gpu_cores", "memory_gib", "os", "mlx", "backend", "blas")


@dataclass(frozen=True)
class MachineClass:
    id: str
    parts: dict  # PARTS: name -> value (None: not readable here)

    @classmethod
    def of_parts(cls, parts: dict) -> MachineClass:
        text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
        return cls("mc-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12], dict(parts))

    def describe(self) -> str:
        return describe(self.parts)

    def to_json(self) -> dict:
        return {"id": self.id, "parts": dict(self.parts)}


def describe(parts: dict) -> str:
    """The parts in one line: `Apple M2 Max, 12 CPU cores, GPU Apple M2 Max (38 cores), 64 GiB,
    macOS 14, MLX 0.29.1 metal, BLAS accelerate`; an unreadable part is left out."""
    p = parts
    gpu = p.get("gpu") and "GPU " + p["gpu"] + (
        f" ({p['gpu_cores']} cores)" if p.get("gpu_cores") else ""
    )
    said = [
        p.get("chip"),
        p.get("cpu_cores") and f"{p['cpu_cores']} CPU cores",
        gpu,
        p.get("memory_gib") and f"{p['memory_gib']} GiB",
        p.get("os"),
        f"MLX {p.get('mlx') or 'not installed'} {p.get('backend')}",
        p.get("blas") and f"BLAS {p['blas']}",
    ]
    return ", ".join(s for s in said if s)


def _first_line(text: str | None) -> str | None:
    line = (text or "").strip().splitlines()
    return line[0].strip() or None if line else None


def _mac(system: System) -> dict:
    displays = system.run("system_profiler", "SPDisplaysDataType") or ""
    memsize = system.run("sysctl", "-n", "hw.memsize")
    version = _first_line(system.run("sw_vers", "-productVersion"))
    return {
        "chip": _first_line(system.run("sysctl", "-n", "machdep.cpu.brand_string")),
        "gpu": parse_gpu_name(displays),
        "gpu_cores": parse_gpu_cores(displays),
        "total": parse_memsize(memsize) if memsize else None,
        "os": f"macOS {version.split('.')[0]}" if version else None,
    }


def _linux(system: System, backend: str) -> dict:
    cpuinfo, meminfo = system.read("/proc/cpuinfo"), system.read("/proc/meminfo")
    release = system.read("/etc/os-release")
    distro = parse_os_release(release) if release else None
    gpus = None
    if backend == "cuda":
        names = system.run("nvidia-smi", "--query-gpu=name", "--format=csv,noheader") or ""
        found = [n.strip() for n in names.splitlines() if n.strip()]
        gpus = f"{len(found)} x {found[0]}" if len(set(found)) == 1 else ", ".join(found) or None
    mem = parse_meminfo(meminfo) if meminfo else None
    return {
        "chip": parse_cpu_model(cpuinfo) if cpuinfo else None,
        "gpu": gpus,
        "gpu_cores": None,
        "total": mem[1] if mem else None,
        "os": f"Linux {distro}" if distro else system.sysname,
    }


def blas_name(system: System) -> str:
    """The BLAS a worker computes with here (mlagate.worker.blas's choice), by file name."""
    if system.sysname == "Darwin":
        return "accelerate"
    env = system.environ()
    try:
        chosen = blas.choose(env, "linux")
    except blas.BlasChoiceError:
        return "unusable"  # the run refuses to start its workers (mlagate health says why)
    if chosen is not None:
        return f"{chosen.source} {Path(chosen.origin or chosen.path).name}"
    preloaded = [Path(p).name for p in env.get("LD_PRELOAD", "").split() if p]
    return f"preloaded {' '.join(preloaded)}" if preloaded else "reference"


def of(system: System, backend: str) -> MachineClass:
    """This machine's class, for a run on `backend`."""
    facts = _mac(system) if system.sysname == "Darwin" else _linux(system, backend)
    total = facts.pop("total")
    return MachineClass.of_parts(
        {
            "chip": facts["chip"],
            "cpu_cores": system.cpu_count(),
            "gpu": facts["gpu"],
            "gpu_cores": facts["gpu_cores"],
            "memory_gib": round(total / GIB) if total else None,
            "os": facts["os"],
            "mlx": system.version("mlx"),
            "backend": backend,
            "blas": blas_name(system),
        }
    )


def host(env: dict[str, str]) -> str:
    """This host's name: $RUNNER_NAME, else the host name."""
    return env.get(HOST_ENV) or platform.node() or "unnamed"


def record(found: MachineClass, env: dict[str, str]) -> dict:
    """What a result records of the machine that measured it (mlagate.result/4 `host` and
    `machine_class`)."""
    return {"host": host(env), "machine_class": found.to_json()}


def expected(found: MachineClass, runner: str, wanted: str | None, performance: bool):
    """The check of a runner's `machine_class:` against this machine's (None: it names none).
    A mismatch fails a performance runner (its timings would stand for a class the matrix does
    not expect there) and warns a correctness runner (correctness keys hold no class)."""
    if wanted is None:
        return None
    if found.id == wanted:
        return Check("machine-class", "ok", f"{found.id}, as runner {runner} expects")
    return Check(
        "machine-class",
        "fail" if performance else "warn",
        f"this machine is {found.id} ({found.describe()}), but runner {runner} expects "
        f"{wanted} (runners.{runner}.machine_class)",
    )
