"""Runner health: is this machine fit to run the gate now? One check per concern, each with a
reason.

macOS: on AC power, Low Power Mode off, thermal state nominal, free memory, no other MLX
process, a Metal device. Linux: load, free memory, no other MLX process, the CPU frequency
governor (when readable) and, when the cuda backend is expected, the NVIDIA GPU (nvidia-smi)
with no other compute process on it. A performance runner fails on what would skew timings
(battery, throttling, load, another MLX process); a correctness runner only warns on those.

The parsers (mlagate.machine.healthparse) are pure functions over the commands' text, so recorded
outputs test them.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field

from mlagate import backends
from mlagate.machine import classes
from mlagate.machine.healthparse import MLX_PROCESS as MLX_PROCESS
from mlagate.machine.healthparse import (
    mlx_processes,
    parse_low_power,
    parse_meminfo,
    parse_memsize,
    parse_metal,
    parse_nvidia,
    parse_power,
    parse_thermal,
    parse_vm_stat,
)
from mlagate.machine.system import Check as Check
from mlagate.machine.system import System as System
from mlagate.worker import blas

GIB = 1024**3


@dataclass
class Report:
    system: str
    performance: bool
    backend: str
    checks: list[Check] = field(default_factory=list)
    machine_class: classes.MachineClass | None = None

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    def text(self) -> str:
        role = "performance runner" if self.performance else "correctness runner"
        lines = [f"mlagate health: {self.system}, {role}, backend {self.backend}"]
        if self.machine_class is not None:
            mc = self.machine_class
            lines.append(f"machine class {mc.id}: {mc.describe()}")
        lines += [
            f"{c.status.upper() if c.status == 'fail' else c.status:5} {c.name:14} {c.detail}"
            for c in self.checks
        ]
        if self.failed:
            lines.append(f"unfit: {', '.join(c.name for c in self.failed)}")
        else:
            lines.append(
                f"fit: {sum(c.status == 'ok' for c in self.checks)} ok, "
                f"{sum(c.status == 'warn' for c in self.checks)} warnings, "
                f"{sum(c.status == 'skip' for c in self.checks)} not readable"
            )
        return "\n".join(lines)

    def record(self, override: bool = False) -> dict:
        """What every performance result records of this check (mlagate.result/2 `health`):
        fit, the failed checks, and whether the run overrode an unfit machine."""
        return {
            "fit": not self.failed,
            "failed": [{"name": c.name, "detail": c.detail} for c in self.failed],
            "override": bool(override and self.failed),
        }

    def json(self) -> str:
        return json.dumps(
            {
                "schema": "mlagate.health/1",
                "system": self.system,
                "performance": self.performance,
                "backend": self.backend,
                "fit": not self.failed,
                "machine_class": self.machine_class and self.machine_class.to_json(),
                "checks": [asdict(c) for c in self.checks],
            },
            indent=1,
        )


# --- checks --------------------------------------------------------------------------


def _strict(performance: bool) -> str:
    return "fail" if performance else "warn"


def _memory(available: int | None, total: int | None, need_gb: float) -> Check:
    if available is None:
        return Check("memory", "skip", "free memory not readable")
    text = (
        f"{available / GIB:.1f} GiB available"
        + (f" of {total / GIB:.1f} GiB" if total else "")
        + f" (need {need_gb:g})"
    )
    return Check("memory", "ok" if available >= need_gb * GIB else "fail", text)


def _processes(system: System, performance: bool) -> Check:
    ps = system.run("ps", "-A", "-o", "pid=", "-o", "args=")
    if ps is None:
        return Check("mlx-processes", "skip", "ps did not run")
    others = mlx_processes(ps, system.own_pids())
    if not others:
        return Check("mlx-processes", "ok", "no other MLX process")
    listed = "; ".join(f"{pid} {args}" for pid, args in others[:3]) + (
        f" (+{len(others) - 3} more)" if len(others) > 3 else ""
    )
    return Check(
        "mlx-processes", _strict(performance), f"{len(others)} other MLX processes: {listed}"
    )


def check_macos(system: System, performance: bool, backend: str, need_gb: float) -> list[Check]:
    checks = []
    batt = system.run("pmset", "-g", "batt")
    source = parse_power(batt) if batt is not None else None
    if source is None:
        checks.append(Check("power", "skip", "pmset -g batt gave no power source"))
    else:
        checks.append(
            Check(
                "power",
                "ok" if source == "AC Power" else _strict(performance),
                f"drawing from {source}",
            )
        )
    settings = system.run("pmset", "-g")
    low = parse_low_power(settings) if settings is not None else None
    if low is None:
        checks.append(Check("low-power-mode", "skip", "pmset -g has no lowpowermode line"))
    else:
        checks.append(
            Check(
                "low-power-mode",
                _strict(performance) if low else "ok",
                "Low Power Mode on" if low else "Low Power Mode off",
            )
        )
    therm = system.run("pmset", "-g", "therm")
    if therm is None:
        checks.append(Check("thermal", "skip", "pmset -g therm did not run"))
    else:
        nominal, detail = parse_thermal(therm)
        checks.append(Check("thermal", "ok" if nominal else _strict(performance), detail))
    vm = system.run("vm_stat")
    memsize = system.run("sysctl", "-n", "hw.memsize")
    checks.append(
        _memory(
            parse_vm_stat(vm) if vm else None, parse_memsize(memsize) if memsize else None, need_gb
        )
    )
    checks.append(_processes(system, performance))
    return checks + _backend(system, performance, backend)


def check_linux(system: System, performance: bool, backend: str, need_gb: float) -> list[Check]:
    checks = [_load(system, performance)]
    meminfo = system.read("/proc/meminfo")
    mem = parse_meminfo(meminfo) if meminfo else None
    checks.append(_memory(mem[0] if mem else None, mem[1] if mem else None, need_gb))
    checks.append(_processes(system, performance))
    checks.append(_governor(system))
    return checks + _backend(system, performance, backend)


def _backend(system: System, performance: bool, backend: str) -> list[Check]:
    """The expected backend's own checks on this platform (its record in mlagate.backends), or
    one failure where it does not run."""
    record = backends.REGISTRY.get(backend)
    if record is None:
        return []
    platform = system.sysname.lower()
    if platform not in record.platforms:
        return [Check(backend, "fail", f"backend {backend} expected, but {record.only_on}")]
    checks = record.health.get(platform, ())
    return [c for name in checks for c in BACKEND[name](system, performance)]


def _metal(system: System, performance: bool) -> list[Check]:
    displays = system.run("system_profiler", "SPDisplaysDataType")
    metal = parse_metal(displays) if displays is not None else None
    detail = metal or "no Metal device in system_profiler SPDisplaysDataType"
    return [Check("metal", "ok" if metal else "fail", detail)]


def _blas(env: dict[str, str]) -> Check:
    """The BLAS the workers will preload (mlagate.worker.blas), named with its source: MLX's own
    reference BLAS is about 20x slower in matmuls, so it only ever warns; a choice that cannot be
    had fails."""
    try:
        chosen = blas.choose(env)
    except blas.BlasChoiceError as exc:
        return Check("blas", "fail", str(exc))
    if chosen is not None:
        return Check("blas", "ok", f"preloads {chosen.describe()}")
    if blas.BLAS_ENV in env or "LD_PRELOAD" in env:
        return Check("blas", "ok", "as LD_PRELOAD or MLAGATE_BLAS say")
    return Check(
        "blas",
        "warn",
        "MLX's reference BLAS (install mlagate with its cpu extra on Linux x86_64, or the "
        "system's OpenBLAS)",
    )


def _load(system: System, performance: bool) -> Check:
    """The 1-minute load average against half the CPUs."""
    loadavg = system.read("/proc/loadavg")
    cpus = system.cpu_count()
    if loadavg is None:
        return Check("load", "skip", "/proc/loadavg not readable")
    load = float(loadavg.split()[0])
    limit = 0.5 * cpus
    return Check(
        "load",
        "ok" if load <= limit else _strict(performance),
        f"1-minute load {load:.2f} on {cpus} CPUs (at most {limit:g})",
    )


def _governor(system: System) -> Check:
    """The CPU frequency governor: performance is steadier for timings (only ever a warning)."""
    governors = system.governors()
    if not governors:
        return Check(
            "cpu-governor",
            "skip",
            "no cpufreq governor readable (virtual machine or container)",
        )
    fine = governors == ["performance"]
    return Check(
        "cpu-governor",
        "ok" if fine else "warn",
        f"scaling governor {', '.join(governors)}"
        + ("" if fine else " (performance is steadier for timings)"),
    )


def _cuda(system: System, performance: bool) -> list[Check]:
    """The NVIDIA GPUs nvidia-smi lists and, when there is one, the other compute processes on
    it."""
    query = system.run(
        "nvidia-smi",
        "--query-gpu=name,memory.used,memory.total,temperature.gpu,clocks_throttle_reasons.active",
        "--format=csv,noheader,nounits",
    )
    gpus = parse_nvidia(query) if query else []
    if not gpus:
        return [Check("cuda", "fail", "backend cuda expected, but nvidia-smi lists no GPU")]
    listed = "; ".join(
        f"{g['name']} {g['used_mib']}/{g['total_mib']} MiB used, {g['temp_c']} C" for g in gpus
    )
    return [Check("cuda", "ok", listed), _gpu_processes(system, performance)]


def _gpu_processes(system: System, performance: bool) -> Check:
    apps = system.run(
        "nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader"
    )
    others = [line.strip() for line in (apps or "").splitlines() if line.strip()]
    if apps is None:
        return Check("gpu-processes", "skip", "nvidia-smi could not list compute processes")
    return Check(
        "gpu-processes",
        "ok" if not others else _strict(performance),
        "no compute process on the GPU"
        if not others
        else f"compute processes: {'; '.join(others[:3])}",
    )


BACKEND = {  # the checks a backend's record names (mlagate.backends.Backend.health)
    "blas": lambda system, performance: [_blas(dict(os.environ))],
    "metal": _metal,
    "cuda": _cuda,
}
MUST_READ_FOR_PERFORMANCE = ("power", "thermal", "memory", "mlx-processes", "gpu-processes")


def check(
    system: System,
    performance: bool = False,
    backend: str = "cpu",
    min_free_gb: float | None = None,
    expect: tuple[str, str | None] | None = None,
    machine_class: classes.MachineClass | None = None,
) -> Report:
    """Run every check of this system; a performance runner gets the strict ones. expect: a
    runner's label and the machine class the matrix says it has (checked against this one's,
    machine_class when already known)."""
    need = min_free_gb if min_free_gb is not None else (16.0 if performance else 8.0)
    found = machine_class or classes.of(system, backend)
    if system.sysname == "Darwin":
        checks = check_macos(system, performance, backend, need)
    elif system.sysname == "Linux":
        checks = check_linux(system, performance, backend, need)
    else:
        checks = [Check("system", "fail", f"no health checks for {system.sysname}")]
    if (
        performance
    ):  # timings from a machine whose power, heat, memory or other load is unknown are not taken
        checks = [
            Check(
                c.name,
                "fail",
                f"could not be read, and a performance runner must show it: {c.detail}",
            )
            if c.status == "skip" and c.name in MUST_READ_FOR_PERFORMANCE
            else c
            for c in checks
        ]
    mismatch = classes.expected(found, *expect, performance) if expect else None
    if mismatch is not None:
        checks.append(mismatch)
    return Report(system.sysname, performance, backend, checks, found)


def settled(
    system: System,
    backend: str,
    wait_s: float,
    on_wait=None,
    sleep=time.sleep,
    clock=time.monotonic,
    expect: tuple[str, str | None] | None = None,
) -> Report:
    """The performance checks, waiting up to wait_s while the load check is the only one that
    fails. A 1-minute load average still carries the last minute's work (the previous job's,
    or a command just before this one); on a machine that is otherwise idle it decays below
    the limit within a minute or two, and timings taken then are not the previous job's.
    on_wait(check) is called once, when the waiting starts; expect as for check."""
    deadline = clock() + wait_s
    waited, found = False, classes.of(system, backend)
    while True:
        report = check(system, True, backend, expect=expect, machine_class=found)
        if [c.name for c in report.failed] != ["load"] or clock() >= deadline:
            return report
        if not waited and on_wait is not None:
            on_wait(report.failed[0])
        waited = True
        sleep(min(5.0, max(0.0, deadline - clock())))
