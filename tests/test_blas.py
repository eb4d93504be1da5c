"""The worker's BLAS: OpenBLAS preloaded where the machine has it, in the fingerprint, and a
choice the user can make (MLAGATE_BLAS) that is checked before any worker starts."""

import os
import subprocess
import sys

import pytest

from mlagate import arms, matrix
from mlagate.harness.supervisor import WorkerPool
from mlagate.worker import blas

OPENBLAS = blas.find_openblas()


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
        f"mlagate: error: MLAGATE_BLAS={tmp_path / 'missing.so'}: not auto, reference or an "
        "existing shared library"
    ]


@pytest.mark.skipif(
    OPENBLAS is None and not os.environ.get("CI"),
    reason="no OpenBLAS on this machine (CI installs it: there this test must run)",
)
@pytest.mark.parametrize("choice", ["auto", "reference"])
def test_a_workers_fingerprint_names_the_blas_it_computes_with(
    choice, fake_matrix, fake_cache, tmp_path, monkeypatch
):
    assert OPENBLAS, "CI installs OpenBLAS (.ci/run): none found"
    monkeypatch.setenv(blas.BLAS_ENV, choice)
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    m = matrix.load(fake_matrix)
    inst = arms.materialise(m.arms["fake-stock"], m.runtimes["fakemla"], fake_cache)
    pool = WorkerPool({"fake-stock": inst}, log_dir=tmp_path / "logs")
    try:
        fp = pool.get("fake-stock").fingerprint
    finally:
        pool.close()
    assert ("openblas" in fp["blas"]) == (choice == "auto"), fp["blas"]
    assert (fp["ld_preload"] == OPENBLAS) == (choice == "auto"), fp["ld_preload"]


def test_health_warns_on_the_reference_blas_and_fails_a_choice_naming_nothing():
    from mlagate.gate import health

    assert health._blas({blas.BLAS_ENV: "/no/such.so"}).status == "fail"
    if OPENBLAS is None:
        assert health._blas({}).status == "warn"
    else:
        assert health._blas({}).detail == f"preloads {OPENBLAS}"
    assert health._blas({blas.BLAS_ENV: "reference"}).status == "ok"
