"""Reading and writing inside folders mlagate owns: names made plain path components, no link
followed on write, no special file (FIFO, device) opened, copies capped in size, atomic writes
under unpredictable names. Each refusal is an UnsafePath of one line."""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path

MAX_COPY_BYTES = 1 << 30  # one file copied by merge (a log, a result)
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}", re.ASCII)


class UnsafePath(ValueError):
    """A path mlagate will not read or write: a link, a special file, a name that is not one
    plain component; one line."""


def shown(path) -> str:
    """A path as text that can always be printed and written as UTF-8 (a name that is not UTF-8
    shows U+FFFD where its bad bytes are)."""
    return os.fsencode(path).decode("utf-8", "replace")


def safe_name(name: str) -> str:
    """One plain path component made of name: never '..', '/', a leading '.' or odd bytes."""
    if _NAME.fullmatch(name):
        return name
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", shown(name))[:100].lstrip(".") or "_"
    return cleaned


def listing(folder: Path) -> list[str]:
    """The names in a folder a user gave; UnsafePath, one line, when it cannot be read (no
    permission, not a folder)."""
    try:
        return os.listdir(folder)
    except OSError as exc:
        raise UnsafePath(f"{shown(folder)}: cannot read: {exc.strerror}") from None


def no_links(folder: Path, root: Path) -> None:
    """UnsafePath when folder, anything between root and it, or anything inside it is a link or
    a special file: mlagate is about to write there and never follows a link on write."""
    folder, root = Path(folder), Path(root)
    rel = folder.relative_to(root)
    at = root
    for part in rel.parts:
        at = at / part
        if at.is_symlink():
            raise UnsafePath(f"{at}: a link inside {root}; refusing to write through it")
    if not folder.exists():
        return
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            mode = os.lstat(os.path.join(dirpath, name)).st_mode
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                raise UnsafePath(
                    f"{shown(os.path.join(dirpath, name))}: a link or special file inside "
                    f"{shown(root)}; refusing to write there"
                )


def _open_regular(path: Path) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise UnsafePath(f"{shown(path)}: cannot read: {exc.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_COPY_BYTES:
        os.close(fd)
        why = "not a regular file" if not stat.S_ISREG(st.st_mode) else "too large to copy"
        raise UnsafePath(f"{shown(path)}: {why}; refusing to copy it")
    return fd


def copy_file(src: Path, target: Path, name: str) -> Path:
    """src (a regular file, never a link) into target/name, created new (never through a link);
    the name is made one plain component."""
    dest = Path(target) / safe_name(name)
    fd = _open_regular(Path(src))
    with os.fdopen(fd, "rb") as fin:
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(out, "wb") as fout:
            left = MAX_COPY_BYTES
            while left > 0 and (block := fin.read(min(left, 1 << 20))):
                fout.write(block)
                left -= len(block)
    return dest


def tree_files(src: Path) -> list[Path]:
    """The files of a folder to copy (relative paths); UnsafePath for a link or special file
    anywhere in it, src included, before anything is copied."""
    src = Path(src)
    if not stat.S_ISDIR(os.lstat(src).st_mode):
        raise UnsafePath(f"{shown(src)}: not a folder (a link or a file); refusing to copy it")
    files = []
    for dirpath, dirnames, filenames in os.walk(src):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode):
                files.append(path.relative_to(src))
            elif not stat.S_ISDIR(mode):
                raise UnsafePath(f"{shown(path)}: a link or special file; refusing to copy it")
    return files


def copy_tree(src: Path, files: list[Path], dest: Path) -> None:
    """The files tree_files(src) listed, into dest (names made plain components)."""
    for rel in files:
        target = Path(dest, *(safe_name(p) for p in rel.parts[:-1]))
        target.mkdir(parents=True, exist_ok=True)
        copy_file(Path(src, rel), target, rel.parts[-1])


def write_text(path: Path, text: str) -> None:
    """Write atomically: a new file of an unpredictable name, renamed over path (a link at path
    is replaced, never followed)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{safe_name(path.name)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
