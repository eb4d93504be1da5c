"""A fresh virtual environment holding only an arm's packages, and a script run in it.

The arm's own files come from its install in mlagate's cache (its site, patches applied);
its dependencies are the arm's pip requirement's (installed with it, then the runtime's own
distribution uninstalled and the arm's site put on the path by a .pth file); MLX is the version
this mlagate measures with. Nothing of mlagate is installed there.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

STAMP = ".mlagate-repro-env"


class EnvError(RuntimeError):
    """The environment could not be made (pip failed): the script was not run."""


def _installed(distribution: str) -> bool:
    try:
        metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


def mlx_requirement(backend: str) -> str:
    """The MLX this mlagate measures with, for the case's backend: on Linux its CPU or CUDA
    extra (the CUDA major installed here, else MLX's default), elsewhere MLX itself."""
    extra = ""
    if sys.platform == "linux":
        if backend == "cuda":
            cuda = {"cuda13": "mlx-cuda-13", "cuda12": "mlx-cuda-12"}
            extra = next((f"[{e}]" for e, dist in cuda.items() if _installed(dist)), "[cuda]")
        else:
            extra = "[cpu]"
    return f"mlx{extra}=={metadata.version('mlx')}"


@dataclass(frozen=True)
class Run:
    exit: int
    output: str

    @property
    def verdict_line(self) -> str | None:
        lines = [
            ln
            for ln in self.output.splitlines()
            if ln.startswith(("REPRODUCED:", "NOT REPRODUCED:"))
        ]
        return lines[-1] if lines else None

    @property
    def reproduced(self) -> bool | None:
        """True or False as the script says (its verdict line and exit status agree); None where
        it could not run to a verdict."""
        line = self.verdict_line
        if line is None:
            return None
        if line.startswith("REPRODUCED:") and self.exit == 1:
            return True
        if line.startswith("NOT REPRODUCED:") and self.exit == 0:
            return False
        return None


def _python(where: Path) -> Path:
    return where / ("Scripts" if os.name == "nt" else "bin") / "python"


def _site(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def make(where: Path, requirement: str, distribution: str, site: Path, mlx: str) -> Path:
    """The environment at `where` (made there, or reused when it was made for the same arm
    site, requirement and MLX); its python."""
    stamp = f"{site}\n{requirement}\n{mlx}\n"
    python = _python(where)
    if (where / STAMP).is_file() and (where / STAMP).read_text() == stamp and python.exists():
        return python
    base = getattr(sys, "_base_executable", sys.executable) or sysconfig.get_config_var("EXE")
    _run([base, "-m", "venv", "--clear", str(where)], "venv")
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", "-q"]
    _run([*pip, "install", requirement, mlx], "pip install")
    _run([*pip, "uninstall", "-y", distribution], "pip uninstall")
    (_site(python) / "mlagate_repro_arm.pth").write_text(f"{site}\n", encoding="utf-8")
    (where / STAMP).write_text(stamp)
    return python


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["?"]
        raise EnvError(f"{what} failed ({done.returncode}): {tail[0]}")


def run(python: Path, script: Path, timeout: float = 600) -> Run:
    """The script run by the environment's python in its own folder, isolated (-I: no user
    site, no PYTHONPATH), with a minimal environment."""
    env = {k: os.environ[k] for k in ("PATH", "HOME", "TMPDIR", "LANG") if k in os.environ}
    try:
        done = subprocess.run(
            [str(python), "-I", str(script)],
            cwd=script.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return Run(124, f"(timed out after {timeout:g} s)")
    return Run(done.returncode, (done.stdout + done.stderr).strip())
