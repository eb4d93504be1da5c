"""Arm packs and arm content manifests.

Every installed arm holds `content.json`: the sha256 of each of its files (byte code caches
under __pycache__ excepted). It is written at install and checked at export, at import (before
an arm is renamed into the cache) and at run start (`verify`).

A pack is read member by member with our own checks rather than tarfile's extraction filters
(which older CPython 3.11/3.12 releases do not fully enforce): regular files and folders only,
names relative and under arms/<key>/, a cap on the member count, on each member's size and on
the total. Everything lands in a staging folder first; the pack is refused whole on the first
problem and nothing reaches the cache.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import io
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from mlagate import documents
from mlagate.hashing import file_sha

CONTENT = "content.json"
CONTENT_SCHEMA = "mlagate.arm-content/1"
SIGNATURE = "signature"  # HMAC-SHA256 of the arm key and content.json, by the exporter's key
KEY_ENV = "MLAGATE_PACK_KEY"  # a file of at least 32 bytes shared by exporter and importers
KEY = re.compile(r"^[0-9a-f]{20}$")
SKIP_DIRS = ("__pycache__",)
NOT_CONTENT = (CONTENT, SIGNATURE)


@dataclass(frozen=True)
class Limits:
    members: int = 200_000
    member_bytes: int = 1 << 30
    total_bytes: int = 4 << 30


class PackError(ValueError):
    """A pack or an installed arm that cannot be trusted; str() is one line."""


def _files(arm_dir: Path) -> Iterable[tuple[str, Path]]:
    """(relative posix name, path) of every file the manifest covers; links are refused."""
    for dirpath, dirnames, filenames in os.walk(arm_dir):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for d in dirnames:
            if os.path.islink(os.path.join(dirpath, d)):
                raise PackError(f"{arm_dir}: {os.path.join(dirpath, d)} is a link")
        for name in sorted(filenames):
            path = Path(dirpath, name)
            rel = path.relative_to(arm_dir).as_posix()
            if rel in NOT_CONTENT:
                continue
            if not stat.S_ISREG(path.lstat().st_mode):
                raise PackError(f"{arm_dir}: {rel} is not a regular file")
            yield rel, path


def content(arm_dir: Path) -> dict[str, str]:
    return {rel: file_sha(path) for rel, path in _files(arm_dir)}


def write_content(arm_dir: Path) -> dict[str, str]:
    """Write the arm's content manifest (at install, before the arm is renamed into the cache)."""
    files = content(arm_dir)
    doc = {"schema": CONTENT_SCHEMA, "files": files}
    (arm_dir / CONTENT).write_text(json.dumps(doc, indent=0, sort_keys=True), encoding="utf-8")
    return files


def read_content(arm_dir: Path) -> dict[str, str]:
    path = arm_dir / CONTENT
    if not path.exists():
        raise PackError(f"{path}: no content manifest")
    try:
        return documents.load(path, "arm-content")["files"]
    except documents.DocumentError as exc:
        raise PackError(str(exc)) from None


def signing_key() -> bytes | None:
    """The pack key named by $MLAGATE_PACK_KEY (None when unset); PackError when it cannot be
    read or is shorter than 32 bytes."""
    name = os.environ.get(KEY_ENV)
    if not name:
        return None
    try:
        key = documents.read_bytes(Path(name), max_bytes=4096)
    except documents.DocumentError as exc:
        raise PackError(f"{KEY_ENV}: {exc}") from None
    if len(key.strip()) < 32:
        raise PackError(f"{KEY_ENV}: {name}: a pack key is at least 32 bytes")
    return key.strip()


def signature(key: bytes, arm_key: str, content_json: bytes) -> str:
    """What SIGNATURE holds: the arm key and its whole content manifest, signed."""
    message = b"mlagate.pack/1\n" + arm_key.encode() + b"\n" + content_json
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def check_signature(arm_dir: Path, key: bytes) -> None:
    """PackError unless the arm's SIGNATURE is the key's signature of its folder name (the arm
    key) and its content manifest."""
    sig, content_path = arm_dir / SIGNATURE, arm_dir / CONTENT
    try:
        got = documents.read_bytes(sig, max_bytes=200).decode("ascii", "replace").strip()
        want = signature(key, arm_dir.name, documents.read_bytes(content_path))
    except documents.DocumentError:
        raise PackError(f"arm {arm_dir.name}: not signed (no readable {SIGNATURE})") from None
    if not hmac.compare_digest(got, want):
        raise PackError(
            f"arm {arm_dir.name}: its signature is not {KEY_ENV}'s: changed after export, or "
            "exported with another key"
        )


def verify(arm_dir: Path) -> None:
    """Raise PackError naming the first file that differs from the arm's content manifest, or
    (an imported arm, with the pack key set) when the manifest is not the one signed."""
    key = signing_key() if (arm_dir / SIGNATURE).exists() else None
    if key is not None:
        check_signature(arm_dir, key)
    want = read_content(arm_dir)
    have = content(arm_dir)
    for rel in sorted(set(want) | set(have)):
        if rel not in have:
            raise PackError(
                f"arm {arm_dir.name}: {rel} is missing (content manifest {arm_dir / CONTENT})"
            )
        if rel not in want:
            raise PackError(
                f"arm {arm_dir.name}: {rel} is not in its content manifest (an added file)"
            )
        if have[rel] != want[rel]:
            raise PackError(f"arm {arm_dir.name}: {rel} changed since install (sha256 differs)")


# --- export / import ---------------------------------------------------------------------


def export(arm_dirs: Iterable[Path], out: Path) -> Path:
    """Pack installed arms (each checked against its manifest first) into one tar.gz."""
    dirs = list(arm_dirs)
    key = signing_key()
    if key is None:
        raise PackError(
            f"--export: no pack key: set {KEY_ENV} to a file of at least 32 random bytes that the "
            "importing runners hold too (runners/README.md); an unsigned pack proves nothing"
        )
    for d in dirs:
        if not (d / CONTENT).exists():
            write_content(d)  # an arm installed before content manifests existed
        verify(d)
    tmp = out.with_name(f".{out.name}.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for d in dirs:
            added: set[str] = set()
            tar.add(d, arcname=f"arms/{d.name}", recursive=False)
            for rel, path in [(CONTENT, d / CONTENT), *_files(d)]:
                parts = PurePosixPath(rel).parts[:-1]
                for i in range(1, len(parts) + 1):
                    sub = "/".join(parts[:i])
                    if sub not in added:
                        added.add(sub)
                        tar.add(d / sub, arcname=f"arms/{d.name}/{sub}", recursive=False)
                tar.add(path, arcname=f"arms/{d.name}/{rel}", recursive=False)
            sig = signature(key, d.name, (d / CONTENT).read_bytes()).encode()
            info = tarfile.TarInfo(f"arms/{d.name}/{SIGNATURE}")
            info.size, info.mode, info.mtime = len(sig), 0o644, int(os.stat(d / CONTENT).st_mtime)
            tar.addfile(info, io.BytesIO(sig))
    os.replace(tmp, out)
    return out


def _check_member(m: tarfile.TarInfo, limits: Limits) -> tuple[str, ...]:
    """The member's path parts under arms/, or PackError."""
    name = m.name
    pure = PurePosixPath(name)
    if not name or name.startswith("/") or pure.is_absolute() or "\\" in name or "\x00" in name:
        raise PackError(f"member {name!r}: an absolute or odd path")
    parts = tuple(p for p in pure.parts if p != ".")
    if any(p == ".." for p in parts):
        raise PackError(f"member {name!r}: a parent ('..') path")
    if not parts or parts[0] != "arms":
        raise PackError(f"member {name!r}: outside arms/")
    if len(parts) >= 2 and not KEY.match(parts[1]):
        raise PackError(f"member {name!r}: {parts[1]!r} is not an arm key")
    if m.issym() or m.islnk():
        raise PackError(f"member {name!r}: a link ({'symbolic' if m.issym() else 'hard'})")
    if not (m.isreg() or m.isdir()):
        raise PackError(f"member {name!r}: not a regular file or folder")
    if m.isreg() and len(parts) < 3:
        raise PackError(f"member {name!r}: a file outside an arm folder")
    if m.size > limits.member_bytes:
        raise PackError(f"member {name!r}: {m.size} bytes, over the limit of {limits.member_bytes}")
    return parts


def _members(tar: tarfile.TarFile, limits: Limits) -> list[tuple[tarfile.TarInfo, tuple[str, ...]]]:
    out, total = [], 0
    for m in tar:
        if len(out) >= limits.members:
            raise PackError(f"more than {limits.members} members")
        parts = _check_member(m, limits)
        total += m.size if m.isreg() else 0
        if total > limits.total_bytes:
            raise PackError(f"members total over {limits.total_bytes} bytes")
        out.append((m, parts))
    return out


def _extract(tar: tarfile.TarFile, members, staging: Path) -> set[str]:
    """Write each member under staging; no link is ever created, files are created exclusively."""
    keys = set()
    for m, parts in members:
        if len(parts) < 2:
            continue
        keys.add(parts[1])
        target = staging.joinpath(*parts[1:])
        if m.isdir():
            target.mkdir(mode=0o755, parents=True, exist_ok=True)
            continue
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        src = tar.extractfile(m)
        mode = 0o755 if m.mode & 0o100 else 0o644
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as dst:
            left = m.size
            while left > 0:
                block = src.read(min(left, 1 << 20))
                if not block:
                    raise PackError(f"member {m.name!r}: truncated")
                dst.write(block)
                left -= len(block)
    return keys


def import_pack(archive: Path, root: Path, limits: Limits | None = None) -> list[str]:
    """Unpack a pack into the cache at root, all or nothing; returns the arm keys it held."""
    limits = limits or Limits()
    archive = Path(archive)
    try:
        st = os.stat(archive)
    except OSError as exc:
        raise PackError(f"{archive}: cannot read: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise PackError(f"{archive}: not a regular file")
    key = signing_key()
    if key is None:
        raise PackError(
            f"{archive}: refused: no pack key to check its signatures with (set {KEY_ENV} to the "
            "exporting machine's key file)"
        )
    arms_dir = Path(root) / "arms"
    arms_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".import-", dir=arms_dir))
    try:
        try:
            with tarfile.open(archive, "r:gz") as tar:
                keys = _extract(tar, _members(tar, limits), staging)
        except PackError as exc:
            raise PackError(f"{archive}: refused: {exc}") from None
        except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
            raise PackError(f"{archive}: not a readable pack ({type(exc).__name__})") from None
        for arm in sorted(keys):
            try:
                _check_staged(staging / arm, arms_dir / arm, key)
            except PackError as exc:
                raise PackError(f"{archive}: refused: {exc}") from None
        for arm in sorted(keys):
            _install_staged(staging / arm, arms_dir, arm)
        return sorted(keys)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _check_staged(staged: Path, final: Path, key: bytes) -> None:
    if not (staged / "arm.json").is_file():
        raise PackError(f"arm {staged.name}: no arm.json")
    verify(staged)  # the files against the manifest: a member not in it names itself
    check_signature(staged, key)  # the manifest against the exporter's signature
    recorded = arm_record(staged)
    if recorded.get("key") not in (None, staged.name):
        raise PackError(f"arm {staged.name}: its arm.json names the key {recorded['key']!r}")
    if final.exists():
        try:
            same = read_content(final) == read_content(staged)
        except PackError:
            same = False
        if not same:
            raise PackError(
                f"arm {final.name} is installed with other content; the pack would change it"
            )


def arm_record(arm_dir: Path) -> dict:
    """The arm's arm.json (mlagate.arm/1, through the one loader); PackError naming it."""
    try:
        return documents.load(arm_dir / "arm.json", "arm")
    except documents.DocumentError as exc:
        raise PackError(f"arm {arm_dir.name}: {exc}") from None


def _install_staged(staged: Path, arms_dir: Path, key: str) -> None:
    final = arms_dir / key
    with open(arms_dir / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not final.exists():
            os.rename(staged, final)
