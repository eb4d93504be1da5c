"""The worker's BLAS: OpenBLAS preloaded where the machine has it, in the fingerprint, and a
choice the user can make (MLAGATE_BLAS) that is checked before any worker starts."""

import os
import subprocess
import sys

import pytest

from mlagate import matrix
from mlagate.arm import arms
from mlagate.harness.supervisor import WorkerPool
from mlagate.worker import blas

OPENBLAS = blas.find_openblas()
WHEEL = blas.wheel_openblas()


def test_auto_preloads_what_the_machine_has_on_one_thread(tmp_path):
    lib = tmp_path / "libopenblas.so.0"
    lib.write_bytes(b"")
    env = blas.worker_env({blas.BLAS_ENV: str(lib), "LD_PRELOAD": "libfoo.so"}, "linux")
    assert env["LD_PRELOAD"] == f"{lib} libfoo.so"
    assert env["OPENBLAS_NUM_THREADS"] == env["OMP_NUM_THREADS"] == "1"
    kept = blas.worker_env({blas.BLAS_ENV: str(lib), "OPENBLAS_NUM_THREADS": "4"}, "linux")
    assert kept["OPENBLAS_NUM_THREADS"] == "4"


def test_reference_macos_and_a_blas_already_preloaded_are_left_alone():
    assert blas.chosen_library({blas.BLAS_ENV: "reference"}, "linux") is None
    assert blas.chosen_library({}, "darwin") is None
    assert blas.chosen_library({"LD_PRELOAD": "/opt/libmkl_rt.so"}, "linux") is None
    assert blas.worker_env({blas.BLAS_ENV: "reference"}, "linux") == {blas.BLAS_ENV: "reference"}


def test_a_choice_that_names_no_library_is_refused_naming_the_variable():
    with pytest.raises(blas.BlasChoiceError, match=r"^MLAGATE_BLAS=/no/such\.so: not auto"):
        blas.chosen_library({blas.BLAS_ENV: "/no/such.so"}, "linux")


def test_run_refuses_a_bad_choice_in_one_line_before_measuring(fake_matrix, tmp_path):
    env = {**os.environ, blas.BLAS_ENV: str(tmp_path / "missing.so")}
    proc = subprocess.run(
        [sys.executable, "-m", "mlagate", "run", "--matrix", str(fake_matrix)]
        + ["--suite", "probes", "--module", "fake/fixed", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"mlagate: error: MLAGATE_BLAS={tmp_path / 'missing.so'}: not auto, system, wheel, "
        "reference or an existing shared library"
    ]


def _fingerprint(fake_matrix, fake_cache, tmp_path) -> dict:
    m = matrix.load(fake_matrix)
    inst = arms.materialise(m.arms["fake-stock"], m.runtimes["fakemla"], fake_cache)
    pool = WorkerPool({"fake-stock": inst}, log_dir=tmp_path / "logs")
    try:
        return pool.get("fake-stock").fingerprint
    finally:
        pool.close()


@pytest.mark.skipif(
    WHEEL is None and not os.environ.get("CI"),
    reason="no cpu extra's OpenBLAS here (Linux x86_64 with mlagate[cpu]; CI installs it)",
)
@pytest.mark.parametrize("choice", ["auto", "wheel", "reference"])
def test_with_the_systems_blas_hidden_a_worker_computes_with_the_wheels(
    choice, fake_matrix, fake_cache, tmp_path, monkeypatch
):
    assert WHEEL, "CI installs mlagate[cpu] (.ci/run): no OpenBLAS of the cpu extra found"
    monkeypatch.setattr(blas, "find_openblas", lambda: None)  # as on a machine without Debian's
    monkeypatch.setenv(blas.BLAS_ENV, choice)
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    fp = _fingerprint(fake_matrix, fake_cache, tmp_path)
    name = os.path.basename(WHEEL)
    if choice == "reference":
        assert name not in fp["blas"] and "openblas" not in fp["ld_preload"], fp
        assert "blas_build" not in fp
        return
    # mapped from the package's file (the link in the cache resolves to it), its Fortran runtime
    # found through that link's folder, and OpenBLAS answering with its build
    assert name in fp["blas"], fp["blas"]
    assert os.path.realpath(fp["ld_preload"]) == os.path.realpath(WHEEL)
    assert fp["blas_build"].startswith("OpenBLAS "), fp.get("blas_build")


@pytest.mark.skipif(
    OPENBLAS is None, reason="no system OpenBLAS on this machine (libopenblas0-pthread)"
)
def test_the_systems_openblas_is_preferred_when_present(fake_matrix, fake_cache, tmp_path):
    assert blas.choose({}, "linux") == blas.Blas(OPENBLAS, "system")
    fp = _fingerprint(fake_matrix, fake_cache, tmp_path)
    assert fp["ld_preload"].split()[0] == OPENBLAS


def test_the_wheels_library_is_linked_beside_mlxs_fortran_runtime(tmp_path, monkeypatch):
    if WHEEL is None or blas._fortran_libs() is None:
        pytest.skip("no cpu extra's OpenBLAS or MLX CPU wheel here")
    monkeypatch.setattr(blas, "find_openblas", lambda: None)
    env = {"MLAGATE_CACHE": str(tmp_path)}
    chosen = blas.choose(env, "linux")
    assert chosen.source == "wheel" and chosen.origin == WHEEL
    folder = os.path.dirname(chosen.path)
    assert folder.startswith(str(tmp_path / "blas"))
    fortran = os.path.realpath(os.path.join(folder, blas.FORTRAN))
    assert os.path.dirname(fortran) == str(blas._fortran_libs())
    assert blas.choose(env, "linux") == chosen  # the second parent reuses the links
    with pytest.raises(blas.BlasChoiceError, match=r"^MLAGATE_BLAS=system: this machine has no"):
        blas.choose({blas.BLAS_ENV: "system"}, "linux")


def test_health_warns_on_the_reference_blas_and_fails_a_choice_naming_nothing():
    from mlagate.machine import health

    assert health._blas({blas.BLAS_ENV: "/no/such.so"}).status == "fail"
    found = OPENBLAS or WHEEL
    if found is None:
        assert health._blas({}).status == "warn"
    else:
        assert health._blas({}).detail.startswith("preloads "), health._blas({})
        assert health._blas({}).detail.endswith(found)
    assert health._blas({blas.BLAS_ENV: "reference"}).status == "ok"
