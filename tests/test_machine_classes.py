"""Machine classes (mlagate.machine.classes): one id for machines of the same parts, another for
any part that differs; a runner's expected class checked by mlagate health."""

import json
import shutil

import pytest

from mlagate.machine import classes, health
from mlagate.matrix import MatrixError, load
from tests.conftest import cli
from tests.test_health import DISPLAYS, Recorded, linux, mac

CPUINFO = {"/proc/cpuinfo": "cpuinfo-xeon.txt", "/etc/os-release": "os-release-debian12.txt"}
MAC_CLASS = {
    "sysctl -n machdep.cpu.brand_string": "sysctl-brand-m2max.txt",
    "sw_vers -productVersion": "sw_vers-14.5.txt",
}


class Host(Recorded):
    """A recorded machine with its own environment (host name, BLAS choice) and MLX version."""

    def __init__(self, base, env=None, mlx="0.29.1"):
        super().__init__(base.sysname, base.outputs, base.cpus, base._governors)
        self.env, self.mlx = dict(env or {}), mlx

    def environ(self):
        return dict(self.env)

    def version(self, package):
        return self.mlx if package == "mlx" else None


def m2max(**override):
    return Host(mac(**{**MAC_CLASS, **override}), {"RUNNER_NAME": "mac-a"})


def test_a_mac_class_from_recorded_outputs():
    found = classes.of(m2max(), "metal")
    assert found.parts == {
        "chip": "Apple M2 Max",
        "cpu_cores": 12,
        "gpu": "Apple M2 Max",
        "gpu_cores": 38,
        "memory_gib": 64,
        "os": "macOS 14",
        "mlx": "0.29.1",
        "backend": "metal",
        "blas": "accelerate",
    }
    assert classes.MachineClass.of_parts(found.parts) == found
    assert found.describe() == (
        "Apple M2 Max, 12 CPU cores, GPU Apple M2 Max (38 cores), 64 GiB, macOS 14, "
        "MLX 0.29.1 metal, BLAS accelerate"
    )


def test_the_same_parts_on_another_host_are_the_same_class():
    a = classes.of(m2max(), "metal")
    b = classes.of(Host(mac(**MAC_CLASS), {"RUNNER_NAME": "mac-b"}), "metal")
    minor = classes.of(m2max(**{"sw_vers -productVersion": "sw_vers-14.6.1.txt"}), "metal")
    assert a.id == b.id == minor.id  # host names and minor OS updates are no part of it
    assert classes.record(a, {"RUNNER_NAME": "mac-a"})["host"] == "mac-a"
    assert classes.record(b, {"RUNNER_NAME": "mac-b"}) | {"host": "mac-a"} == classes.record(
        a, {"RUNNER_NAME": "mac-a"}
    )


@pytest.mark.parametrize(
    "change",
    [
        {"outputs": {DISPLAYS: "system_profiler-displays-m2max-30.txt"}},  # GPU cores
        {"outputs": {"sw_vers -productVersion": "sw_vers-15.1.txt"}},  # OS major version
        {"mlx": "0.30.0"},
        {"backend": "cpu"},
        {"cpus": 8},
    ],
    ids=["gpu-cores", "os", "mlx", "backend", "cpu-cores"],
)
def test_each_part_that_differs_makes_another_class(change):
    base = classes.of(m2max(), "metal")
    host = m2max(**change.get("outputs", {}))
    host.mlx = change.get("mlx", host.mlx)
    host.cpus = change.get("cpus", host.cpus)
    other = classes.of(host, change.get("backend", "metal"))
    assert other.id != base.id, other.parts


def test_a_linux_class_names_its_cpu_os_and_blas():
    host = Host(linux(**CPUINFO), {"MLAGATE_BLAS": "reference"})
    found = classes.of(host, "cpu")
    assert found.parts["chip"] == "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"
    assert found.parts["os"] == "Linux debian 12" and found.parts["memory_gib"] == 23
    assert found.parts["blas"] == "reference" and found.parts["gpu"] is None
    preloaded = classes.of(Host(linux(**CPUINFO), {"LD_PRELOAD": "/opt/libmkl_rt.so"}), "cpu")
    assert preloaded.parts["blas"] == "preloaded libmkl_rt.so" and preloaded.id != found.id


def test_an_expected_class_that_differs_fails_a_performance_runner_and_warns_correctness():
    host = m2max()
    found = classes.of(host, "metal")
    other = "mc-" + "0" * 12
    perf = health.check(host, True, "metal", expect=("macos-metal", other))
    check = {c.name: c for c in perf.checks}["machine-class"]
    assert check.status == "fail" and [c.name for c in perf.failed] == ["machine-class"]
    assert f"this machine is {found.id}" in check.detail and f"expects {other}" in check.detail
    assert "runners.macos-metal.machine_class" in check.detail
    assert perf.record()["failed"][0]["name"] == "machine-class"  # its timings: invalid
    loose = health.check(host, False, "metal", expect=("macos-metal", other))
    assert loose.exit_code == 0 and {c.name: c.status for c in loose.checks}["machine-class"] == (
        "warn"
    )
    same = health.check(host, True, "metal", expect=("macos-metal", found.id))
    assert same.exit_code == 0 and f"machine class {found.id}: Apple M2 Max" in same.text()
    assert "machine-class" not in [c.name for c in health.check(host, True, "metal").checks]


def _with_class(fake_matrix, value):
    line = "    backend: cpu  # backend\n"
    text = fake_matrix.read_text().replace(line, f"{line}    machine_class: {value}\n")
    fake_matrix.write_text(text)
    return fake_matrix


@pytest.mark.parametrize("value", ["mc-12", "MC-0123456789ab", "m2max", "mc-0123456789abc"])
def test_a_malformed_machine_class_is_refused_naming_the_key(fake_matrix, value):
    with pytest.raises(MatrixError, match=r"runners\.linux-cpu\.machine_class: .*mc- and 12"):
        load(_with_class(fake_matrix, value))


def test_health_checks_the_class_its_runner_expects(fake_matrix):
    here = json.loads(cli("health", "--format", "json").stdout)["machine_class"]
    assert (
        load(_with_class(fake_matrix, here["id"])).runners["linux-cpu"].machine_class
        == (here["id"])
    )
    same = cli("health", "--runner", "linux-cpu", "--matrix", fake_matrix)
    assert f"ok    machine-class  {here['id']}, as runner linux-cpu expects" in same.stdout
    other = cli("health", "--runner", "linux-cpu", "--matrix", _with_class_replaced(fake_matrix))
    assert "warn  machine-class  this machine is" in other.stdout, other.stdout
    perf = cli("health", "--performance", "--runner", "linux-cpu", "--matrix", fake_matrix)
    assert "FAIL  machine-class" in perf.stdout and perf.returncode == 1
    bad = cli("health", "--runner", "nowhere", "--matrix", fake_matrix)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def _with_class_replaced(fake_matrix):
    text = fake_matrix.read_text()
    start = text.index("machine_class: ") + len("machine_class: ")
    fake_matrix.write_text(text[:start] + "mc-" + "0" * 12 + text[start + 15 :])
    return fake_matrix


def test_a_correctness_result_from_another_host_is_reused_naming_who_measured_it(
    fake_matrix, tmp_path
):
    store, runs = tmp_path / "store", {}
    for name in ("host-a", "host-b"):  # two hosts, two caches, one store
        env = {"RUNNER_NAME": name, "MLAGATE_CACHE": str(tmp_path / f"cache-{name}")}
        out = tmp_path / name
        proc = _cli_env(env, "run", "--matrix", fake_matrix, "--arm", "fake-stock", "--out", out,
                        "--reuse", store)  # fmt: skip
        assert proc.returncode in (0, 1), proc.stderr
        runs[name] = [json.loads(p.read_text()) for p in sorted((out / "results").glob("*.json"))]
    here = json.loads(cli("health", "--format", "json").stdout)["machine_class"]
    first = runs["host-a"]
    assert first and all(r["host"] == "host-a" and r["machine_class"] == here for r in first)
    reused = [r for r in runs["host-b"] if r.get("reused")]
    decided = [r for r in first if r["verdict"] in ("pass", "fail")]
    assert len(reused) == len(decided) > 0
    assert all(r["host"] == "host-a" and r["machine_class"]["id"] == here["id"] for r in reused)
    assert all(r["host"] == "host-b" for r in runs["host-b"] if not r.get("reused"))


def _cli_env(env, *args):
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "mlagate", *map(str, args)],
        capture_output=True, text=True, env={**os.environ, **env}, timeout=600,
    )  # fmt: skip


def test_a_performance_run_on_another_class_is_unfit_and_strict_refuses(capsys, tmp_path):
    from tests.conftest import FIXTURES

    host = Host(linux(**CPUINFO), {"MLAGATE_BLAS": "reference"})
    found = classes.of(host, "cpu")
    text = (FIXTURES / "fake-perf.yaml").read_text()
    line = "    backend: cpu  # backend\n"
    assert line in text
    shutil.copytree(FIXTURES / "fakemla-tree", tmp_path / "fakemla-tree")  # the tree it names
    for patch in FIXTURES.glob("*.patch"):
        shutil.copy(patch, tmp_path / patch.name)
    _perf_health_by_class(capsys, host, found, text, line, tmp_path / "perf.yaml")


def _perf_health_by_class(capsys, host, found, text, line, path):
    import argparse

    from mlagate.commands import runopts
    from mlagate.plan import Selection

    for wanted, unfit in ((found.id, False), ("mc-" + "0" * 12, True)):
        path.write_text(text.replace(line, f"{line}    machine_class: {wanted}\n"))
        matrix, perf = load(path), Selection(suites=("l1_parity",))
        args = argparse.Namespace(strict=False, settle=0.0)
        record = runopts.performance_health(args, matrix, perf, "cpu", host, runner="linux-cpu")
        assert (record["fit"] is False) == unfit, record
        err = capsys.readouterr().err
        assert ("unfit for timings: machine-class: this machine is" in err) == unfit, err
        runopts.this_machine(matrix, "linux-cpu", "cpu", host)
        assert ("warning: machine class: this machine is" in capsys.readouterr().err) == unfit
    with pytest.raises(runopts.Refused, match="machine-class"):
        runopts.performance_health(
            argparse.Namespace(strict=True, settle=0.0), matrix, perf, "cpu", host, "linux-cpu"
        )
