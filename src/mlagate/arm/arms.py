"""Arms: isolated installs of a runtime, materialised once into a content-addressed cache
(how one is installed: mlagate.arm.installing).

The parent process never imports an arm; it only installs files. An arm directory holds
`site/` (what a worker puts first on sys.path) and `arm.json` (what was installed: an
mlagate.arm/1 document, read only through mlagate.documents; one written before it had a schema
field is upgraded on read, and one that cannot be read is installed again).
Two runs that materialise the same arm at once are safe: one installs under a lock, the
other waits and reuses the result.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from mlagate import documents
from mlagate.arm import armidentity, installing, packs
from mlagate.arm.installing import (  # noqa: F401  (ArmError, apply_patch: part of this API)
    ArmError,
    Installed,
    apply_patch,
    install,
)
from mlagate.matrix import Arm, Matrix, Runtime


@dataclass(frozen=True)
class ArmInstall:
    arm: Arm
    runtime: Runtime
    key: str
    dir: Path
    version: str
    notes: tuple[str, ...] = ()  # what the install had to work around (arm.json "notes")

    @property
    def site(self) -> Path:
        return self.dir / "site"

    def has_module(self, import_path: str) -> bool:
        return installing.has_module(self.site, import_path)


def cache_root() -> Path:
    env = os.environ.get("MLAGATE_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mlagate"


def arm_key(arm: Arm) -> str:
    """The arm's folder name in the cache (mlagate.arm.armidentity.cache_key)."""
    return armidentity.cache_key(arm)


def materialise(arm: Arm, runtime: Runtime, root: Path | None = None) -> ArmInstall:
    """The installed arm, from the cache or installed now."""
    root = Path(root) if root else cache_root()
    arms_dir = root / "arms"
    arms_dir.mkdir(parents=True, exist_ok=True)
    key = arm_key(arm)
    for shared in readonly_roots():  # checked at run start (verify_all)
        there = shared / "arms" / key
        if _installed(there) and (got := _read(arm, runtime, there)):
            return got
    final = arms_dir / key
    if _installed(final) and (got := _read(arm, runtime, final)):
        return got
    with open(arms_dir / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "arm.json").is_file() and not (final / packs.CONTENT).exists():
            packs.write_content(final)  # installed before content manifests: adopted once
        if _installed(final) and (got := _read(arm, runtime, final)):
            return got
        on = None
        if arm.overlay is not None:  # the arm it overlays, from the cache or installed now
            base = materialise(arm.overlay.on, runtime, root)
            on = Installed(base.arm.id, base.key, base.site)
        staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=arms_dir))
        try:
            install(arm, runtime, staging, key, on)
            packs.write_content(staging)
            if final.exists():
                shutil.rmtree(final)
            os.rename(staging, final)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    got = _read(arm, runtime, final)
    if got is None:
        raise ArmError(arm.id, f"{final / 'arm.json'}: not readable after installing it")
    return got


def readonly_roots() -> list[Path]:
    """Arm caches to use but never write ($MLAGATE_ARMS_READONLY, ':'-separated): on a runner,
    the main branch's verified arms, read by pull-request jobs that install into a cache of their
    own."""
    return [Path(p) for p in os.environ.get("MLAGATE_ARMS_READONLY", "").split(os.pathsep) if p]


def _installed(final: Path) -> bool:
    """An arm is installed once both arm.json and its content manifest exist."""
    return (final / "arm.json").is_file() and (final / packs.CONTENT).is_file()


def verify_all(installs: dict[str, ArmInstall], trust_unchanged: bool = False) -> None:
    """Every arm still matches its content manifest; ArmError naming the first that does not.
    trust_unchanged (mlagate plan, which runs no arm): an arm none of whose files changed since
    its last full check (each file's size, mtime, ctime, inode and mode as then) is not hashed
    again; mlagate run always hashes every file."""
    for inst in installs.values():
        try:
            if trust_unchanged and _unchanged(inst.dir):
                continue
            before = _stats(inst.dir)
            packs.verify(inst.dir)
            _remember(inst.dir, before)
        except packs.PackError as exc:
            raise ArmError(
                inst.arm.id, f"{exc}; refusing to run it (reinstall: delete {inst.dir})"
            ) from None


def _verified_path(arm_dir: Path) -> Path:
    return arm_dir.parent.parent / "scans" / f"{arm_dir.name}.verified.json"  # CACHE/scans


def _stats(arm_dir: Path) -> tuple[str, str]:
    """sha256 of the content manifest, and of every file's name and stat (what a write, a
    rename or a chmod changes: ctime cannot be set back)."""
    h = hashlib.sha256()
    todo = [str(arm_dir)]
    while todo:
        top = todo.pop()
        with os.scandir(top) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                if e.name not in packs.SKIP_DIRS:
                    todo.append(e.path)
                continue
            st = e.stat(follow_symlinks=False)
            h.update(
                f"{e.path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}\0"
                f"{st.st_mode}\n".encode("utf-8", "surrogateescape")
            )
    content = hashlib.sha256(documents.read_bytes(arm_dir / packs.CONTENT)).hexdigest()
    return content, h.hexdigest()


def _unchanged(arm_dir: Path) -> bool:
    """Whether the arm's files stand as at its last full check (and a signed arm's signature is
    still the pack key's)."""
    try:
        record = documents.load(_verified_path(arm_dir), "arm-verified")
        content, stats = _stats(arm_dir)
    except (documents.DocumentError, OSError):
        return False
    if (record["key"], record["content"], record["stats"]) != (arm_dir.name, content, stats):
        return False
    key = packs.signing_key() if (arm_dir / packs.SIGNATURE).exists() else None
    if key is not None:
        packs.check_signature(arm_dir, key)
    return True


def _remember(arm_dir: Path, before: tuple[str, str]) -> None:
    """Record the arm's files as they stood through a full check, if nothing changed while it
    ran (nothing on a read-only cache)."""
    try:
        content, stats = _stats(arm_dir)
        if (content, stats) != before:
            return
        path = _verified_path(arm_dir)
        doc = {"schema": documents.KINDS["arm-verified"], "key": arm_dir.name}
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps({**doc, "content": content, "stats": stats}), encoding="utf-8")
        os.replace(tmp, path)
    except (OSError, documents.DocumentError):
        pass


def read_manifest(arm_dir: Path) -> dict:
    """The arm's arm.json as mlagate.arm/1 (one written without a schema field upgraded);
    documents.DocumentError naming the file and key."""
    return documents.load(Path(arm_dir) / "arm.json", "arm")


def _read(arm: Arm, runtime: Runtime, path: Path) -> ArmInstall | None:
    """The installed arm; None when its arm.json cannot be read as a manifest (it is then
    installed again: an arm of the cache, never a traceback)."""
    try:
        manifest = read_manifest(path)
    except documents.DocumentError:
        return None
    return ArmInstall(arm, runtime, path.name, path, manifest["version"], tuple(manifest["notes"]))


def materialise_all(
    matrix: Matrix, only: list[str] | None = None, root: Path | None = None
) -> dict[str, ArmInstall]:
    arms = [a for a in matrix.arms.values() if only is None or a.id in only]
    cached = Path(root) if root else cache_root()
    todo = [a.id for a in arms if not (cached / "arms" / arm_key(a) / "arm.json").is_file()]
    out = {}
    for a in arms:
        if a.id not in todo:  # an install says so, at a terminal or in a CI log
            out[a.id] = materialise(a, matrix.runtimes[a.runtime], root)
            continue
        print(
            f"mlagate: installing arm {a.id} ({todo.index(a.id) + 1} of {len(todo)}): "
            f"{describe(a)}",
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


def describe(arm: Arm) -> str:
    """Where an arm comes from, in a few words."""
    if arm.overlay is not None:
        return f"arm {arm.overlay.on.id} with {len(arm.overlay.files)} files overlaid"
    extra = (
        f" and {', '.join(arm.activate.install)}" if arm.activate and arm.activate.install else ""
    )
    return arm.source.describe() + extra


def export(installs: dict[str, ArmInstall], out: Path) -> Path:
    """Pack materialised arms into one tar.gz, for runners without registry access
    (packs.PackError)."""
    return packs.export([inst.dir for inst in installs.values()], out)


def import_cache(
    archive: Path, root: Path | None = None, limits: packs.Limits | None = None
) -> list[str]:
    """Unpack an exported arm cache, all or nothing (mlagate.arm.packs); returns the keys it
    held."""
    return packs.import_pack(
        archive, Path(root) if root else cache_root(), limits or packs.Limits()
    )
