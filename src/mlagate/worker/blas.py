"""Which BLAS a worker's MLX computes with (stdlib only; chosen by the parent).

MLX's Linux CPU wheel ships a reference BLAS: a float32 1024x1024x1024 matmul takes about 20x
longer with it than with OpenBLAS (docs/performance.md). The worker preloads OpenBLAS
(LD_PRELOAD) with one thread, so a step still runs on the one CPU a serial run pins its workers
to. Two come into question, in this order:

- the system's (Debian's libopenblas0-pthread, or Fedora's, Arch's, Alpine's): managed by the
  system, and the one every earlier measurement of this project used;
- the cpu extra's (`ngsolve-openblas`, Linux x86_64: an OpenBLAS built for every x86_64 core
  type, DYNAMIC_ARCH). It needs the Fortran runtime `libgfortran.so.5`, which it does not ship;
  MLX's CPU wheel ships one under a hashed name (mlx_cpu.libs), so the worker loads the library
  through a folder of links in the cache (`blas/<key>/`) where its RPATH finds that runtime
  under the name it asks for: nothing is installed into the system.

The choice is `MLAGATE_BLAS`:

- `auto` (default): the system's OpenBLAS, else the cpu extra's, else MLX's own; never on macOS
  (Accelerate) and never over an LD_PRELOAD that already names a BLAS;
- `system`, `wheel`: that one (refused when absent);
- `reference`: MLX's own, whatever the machine has;
- a path to a shared library: that one (it must exist).

The library mapped into the worker is in its fingerprint (`blas`, and `blas_build`: OpenBLAS's
own configuration string), and two workers whose fingerprints differ are never compared, so
timings of one BLAS never mix with another's.
"""

from __future__ import annotations

import ctypes.util
import hashlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

BLAS_ENV = "MLAGATE_BLAS"
THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
WHEEL_PACKAGE = "ngsolve_openblas"  # the cpu extra's OpenBLAS (pyproject.toml)
# Debian/Ubuntu (libopenblas0-pthread), then Fedora/RHEL, Arch and Alpine
_LIBDIRS = ("/usr/lib/{triple}/openblas-pthread", "/usr/lib/{triple}", "/usr/lib64", "/usr/lib")
_NAMES = ("libopenblas.so.0", "libopenblasp.so.0", "libopenblas.so")
FORTRAN = "libgfortran.so.5"


class BlasChoiceError(ValueError):
    """MLAGATE_BLAS names nothing usable (bad input: the parent refuses to start)."""


@dataclass(frozen=True)
class Blas:
    """The library a worker preloads (`path`), where it comes from (`source`: system, wheel or
    path) and, for the wheel's, the file the link in the cache points to (`origin`)."""

    path: str
    source: str
    origin: str | None = None

    def describe(self) -> str:
        where = {
            "system": "the system's OpenBLAS",
            "wheel": f"OpenBLAS of the cpu extra ({WHEEL_PACKAGE})",
            "path": f"{BLAS_ENV}'s library",
        }[self.source]
        return f"{where}: {self.origin or self.path}"


def _triples() -> list[str]:
    machine = os.uname().machine if hasattr(os, "uname") else ""
    return [f"{machine}-linux-gnu", f"{machine}-linux-musl"]


def find_openblas() -> str | None:
    """This machine's (the system's) OpenBLAS shared library, or None."""
    for pattern in _LIBDIRS:
        for triple in _triples() if "{triple}" in pattern else [""]:
            folder = Path(pattern.format(triple=triple))
            for name in _NAMES:
                if (folder / name).is_file():
                    return str(folder / name)
    return None


def _package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)  # finds the package without importing it
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def wheel_openblas() -> str | None:
    """The cpu extra's OpenBLAS in this interpreter's site-packages, or None."""
    folder = _package_dir(WHEEL_PACKAGE)
    libs = sorted(folder.glob("libopenblas*.so*")) if folder else []
    return str(libs[0]) if libs else None


def _fortran_libs() -> Path | None:
    """The folder of MLX's CPU wheel's bundled libraries when it holds a Fortran runtime."""
    mlx = _package_dir("mlx")
    folder = mlx.parent / "mlx_cpu.libs" if mlx else None
    return folder if folder and any(folder.glob("libgfortran-*.so*")) else None


def cache_root(env: dict[str, str]) -> Path:
    """mlagate's cache (as mlagate.arm.arms.cache_root, from the given environment)."""
    if env.get("MLAGATE_CACHE"):
        return Path(env["MLAGATE_CACHE"])
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mlagate"


def linked(lib: str, env: dict[str, str]) -> str:
    """The path to preload for the wheel's lib: a link to it in a folder of the cache that also
    holds links to MLX's bundled libraries (under their own names) and `libgfortran.so.5` to
    MLX's Fortran runtime, so the library's RPATH ($ORIGIN) finds what it needs. Where MLX
    bundles no Fortran runtime, lib itself (the system's libgfortran.so.5 must serve)."""
    bundled = _fortran_libs()
    if bundled is None:
        return _with_system_fortran(lib)
    key = hashlib.sha256(f"{lib}\0{bundled}".encode()).hexdigest()[:16]
    folder = cache_root(env) / "blas" / key
    links = {Path(lib).name: Path(lib)}
    links |= {p.name: p for p in sorted(bundled.iterdir()) if p.is_file()}
    links[FORTRAN] = sorted(bundled.glob("libgfortran-*.so*"))[0]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, target in links.items():
            link = folder / name
            if os.path.realpath(link) != os.path.realpath(target):
                tmp = folder / f".{name}.{os.getpid()}"
                tmp.unlink(missing_ok=True)
                tmp.symlink_to(target)
                os.replace(tmp, link)  # atomic: concurrent parents agree on every link
    except OSError:
        return _with_system_fortran(lib)  # a cache that cannot be written
    return str(folder / Path(lib).name)


def _with_system_fortran(lib: str) -> str:
    """lib, where the system's Fortran runtime can serve it: a library preloaded without one
    stops every process it is preloaded into before it runs a line."""
    if ctypes.util.find_library("gfortran") is None:
        raise BlasChoiceError(
            f"{lib}: no Fortran runtime ({FORTRAN}) beside MLX's CPU wheel or on the system"
        )
    return lib


def _named(choice: str, env: dict[str, str]) -> Blas:
    if choice == "system":
        lib = find_openblas()
        if lib is None:
            raise BlasChoiceError(f"{BLAS_ENV}=system: this machine has no OpenBLAS library")
        return Blas(lib, "system")
    if choice == "wheel":
        lib = wheel_openblas()
        if lib is None:
            raise BlasChoiceError(
                f"{BLAS_ENV}=wheel: {WHEEL_PACKAGE} is not installed (mlagate's cpu extra, Linux "
                "x86_64)"
            )
        return Blas(linked(lib, env), "wheel", lib)
    if not Path(choice).is_file():
        raise BlasChoiceError(
            f"{BLAS_ENV}={choice}: not auto, system, wheel, reference or an existing shared library"
        )
    return Blas(choice, "path")


def choose(env: dict[str, str], platform: str = sys.platform) -> Blas | None:
    """The BLAS to preload into a worker started with env, or None for none. Raises
    BlasChoiceError naming MLAGATE_BLAS when its choice cannot be had."""
    choice = env.get(BLAS_ENV, "auto").strip() or "auto"
    if choice == "reference":
        return None
    if choice != "auto":
        return _named(choice, env)
    if platform != "linux" or _names_blas(env.get("LD_PRELOAD", "")):
        return None
    for source in ("system", "wheel"):
        try:
            return _named(source, env)
        except BlasChoiceError:
            continue
    return None


def _names_blas(preload: str) -> bool:
    return any(k in Path(p).name.lower() for p in preload.split() for k in ("blas", "mkl", "blis"))


def chosen_library(env: dict[str, str], platform: str = sys.platform) -> str | None:
    """The path to preload into a worker started with env, or None (see choose)."""
    chosen = choose(env, platform)
    return chosen.path if chosen else None


def worker_env(env: dict[str, str], platform: str = sys.platform) -> dict[str, str]:
    """env with the chosen BLAS preloaded, on one thread (threads already set are kept)."""
    lib = chosen_library(env, platform)
    if lib is None:
        return dict(env)
    out = dict(env)
    out["LD_PRELOAD"] = " ".join(p for p in (lib, env.get("LD_PRELOAD", "")) if p)
    for name in THREADS:
        out.setdefault(name, "1")
    return out


def build(libc=None) -> str | None:
    """OpenBLAS's configuration string (version, core type, threads) in this process, or None
    when no OpenBLAS is mapped (worker side: the fingerprint's `blas_build`)."""
    import ctypes  # noqa: PLC0415  (only where asked)

    try:
        fn = (libc or ctypes.CDLL(None)).openblas_get_config
    except (AttributeError, OSError):
        return None
    fn.restype = ctypes.c_char_p
    raw = fn()
    return raw.decode("ascii", "replace").strip() if raw else None
