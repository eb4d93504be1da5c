"""The parent's side of a worker: start it in its own process group, talk JSON lines on a
dedicated pipe pair, kill the whole group on timeout.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlagate import lifeline
from mlagate.arm.arms import ArmInstall
from mlagate.worker import blas
from mlagate.worker.activation import worker_env
from mlagate.worker.server import PIN_ENV

BOOTSTRAP = (
    "import json, sys; sys.path[1:1] = json.loads(sys.argv[1]); from "
    "mlagate.worker.server import main; main(sys.argv[2:])"
)


def pinned_cpu(choice: str, under_xdist: bool) -> int | None:
    """The CPU every worker of this process is pinned to, from `--cpu`: "auto", "none" or a
    CPU number. "auto" is the highest CPU this process may use, on Linux outside xdist (xdist
    runs workers side by side, which one CPU would serialise); elsewhere no pinning.

    Why: on a shared machine a CPU can be slower than another for stretches (measured on the
    2-core CI machine, a VM: the same step took 4.0 ms or 6.0 ms for tenths of a second to
    seconds at a time, each vCPU changing on its own). Two workers on different CPUs then
    differ by tens of percent for the same work; on one CPU they share whatever slows it, and
    interleaved samples cancel it. Workers run one at a time, so pinning them to one CPU
    costs no parallelism (MLX's CPU backend runs a step on one thread). Raises ValueError
    naming the option.
    """
    if choice == "none":
        return None
    if not hasattr(os, "sched_setaffinity"):
        if choice == "auto":
            return None
        raise ValueError(
            f"--cpu {choice}: this platform cannot pin a process to a CPU; use --cpu none"
        )
    allowed = os.sched_getaffinity(0)
    if choice == "auto":
        return None if under_xdist else max(allowed)
    try:
        cpu = int(choice)
    except ValueError:
        raise ValueError(f"--cpu: {choice!r} is not auto, none or a CPU number") from None
    if cpu not in allowed:
        raise ValueError(
            f"--cpu {cpu}: not a CPU this process may run on "
            f"({', '.join(map(str, sorted(allowed)))})"
        )
    return cpu


def worker_path() -> list[str]:
    """Where the worker finds mlagate and MLX: the folders this process imports them from.

    The worker runs isolated (`python -I`: no PYTHONPATH, no user site, no current folder),
    then puts these after its own standard library, so MLX carried on PYTHONPATH (an offline
    GPU machine) works as well as MLX installed in the environment. The arm's folder goes
    first of all, in the worker.
    """
    import importlib.util

    import mlagate

    paths = [str(Path(mlagate.__file__).resolve().parents[1])]
    spec = importlib.util.find_spec("mlx")
    if spec is not None and spec.submodule_search_locations:
        paths.append(str(Path(list(spec.submodule_search_locations)[0]).resolve().parent))
    return list(dict.fromkeys(paths))


OP_WORDS = {"hello": "the worker's start (its activation and imports)"}  # as errors name ops


class WorkerError(RuntimeError):
    """The worker crashed, hung or the harness failed in it: the case becomes invalid."""

    def __init__(self, message: str, stderr: str = "", traceback: str = ""):
        super().__init__(message)
        self.stderr, self.traceback = stderr, traceback


class RuntimeRaised(WorkerError):
    """The runtime under test raised (its traceback enters the arm's folder): a failure."""

    def __init__(self, message: str, at: str, stderr: str = "", traceback: str = ""):
        super().__init__(message, stderr, traceback)
        self.at = at


class WorkerProcess:
    """One long-lived worker importing one arm."""

    def __init__(
        self, install: ArmInstall, env: dict[str, str] | None = None, log_dir: Path | None = None
    ):
        self.install = install
        parent_rx, child_tx = os.pipe()
        child_rx, parent_tx = os.pipe()
        log_dir = Path(log_dir or tempfile.gettempdir())
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = (
            log_dir
            / f"worker-{install.arm.id.replace('/', '_')}-{os.getpid()}-{time.monotonic_ns()}.log"
        )
        self._log = open(self.log_path, "w+b")
        cmd = [
            sys.executable,
            "-I",
            "-c",
            BOOTSTRAP,
            json.dumps(worker_path()),
            str(install.site),
            install.runtime.package,
            str(child_rx),
            str(child_tx),
        ]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            pass_fds=(child_rx, child_tx),
            start_new_session=True,
            preexec_fn=lifeline.die_with_parent,
            env=worker_env(blas.worker_env({**os.environ, **(env or {})}), install.arm.activate),
        )
        os.close(child_rx)
        os.close(child_tx)
        self._rx = os.fdopen(parent_rx, "rb", buffering=0)
        self._tx = os.fdopen(parent_tx, "wb", buffering=0)
        self._buf = b""
        self.fingerprint: dict = {}
        self.holding = False  # an op since the last successful release may have left models

    def stderr_tail(self, limit: int = 4000) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-limit:]

    def call(self, op: str, timeout: float, **req) -> dict:
        if op not in ("hello", "release", "exit"):
            self.holding = True
        if self.proc.poll() is not None:
            raise WorkerError(
                f"worker for {self.install.arm.id} is not running (exit {self.proc.returncode})",
                self.stderr_tail(),
            )
        try:
            self._tx.write((json.dumps({"op": op, **req}) + "\n").encode())
        except BrokenPipeError:
            self.kill()
            raise WorkerError(
                f"worker for {self.install.arm.id} died (exit {self.proc.returncode})",
                self.stderr_tail(),
            ) from None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerError(
                    f"worker for {self.install.arm.id} timed out after {timeout:.0f} s in {op}; "
                    "killed",
                    self.stderr_tail(),
                )
            ready, _, _ = select.select([self._rx], [], [], left)
            if ready:
                chunk = self._rx.read(1 << 20)
                if not chunk:
                    code = self.proc.wait()
                    why = f"killed by signal {-code}" if code < 0 else f"exit {code}"
                    raise WorkerError(
                        f"worker for {self.install.arm.id} crashed in {op} ({why})",
                        self.stderr_tail(),
                    )
                self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        reply = json.loads(line)
        if not reply["ok"]:
            what = OP_WORDS.get(op, op)
            message = f"{what} failed in {self.install.arm.id}: {reply['error']}"
            if reply.get("runtime_at"):
                raise RuntimeRaised(
                    f"{message} at {reply['runtime_at']}",
                    reply["runtime_at"],
                    self.stderr_tail(),
                    reply.get("traceback", ""),
                )
            raise WorkerError(message, self.stderr_tail(), reply.get("traceback", ""))
        if op == "release":
            self.holding = False
        return reply["result"]

    def hello(self, timeout: float = 120) -> dict:
        self.fingerprint = self.call("hello", timeout)["fingerprint"]
        self.fingerprint["arm"] = self.install.arm.id
        self.fingerprint["arm_version"] = self.install.version
        self.fingerprint["arm_key"] = self.install.key
        self.fingerprint["arm_notes"] = list(self.install.notes)  # its arm.json, read by the parent
        return self.fingerprint

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("exit", 10)
                self.proc.wait(timeout=10)
            except (WorkerError, subprocess.TimeoutExpired, OSError):
                pass
        self.kill()
        for fh in (self._rx, self._tx, self._log):
            try:
                fh.close()
            except OSError:
                pass


class WorkerPool:
    """Long-lived workers, one per arm, restarted after a crash."""

    def __init__(
        self,
        installs: dict[str, ArmInstall],
        env: dict[str, str] | None = None,
        log_dir: Path | None = None,
        cpu: int | None = None,
    ):
        self.installs, self.log_dir = installs, log_dir
        self.env = {**(env or {}), PIN_ENV: str(cpu)} if cpu is not None else env
        self._workers: dict[tuple[str, int], WorkerProcess] = {}

    def get(self, arm: str, replica: int = 0) -> WorkerProcess:
        """The worker of an arm; replica 1 is a second process of the same arm (A/A runs)."""
        slot = (arm, replica)
        w = self._workers.get(slot)
        if w is None or not w.alive():
            if w is not None:
                w.close()
            w = WorkerProcess(self.installs[arm], self.env, self.log_dir)
            self._workers[slot] = w
            try:
                w.hello()
            except WorkerError:
                self._workers.pop(slot, None)
                w.close()
                raise
        return w

    def retire(self, arm: str, replica: int = 0) -> None:
        """Close one slot's worker: the next get() starts a fresh process (a new process pair)."""
        w = self._workers.pop((arm, replica), None)
        if w is not None:
            w.close()

    def release(self) -> None:
        """Ask every live worker that ran an op since its last release to drop its models and
        caches (between cases); the others hold none (a release costs a gc pass)."""
        for w in self._workers.values():
            if w.alive() and w.holding:
                try:
                    w.call("release", 60)
                except WorkerError:
                    pass

    def close(self) -> None:
        for w in self._workers.values():
            w.close()
        self._workers.clear()
