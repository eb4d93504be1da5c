"""The health check: macOS checks against recorded outputs, Linux checks on this machine and on
recorded files."""

import json

import pytest

from mlagate.machine import health
from tests.conftest import FIXTURES, cli

REC = FIXTURES / "health"


class Recorded(health.System):
    """A machine replayed from recorded outputs: command line or path -> fixture file (None: the
    command is missing)."""

    def __init__(self, sysname, outputs, cpus=12, governors=()):
        self.sysname, self.outputs, self.cpus, self._governors = (
            sysname,
            outputs,
            cpus,
            list(governors),
        )

    def _get(self, key):
        name = self.outputs.get(key)
        return None if name is None else (REC / name).read_text()

    def run(self, *argv):
        return self._get(" ".join(argv))

    def read(self, path):
        return self._get(path)

    def cpu_count(self):
        return self.cpus

    def own_pids(self):
        return {790}

    def governors(self):
        return self._governors


PS = "ps -A -o pid= -o args="
DISPLAYS = "system_profiler SPDisplaysDataType"


def mac(**override):
    outputs = {
        "pmset -g batt": "pmset-batt-ac.txt",
        "pmset -g": "pmset-g-lowpower-off.txt",
        "pmset -g therm": "pmset-therm-nominal.txt",
        "vm_stat": "vm_stat-ok.txt",
        "sysctl -n hw.memsize": "sysctl-memsize.txt",
        PS: "ps-clean.txt",
        DISPLAYS: "system_profiler-displays-m2max.txt",
    }
    outputs.update(override)
    return Recorded("Darwin", outputs)


def _by_name(report):
    return {c.name: c for c in report.checks}


def test_a_fit_mac_passes_every_check():
    report = health.check(mac(), performance=True, backend="metal")
    checks = _by_name(report)
    assert report.exit_code == 0, report.text()
    assert [c.status for c in report.checks] == ["ok"] * 6
    assert checks["power"].detail == "drawing from AC Power"
    assert checks["metal"].detail == "Apple M2 Max: Metal Support Metal 3"
    assert checks["memory"].detail.startswith("21.9 GiB available of 64.0 GiB")
    assert report.text().splitlines()[-1] == "fit: 6 ok, 0 warnings, 0 not readable"


@pytest.mark.parametrize(
    "override, name, reason",
    [
        ({"pmset -g batt": "pmset-batt-battery.txt"}, "power", "drawing from Battery Power"),
        ({"pmset -g": "pmset-g-lowpower-on.txt"}, "low-power-mode", "Low Power Mode on"),
        ({"pmset -g therm": "pmset-therm-throttled.txt"}, "thermal", "CPU speed limited to 62 %"),
        ({"pmset -g therm": "pmset-therm-warning.txt"}, "thermal", "thermal warning level 2"),
        ({"vm_stat": "vm_stat-low.txt"}, "memory", "0.4 GiB available of 64.0 GiB (need 16)"),
        (
            {PS: "ps-busy.txt"},
            "mlx-processes",
            "2 other MLX processes: 812 /opt/homebrew/bin/python3 -m mlx_lm.server",
        ),
        ({DISPLAYS: "system_profiler-displays-none.txt"}, "metal", "no Metal device"),
    ],
)
def test_each_unfit_state_fails_a_performance_runner_with_one_clear_line(override, name, reason):
    report = health.check(mac(**override), performance=True, backend="metal")
    assert report.exit_code == 1
    assert [c.name for c in report.failed] == [name]
    line = next(x for x in report.text().splitlines() if x.startswith("FAIL"))
    assert line.split()[1] == name and reason in line, line
    assert report.text().splitlines()[-1] == f"unfit: {name}"


def test_a_correctness_runner_only_warns_on_what_skews_timings():
    report = health.check(
        mac(
            **{
                "pmset -g batt": "pmset-batt-battery.txt",
                "pmset -g therm": "pmset-therm-throttled.txt",
                PS: "ps-busy.txt",
            }
        ),
        performance=False,
        backend="metal",
    )
    assert report.exit_code == 0
    assert {c.name for c in report.checks if c.status == "warn"} == {
        "power",
        "thermal",
        "mlx-processes",
    }
    assert (
        health.check(
            mac(**{DISPLAYS: "system_profiler-displays-none.txt"}), backend="metal"
        ).exit_code
        == 1
    )


def test_what_cannot_be_read_is_skipped_never_ok():
    report = health.check(
        mac(**{"pmset -g": "pmset-g-no-lowpower.txt", "pmset -g therm": None}),
        performance=False,
        backend="metal",
    )
    checks = _by_name(report)
    assert checks["low-power-mode"].status == "skip" and checks["thermal"].status == "skip"
    assert report.text().splitlines()[-1] == "fit: 4 ok, 0 warnings, 2 not readable"
    strict = health.check(
        mac(**{"pmset -g": "pmset-g-no-lowpower.txt", "pmset -g therm": None}),
        performance=True,
        backend="metal",
    )
    checks = _by_name(strict)
    assert (
        strict.exit_code == 1
        and checks["thermal"].status == "fail"
        and "could not be read" in checks["thermal"].detail
    )
    assert checks["low-power-mode"].status == "skip", (
        "an older macOS without the setting stays a skip"
    )
    assert (
        health.check(
            mac(**{"pmset -g batt": "pmset-batt-desktop.txt"}), performance=True, backend="metal"
        ).exit_code
        == 0
    )


def test_parsers_on_recorded_outputs():
    assert health.parse_power((REC / "pmset-batt-battery.txt").read_text()) == "Battery Power"
    assert health.parse_low_power((REC / "pmset-g-lowpower-on.txt").read_text()) is True
    assert health.parse_low_power((REC / "pmset-g-no-lowpower.txt").read_text()) is None
    assert health.parse_thermal((REC / "pmset-therm-nominal.txt").read_text())[0] is True
    assert (
        health.parse_vm_stat((REC / "vm_stat-ok.txt").read_text())
        == (823456 + 600000 + 12345) * 16384
    )
    assert health.parse_meminfo((REC / "meminfo.txt").read_text()) == (
        19876512 * 1024,
        24598192 * 1024,
    )
    assert health.parse_nvidia((REC / "nvidia-smi-gpu.txt").read_text())[0]["name"] == "NVIDIA H200"
    assert (
        health.parse_nvidia("NVIDIA H200, [N/A], 143771, [N/A], 0x0")[0]["used_mib"] == "[N/A]"
    ), "unreadable fields stay as printed"
    assert health.mlx_processes((REC / "ps-busy.txt").read_text(), {900}) == [
        (
            812,
            "/opt/homebrew/bin/python3 -m mlx_lm.server --model mlx-community/GLM-4.7-Flash-4bit "
            "--port 8080",
        )
    ]


def linux(**override):
    outputs = {
        "/proc/loadavg": "loadavg-idle.txt",
        "/proc/meminfo": "meminfo.txt",
        PS: "ps-clean.txt",
    }
    outputs.update(override)
    return Recorded("Linux", outputs, cpus=2)


def test_linux_checks_on_recorded_files():
    assert health.check(linux(), performance=True).exit_code == 0
    busy = health.check(linux(**{"/proc/loadavg": "loadavg-busy.txt"}), performance=True)
    assert [c.name for c in busy.failed] == [
        "load"
    ] and "1-minute load 3.90 on 2 CPUs (at most 1)" in busy.text()
    assert (
        health.check(linux(**{"/proc/loadavg": "loadavg-busy.txt"})).exit_code == 0
    )  # a warning for correctness
    cuda = (
        "nvidia-smi "
        "--query-gpu=name,memory.used,memory.total,temperature.gpu,clocks_throttle_reasons.active "
        "--format=csv,noheader,nounits"
    )
    apps = "nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader"
    assert [c.name for c in health.check(linux(), backend="cuda").failed] == ["cuda"]
    shared = health.check(
        linux(**{cuda: "nvidia-smi-gpu.txt", apps: "nvidia-smi-apps-busy.txt"}),
        performance=True,
        backend="cuda",
    )
    assert [c.name for c in shared.failed] == ["gpu-processes"] and "NVIDIA H200" in shared.text()
    gov = health.check(
        Recorded("Linux", linux().outputs, cpus=2, governors=["powersave"]), performance=True
    )
    assert _by_name(gov)["cpu-governor"].status == "warn"


def test_health_runs_on_this_machine_and_reports_its_findings(tmp_path):
    proc = cli("health", "--format", "json")
    data = json.loads(proc.stdout)
    names = [c["name"] for c in data["checks"]]
    assert data["system"] == "Linux" and names[:3] == ["load", "memory", "mlx-processes"], (
        proc.stdout
    )
    assert proc.returncode == (0 if data["fit"] else 1)
    text = cli("health", "--min-free-gb", "100000")
    assert text.returncode == 1
    assert any(
        line.startswith("FAIL  memory") and "(need 100000)" in line
        for line in text.stdout.splitlines()
    ), text.stdout
    assert (
        text.stdout.splitlines()[-1].startswith("unfit: ")
        and "memory" in text.stdout.splitlines()[-1]
    )


def test_a_backend_the_platform_cannot_have_fails():
    assert [c.name for c in health.check(linux(), backend="metal").failed] == ["metal"]
    assert "cuda" in [c.name for c in health.check(mac(), backend="cuda").failed]
