"""The worker: a subprocess that imports exactly one arm.

Runs with `python -I -m mlagate.worker.server ARM_DIR PACKAGE IN_FD OUT_FD`. It imports only the
stdlib, MLX and the runtime under test. Requests and replies are JSON lines on the two
inherited pipe descriptors (the dedicated channel); stdout and stderr are only logs.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
import traceback

from mlagate import backends
from mlagate.worker import activation, device, machine, probes, rollback, tracing
from mlagate.worker.building import BuildOps
from mlagate.worker.numerics import NumericsOps
from mlagate.worker.reuse import ReuseOps
from mlagate.worker.rowrejection import RowRejectionOps
from mlagate.worker.serving import ServingOps
from mlagate.worker.servingpairs import ServingPairsOps
from mlagate.worker.speculation import SpeculationOps
from mlagate.worker.stepping import StepOps

PROTOCOL = 1
# the CPU the parent pins this worker to (mlagate.harness.supervisor.pinned_cpu)
PIN_ENV = "MLAGATE_WORKER_CPU"
# a folder: each op's wall and CPU seconds appended to OP_LOG_ENV/ops-PID.jsonl (cost studies:
# benchmarks/cpu_seconds.py)
OP_LOG_ENV = "MLAGATE_OP_LOG"


class Worker(
    BuildOps,
    StepOps,
    NumericsOps,
    SpeculationOps,
    ServingOps,
    ServingPairsOps,
    RowRejectionOps,
    ReuseOps,
):
    """One arm's worker: its state (MLX, the built models) and its ops, `op_<name>` methods.

    The ops live in mixins by concern: building models and moving weights
    (mlagate.worker.building), priming, stepping and timed samples (mlagate.worker.stepping),
    the float64 reference and ULP errors (mlagate.worker.numerics), speculative decoding
    (mlagate.worker.speculation), serving configurations (mlagate.worker.serving, servingpairs,
    rowrejection, reuse); token scripts run in mlagate.worker.rollback.
    """

    def __init__(self, arm_dir: str, package: str):
        self.arm_dir = os.path.realpath(arm_dir)
        self.package = package
        sys.path.insert(0, self.arm_dir)
        sys.meta_path.insert(0, probes.LeanImporter(self.arm_dir, package))
        import mlx.core as mx  # noqa: PLC0415  (MLX is shared by every arm; imported after the path is set)

        self.mx = mx
        self.models: dict[str, dict] = {}
        self._kept = None
        self.activated: dict | None = None  # what the arm's activation did (after hello)

    # --- ops -------------------------------------------------------------------------

    def op_hello(self, req: dict) -> dict:
        """The first op: runs the arm's activation (mlagate.worker.activation), once; an
        exception it raises goes back like any op's."""
        if self.activated is None:
            self.activated = activation.activate(self.arm_dir, self.package, os.environ) or {}
        return {"protocol": PROTOCOL, "fingerprint": self.fingerprint()}

    def op_release(self, req: dict) -> dict:
        """Drop every model and primed cache and return MLX's cached buffers to the device, so
        the next case (maybe in another worker) finds the memory free."""
        import gc  # noqa: PLC0415

        self.models.clear()
        self._kept = None
        gc.collect()
        device.clear_cache(self.mx)
        return {}

    # --- speculative scripts (pool equivalence, trim after rejection, transactions) ------

    def op_script(self, req: dict) -> dict:
        """Run named token scripts (steps, verify + rollback through the runtime's own API) on one
        built model and compare pairs of them in the worker (mlagate.worker.rollback)."""
        try:
            return rollback.run_pairs(self, req)
        except rollback.RollbackRefused as exc:
            raise RuntimeError(f"rollback refused: {exc}") from exc

    # --- environment -----------------------------------------------------------------

    def fingerprint(self) -> dict:
        mx = self.mx
        device = mx.default_device()
        backend = backends.running(mx)
        name = platform.processor() or platform.machine()
        if device.type == mx.gpu:
            try:
                info = mx.device_info() if hasattr(mx, "device_info") else mx.metal.device_info()
                name = info.get("device_name", name)
            except Exception:  # noqa: BLE001  (device_info is optional across MLX versions)
                pass
        return {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "mlx": mx.__version__,
            "backend": backend,
            "device": name,
            "blas": blas_in_use(),
            "mlx_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("MLX_")},
            "ld_preload": os.environ.get("LD_PRELOAD", ""),
            "cpus": cpus(),
            "arm_dir": self.arm_dir,
            "activation": self.activated or None,
            **machine.fixed(),
        }


def blas_in_use() -> str:
    """The BLAS libraries mapped into this process (Linux), else what the platform implies."""
    if sys.platform == "darwin":
        return "accelerate"
    try:
        with open("/proc/self/maps", encoding="utf-8") as fh:
            libs = {line.split()[-1] for line in fh if len(line.split()) >= 6}
    except OSError:
        return "unknown"
    names = sorted(
        {
            os.path.basename(p)
            for p in libs
            if any(k in os.path.basename(p).lower() for k in ("blas", "lapack", "mkl", "blis"))
        }
    )
    return ", ".join(names) if names else "none found (MLX's bundled reference kernels)"


def serve(worker: Worker, rfd: int, wfd: int) -> None:
    log = os.environ.get(OP_LOG_ENV)
    log = os.path.join(log, f"ops-{os.getpid()}.jsonl") if log else None
    with os.fdopen(rfd, "r", encoding="utf-8") as rx, os.fdopen(wfd, "w", encoding="utf-8") as tx:
        for line in rx:
            req = json.loads(line)
            op = req.get("op")
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                handler = getattr(worker, f"op_{op}")
                reply = {"ok": True, "result": handler(req)}
            except Exception as exc:  # noqa: BLE001  (every failure goes back on the channel)
                reply = {
                    "ok": False,
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(),
                    "runtime_at": tracing.runtime_frame(exc, worker.arm_dir),
                }
            reply["seconds"] = time.perf_counter() - t0
            if log:
                _log_op(log, req, reply["seconds"], time.process_time() - c0)
            tx.write(json.dumps(reply) + "\n")
            tx.flush()
            if op == "exit":
                return


def _log_op(path: str, req: dict, wall: float, cpu: float) -> None:
    line = {"op": req.get("op"), "key": req.get("key"), "wall_s": wall, "cpu_s": cpu}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")


def pin(env: dict) -> None:
    """Pin this process to the CPU the parent chose (PIN_ENV), before MLX starts a thread."""
    cpu = env.get(PIN_ENV)
    if cpu is not None:
        os.sched_setaffinity(0, {int(cpu)})


def cpus() -> str | None:
    """The CPUs this process may run on, as "1" or "0,1"; None where the platform cannot say."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return ",".join(map(str, sorted(os.sched_getaffinity(0))))


def main(argv: list[str]) -> None:
    arm_dir, package, rfd, wfd = argv[0], argv[1], int(argv[2]), int(argv[3])
    pin(os.environ)
    worker = Worker(arm_dir, package)
    worker.op_exit = lambda req: {}
    serve(worker, rfd, wfd)


if __name__ == "__main__":
    main(sys.argv[1:])
