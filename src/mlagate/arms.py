"""Arms: isolated installs of a runtime, materialised once into a content-addressed cache.

The parent process never imports an arm; it only installs files. An arm directory holds
`site/` (what a worker puts first on sys.path) and `arm.json` (what was installed).
Two runs that materialise the same arm at once are safe: one installs under a lock, the
other waits and reuses the result.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from mlagate import packs
from mlagate.matrix import Arm, Matrix, Runtime

LAYOUT = 1


class ArmError(RuntimeError):
    """An arm could not be materialised; str() is one line naming the arm."""

    def __init__(self, arm: str, message: str):
        super().__init__(f"arm {arm}: {message}")
        self.arm = arm


@dataclass(frozen=True)
class ArmInstall:
    arm: Arm
    runtime: Runtime
    key: str
    dir: Path
    version: str

    @property
    def site(self) -> Path:
        return self.dir / "site"

    def has_module(self, import_path: str) -> bool:
        parts = import_path.split(".")
        base = self.site.joinpath(*parts)
        return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def cache_root() -> Path:
    env = os.environ.get("MLAGATE_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mlagate"


def arm_key(arm: Arm) -> str:
    """Content address: the source, the patches' bytes and the needs; with needs (which may be
    compiled), also the interpreter and platform. A runtime alone is pure Python, so its
    install serves any Python 3 on any platform, and an exported cache travels between them."""
    payload = {
        "layout": LAYOUT,
        "source": [arm.source.kind, arm.source.spec, arm.source.ref],
        "patches": [hashlib.sha256(p.read_bytes()).hexdigest() for p in arm.patches],
        "needs": sorted(arm.needs),
    }
    if arm.needs:
        payload["python"] = f"{sys.version_info.major}.{sys.version_info.minor}"
        payload["platform"] = sysconfig.get_platform()
    if arm.source.kind == "path":
        payload["tree"] = _tree_digest(Path(arm.source.spec))
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def apply_patch(site: Path, patch: Path, ceiling: Path) -> str | None:
    """`git apply -p1` of one patch inside an arm's site/ (git never looks above ceiling); the
    first line of git's complaint when it does not apply, else None."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(ceiling)}
    proc = subprocess.run(
        ["git", "apply", "-p1", "--whitespace=nowarn", str(patch)],
        cwd=site,
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode == 0:
        return None
    return next((ln for ln in proc.stderr.splitlines() if ln.strip()), "git apply failed")


def _pip(arm: str, args: list[str], what: str) -> None:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "--quiet",
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [
            ln.strip()
            for ln in (proc.stderr + proc.stdout).splitlines()
            if ln.strip() and not ln.startswith("WARNING")
        ]
        errors = [ln for ln in lines if ln.startswith("ERROR") and "yanked" not in ln]
        msg = errors[-1] if errors else (lines[-1] if lines else f"pip exited {proc.returncode}")
        raise ArmError(arm, f"{what} failed: {msg}")


def _requirement(arm: Arm, runtime: Runtime) -> str:
    src = arm.source
    if src.kind == "pypi":
        return src.spec
    if src.kind == "git":
        return f"{runtime.distribution} @ git+{src.spec}@{src.ref}"
    return src.spec


def _version(site: Path, runtime: Runtime) -> str:
    """The installed distribution's version; a copied source tree has none ("tree")."""
    norm = runtime.distribution.replace("-", "_").lower()
    for info in site.glob("*.dist-info"):
        if info.name.lower().startswith(norm + "-"):
            for line in (info / "METADATA").read_text(encoding="utf-8").splitlines():
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    return "tree"


def materialise(arm: Arm, runtime: Runtime, root: Path | None = None) -> ArmInstall:
    """The installed arm, from the cache or installed now."""
    root = Path(root) if root else cache_root()
    arms_dir = root / "arms"
    arms_dir.mkdir(parents=True, exist_ok=True)
    key = arm_key(arm)
    for shared in readonly_roots():
        if _installed(shared / "arms" / key):
            return _read(arm, runtime, shared / "arms" / key)  # checked at run start (verify_all)
    final = arms_dir / key
    if _installed(final):
        return _read(arm, runtime, final)
    with open(arms_dir / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "arm.json").is_file() and not (final / packs.CONTENT).exists():
            packs.write_content(final)  # installed before content manifests: adopted once
        if _installed(final):
            return _read(arm, runtime, final)
        staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=arms_dir))
        try:
            _install(arm, runtime, staging, key)
            packs.write_content(staging)
            if final.exists():
                shutil.rmtree(final)
            os.rename(staging, final)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return _read(arm, runtime, final)


def readonly_roots() -> list[Path]:
    """Arm caches to use but never write ($MLAGATE_ARMS_READONLY, ':'-separated): on a runner,
    the main branch's verified arms, read by pull-request jobs that install into a cache of their
    own."""
    return [Path(p) for p in os.environ.get("MLAGATE_ARMS_READONLY", "").split(os.pathsep) if p]


def _installed(final: Path) -> bool:
    """An arm is installed once both arm.json and its content manifest exist."""
    return (final / "arm.json").is_file() and (final / packs.CONTENT).is_file()


def verify_all(installs: dict[str, ArmInstall]) -> None:
    """Every arm still matches its content manifest; ArmError naming the first that does not."""
    for inst in installs.values():
        try:
            packs.verify(inst.dir)
        except packs.PackError as exc:
            raise ArmError(
                inst.arm.id, f"{exc}; refusing to run it (reinstall: delete {inst.dir})"
            ) from None


def _install(arm: Arm, runtime: Runtime, staging: Path, key: str) -> None:
    site = staging / "site"
    site.mkdir()
    tree = Path(arm.source.spec)
    if arm.source.kind == "path" and not any(
        (tree / f).exists() for f in ("pyproject.toml", "setup.py")
    ):
        if not (tree / runtime.package).is_dir():
            raise ArmError(
                arm.id,
                f"{tree} holds neither a project (pyproject.toml, setup.py) nor a "
                f"{runtime.package}/ package",
            )
        shutil.copytree(
            tree / runtime.package,
            site / runtime.package,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
    else:
        _pip(
            arm.id,
            ["--no-deps", "--no-compile", "--target", str(site), _requirement(arm, runtime)],
            f"installing {arm.source.describe()}",
        )
    if arm.needs:
        _pip(
            arm.id,
            ["--no-compile", "--target", str(site), *arm.needs],
            f"installing needs {' '.join(arm.needs)}",
        )
    if not (site / runtime.package).is_dir():
        raise ArmError(arm.id, f"the install holds no package {runtime.package}")
    for patch in arm.patches:
        problem = apply_patch(site, patch, staging.parent)
        if problem:
            raise ArmError(arm.id, f"patch {patch.name} does not apply: {problem}")
    manifest = {
        "arm": arm.id,
        "runtime": runtime.id,
        "source": {"kind": arm.source.kind, "spec": arm.source.spec, "ref": arm.source.ref},
        "patches": [
            {"name": p.name, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
            for p in arm.patches
        ],
        "needs": list(arm.needs),
        "version": _version(site, runtime),
        "key": key,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (staging / "arm.json").write_text(json.dumps(manifest, indent=1))


def _read(arm: Arm, runtime: Runtime, path: Path) -> ArmInstall:
    manifest = json.loads((path / "arm.json").read_text())
    return ArmInstall(arm, runtime, path.name, path, manifest["version"])


def materialise_all(
    matrix: Matrix, only: list[str] | None = None, root: Path | None = None
) -> dict[str, ArmInstall]:
    arms = [a for a in matrix.arms.values() if only is None or a.id in only]
    cached = Path(root) if root else cache_root()
    todo = [a.id for a in arms if not (cached / "arms" / arm_key(a) / "arm.json").is_file()]
    out = {}
    for a in arms:
        if (
            a.id not in todo or not sys.stderr.isatty()
        ):  # the notes are for a person waiting at a terminal
            out[a.id] = materialise(a, matrix.runtimes[a.runtime], root)
            continue
        print(
            f"mlagate: installing arm {a.id} ({todo.index(a.id) + 1} of {len(todo)}): "
            f"{a.source.describe()}",
            file=sys.stderr,
            flush=True,
        )
        start = time.monotonic()
        out[a.id] = inst = materialise(a, matrix.runtimes[a.runtime], root)
        size = sum(p.stat().st_size for p in inst.dir.rglob("*") if p.is_file()) / 1e6
        print(
            f"mlagate: installed arm {a.id} {inst.version} ({size:.0f} MB) in "
            f"{time.monotonic() - start:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    return out


def export(installs: dict[str, ArmInstall], out: Path) -> Path:
    """Pack materialised arms into one tar.gz, for runners without registry access
    (packs.PackError)."""
    return packs.export([inst.dir for inst in installs.values()], out)


def import_cache(
    archive: Path, root: Path | None = None, limits: packs.Limits | None = None
) -> list[str]:
    """Unpack an exported arm cache, all or nothing (mlagate.packs); returns the keys it held."""
    return packs.import_pack(
        archive, Path(root) if root else cache_root(), limits or packs.Limits()
    )
