"""Runner health's parsers: pure functions over the text of the commands and files the checks
read (pmset, vm_stat, sysctl, /proc/meminfo, system_profiler, ps, nvidia-smi), so recorded
outputs test them. mlagate.machine.health runs the commands and turns these into checks.
"""

from __future__ import annotations

import re

MLX_PROCESS = re.compile(r"(\bmlx[_.-]?(lm|vlm)\b|\bmlagate\.worker\b|-m mlx\b|\bimport mlx\b)")


def parse_power(pmset_batt: str) -> str | None:
    """'AC Power', 'Battery Power' or 'UPS Power' from `pmset -g batt`."""
    m = re.search(r"drawing from '([^']+)'", pmset_batt)
    return m.group(1) if m else None


def parse_low_power(pmset_g: str) -> bool | None:
    """Low Power Mode from `pmset -g` (the lowpowermode line; absent on older macOS)."""
    m = re.search(r"^\s*lowpowermode\s+(\d+)", pmset_g, re.MULTILINE)
    return None if m is None else m.group(1) != "0"


def parse_thermal(pmset_therm: str) -> tuple[bool, str]:
    """(nominal, detail) from `pmset -g therm`: a recorded warning level above 0 or a CPU speed
    limit below 100 is not nominal."""
    problems = []
    for line in pmset_therm.splitlines():
        m = re.search(r"(thermal|performance) warning level\D*(\d+)", line, re.IGNORECASE)
        if (
            m
            and not re.search(r"\bno (thermal|performance) warning level", line, re.IGNORECASE)
            and int(m.group(2)) > 0
        ):
            problems.append(f"{m.group(1).lower()} warning level {m.group(2)}")
    m = re.search(r"CPU_Speed_Limit\s*=\s*(\d+)", pmset_therm)
    if m and int(m.group(1)) < 100:
        problems.append(f"CPU speed limited to {m.group(1)} %")
    return (
        not problems,
        "; ".join(problems) or "no thermal or performance warning, CPU speed not limited",
    )


def parse_vm_stat(vm_stat: str) -> int | None:
    """Available bytes from `vm_stat`: free + inactive + speculative pages (what macOS can hand out
    without swapping)."""
    size = re.search(r"page size of (\d+) bytes", vm_stat)
    if size is None:
        return None
    pages = dict(
        re.findall(r"^Pages (free|inactive|speculative):\s+(\d+)\.", vm_stat, re.MULTILINE)
    )
    if "free" not in pages:
        return None
    return sum(int(v) for v in pages.values()) * int(size.group(1))


def parse_memsize(sysctl: str) -> int | None:
    m = re.search(r"(\d+)", sysctl)
    return int(m.group(1)) if m else None


def parse_meminfo(meminfo: str) -> tuple[int, int] | None:
    """(available, total) bytes from /proc/meminfo."""
    values = {
        k: int(v) * 1024
        for k, v in re.findall(r"^(MemAvailable|MemTotal):\s+(\d+) kB", meminfo, re.MULTILINE)
    }
    if "MemAvailable" not in values or "MemTotal" not in values:
        return None
    return values["MemAvailable"], values["MemTotal"]


def parse_metal(displays: str) -> str | None:
    """The Metal support line of `system_profiler SPDisplaysDataType` (None: no Metal device)."""
    m = re.search(r"^\s*(Metal(?: Support| Family)?):\s*(.+)$", displays, re.MULTILINE)
    if m is None or "not supported" in m.group(2).lower():
        return None
    chip = re.search(r"^\s*Chipset Model:\s*(.+)$", displays, re.MULTILINE)
    return f"{chip.group(1).strip() if chip else 'GPU'}: {m.group(1)} {m.group(2).strip()}"


def mlx_processes(ps: str, exclude: set[int]) -> list[tuple[int, str]]:
    """Processes of `ps -A -o pid= -o args=` that run MLX or an mlagate worker, except the excluded
    pids."""
    found = []
    for line in ps.splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) != 2 or not parts[0].isdigit():
            continue
        pid, args = int(parts[0]), parts[1]
        if pid in exclude or "mlagate health" in args or "mlagate.machine.health" in args:
            continue
        if MLX_PROCESS.search(args):
            found.append((pid, args[:120]))
    return found


def parse_nvidia(query: str) -> list[dict]:
    """GPUs from `nvidia-smi
    --query-gpu=name,memory.used,memory.total,temperature.gpu,clocks_throttle_reasons.active
    --format=csv,noheader,nounits`."""
    gpus = []
    for line in query.strip().splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) >= 5:
            gpus.append(
                {
                    "name": cols[0],
                    "used_mib": _number(cols[1]),
                    "total_mib": _number(cols[2]),
                    "temp_c": _number(cols[3]),
                    "throttle": cols[4],
                }
            )
    return gpus


def _number(field: str) -> int | str:
    """An nvidia-smi number, or the field as printed ("[N/A]", "[Not Supported]") when it is
    none."""
    try:
        return int(float(field))
    except ValueError:
        return field


def parse_gpu_cores(displays: str) -> int | None:
    """The GPU's core count from `system_profiler SPDisplaysDataType` (Apple Silicon)."""
    m = re.search(r"^\s*Total Number of Cores:\s*(\d+)", displays, re.MULTILINE)
    return int(m.group(1)) if m else None


def parse_gpu_name(displays: str) -> str | None:
    m = re.search(r"^\s*Chipset Model:\s*(.+)$", displays, re.MULTILINE)
    return m.group(1).strip() if m else None


def parse_cpu_model(cpuinfo: str) -> str | None:
    """The CPU model of /proc/cpuinfo (x86 `model name`, Arm `Hardware` or `cpu model`)."""
    m = re.search(r"^(?:model name|hardware|cpu model)\s*:\s*(.+)$", cpuinfo, re.M | re.I)
    return m.group(1).strip() if m else None


def parse_os_release(os_release: str) -> str | None:
    """`ID VERSION_ID` of /etc/os-release (`debian 12`, `ubuntu 24.04`)."""
    fields = dict(re.findall(r"^(ID|VERSION_ID)=\"?([^\"\n]*)\"?$", os_release, re.MULTILINE))
    return " ".join(fields[k] for k in ("ID", "VERSION_ID") if fields.get(k)) or None
