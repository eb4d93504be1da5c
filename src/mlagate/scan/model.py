"""The scan's findings and report, the rules they name, and how a source file is read (never a
FIFO, a device or a file past the size cap: those are refused before they are opened)."""

from __future__ import annotations

import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path

RULES = {
    "MLA001": "single-query guard on the absorbed path",
    "MLA002": "single-token guard on the indexer's pool reuse",
    "MLA003": "the query fold and the output unfold do not read one decision",
    "MLA004": "MLA module not registered in the matrix",
    "MLA005": "allowlist entry that matches nothing",
    "MLA006": "file could not be read or parsed",
    "MLA007": "fixed-width threshold on the absorbed path",
    "MLA008": "cache-length floor on the absorbed-path decision",
}
FAILING = {"MLA001", "MLA002", "MLA003", "MLA004", "MLA007", "MLA008"}
NOTHING_SCANNED = 3  # exit status when no file could be parsed: the scan measured nothing
MAX_BYTES = 8 * 1024 * 1024  # a source file larger than this is reported, not read


@dataclass
class Finding:
    rule: str
    path: str
    line: int
    column: int
    message: str
    module: str = ""
    guard: str = ""
    gates: str = ""
    allowed: str = ""  # the allowlist reason, when one matched
    test_span: tuple[int, int, int, int] | None = (
        None  # the guard's test: line, column, end line, end column (1-based)
    )
    suggestion: str = ""  # the change that fixes it, in words and code

    @property
    def failing(self) -> bool:
        return self.rule in FAILING and not self.allowed


@dataclass
class ScanReport:
    roots: list[str]
    files: int = 0
    parsed: int = 0  # files read and parsed (the others are MLA006)
    findings: list[Finding] = field(default_factory=list)
    guards: list[Finding] = field(
        default_factory=list
    )  # every single-query guard seen, whatever it gates
    modules: list[tuple[str, str]] = field(default_factory=list)
    module_names: set[str] = field(default_factory=set)
    # where each module and MLA class is: module -> path, (module, class) -> (path, line)
    module_paths: dict[str, str] = field(default_factory=dict)
    class_sites: dict[tuple[str, str], tuple[str, int]] = field(default_factory=dict)
    # floors in helpers, paired once every file is read (mlagate.scan.helpers): not reported
    decision_calls: set[tuple[str, str, str]] = field(default_factory=set)
    helper_floors: list[tuple] = field(default_factory=list)
    # module -> its relative imports that find nothing beside its file (an overlay's file)
    unimportable: dict[str, list[str]] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        if not self.parsed:
            return NOTHING_SCANNED
        return 1 if any(f.failing for f in self.findings) else 0

    def to_json(self) -> dict:
        return {
            "schema": "mlagate.scan/1",
            "roots": self.roots,
            "files": self.files,
            "parsed": self.parsed,
            "findings": [asdict(f) for f in self.findings],
            "guards": [asdict(g) for g in self.guards],
            "modules": [
                {"module": m, "class": c, "path": self.class_sites.get((m, c), ("", 0))[0]}
                for m, c in self.modules
            ],
        }


class Unreadable(OSError):
    """A source file refused before or while reading it (its message says why)."""


_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


def special(path: Path) -> str | None:
    """What path is when it is not a regular file or a folder (a FIFO, a device, ...), following
    links; None for a file, a folder, or a path that cannot be looked at."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def read_source(path: Path) -> str:
    """The text of a source file. Opened without blocking and checked on the open descriptor
    (a FIFO or a device is refused before a byte is read, a link to /dev/zero included), at
    most MAX_BYTES, decoded as UTF-8 with replacement."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable(f"{_KINDS.get(stat.S_IFMT(info.st_mode), 'not a regular file')}")
        if info.st_size > MAX_BYTES:
            raise Unreadable(f"{info.st_size} bytes, over the {MAX_BYTES}-byte cap")
        data = b""
        while len(data) <= MAX_BYTES:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            data += chunk
        if len(data) > MAX_BYTES:
            raise Unreadable(f"over the {MAX_BYTES}-byte cap")
    finally:
        os.close(fd)
    return data.decode("utf-8", errors="replace")


def why(exc: BaseException) -> str:
    """One line: what went wrong reading or parsing a file."""
    if isinstance(exc, Unreadable):
        return f"not read: {exc}"
    text = getattr(exc, "strerror", None) or (str(exc).splitlines() or [""])[0]
    return f"not parsed: {exc.__class__.__name__}: {text}"


def unparsed(display: str, exc: BaseException, line: int = 1) -> Finding:
    return Finding("MLA006", display, line or 1, 1, why(exc))
