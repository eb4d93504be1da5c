"""The one reader of mlagate's JSON documents: results, merged results, manifests, job lists,
hand-offs, cost tables, history figures, arm manifests (arm.json) and content manifests, kill
matrices, merge records, machine records, head runs, comparisons and result-store entries.

A document is read as bytes (regular files only, at most MAX_BYTES), parsed with guards against
deep nesting and huge numbers, and validated against its JSON Schema (src/mlagate/schemas/,
chosen by the document's `schema` field) with the jsonschema library. Every problem is a
DocumentError of one line naming the file and the key. A document of an older version is
validated against its own schema and upgraded (mlagate.upgrade), then validated again; so is a
document written before its kind had a `schema` field (arm.json), where the upgrade knows one.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import stat
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from mlagate import upgrade
from mlagate.caseid import CaseId, CaseIdError

MAX_BYTES = 256 << 20
MAX_INT = 1 << 63  # no document holds a larger integer; a bigger one is a forged document
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
KINDS = {
    "result": "mlagate.result/3",
    "merged": "mlagate.merged/1",
    "manifest": "mlagate.manifest/1",
    "plan": "mlagate.plan/1",
    "costs": "mlagate.costs/1",
    "figures": "mlagate.figures/1",
    "arm": "mlagate.arm/1",
    "arm-content": "mlagate.arm-content/1",
    "run-plan": "mlagate.run-plan/1",
    "kill-matrix": "mlagate.mutate/1",
    "suite": "mlagate.suite/1",
    "arm-scan": "mlagate.arm-scan/1",
    "arm-verified": "mlagate.arm-verified/1",
    "merge": "mlagate.merge/1",
    "machine": "mlagate.machine/1",
    "compare": "mlagate.compare/1",
    "head-run": "mlagate.head-run/1",
    "stored-result": "mlagate.stored-result/1",
    "calibration": "mlagate.calibration/1",
    "class-calibration": "mlagate.class-calibration/1",
    "bisect": "mlagate.bisect/1",
}


class DocumentError(ValueError):
    """A document that cannot be read or does not match its schema; one line."""


def open_regular(path: Path) -> int:
    """A descriptor of path opened for reading; DocumentError, before anything is read, when it
    is not a regular file (a FIFO is opened without blocking, a device is never read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError) as exc:
        raise DocumentError(
            f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise DocumentError(f"{path}: not a regular file")
    os.set_blocking(fd, True)
    return fd


def read_bytes(path: Path, max_bytes: int = MAX_BYTES) -> bytes:
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise DocumentError(f"{path}: larger than {max_bytes} bytes")
    return data


def _int(text: str) -> int:
    if len(text.lstrip("-")) > 19 or abs(int(text)) >= MAX_INT:
        raise ValueError(f"an integer of {len(text)} digits (at most 2^63 in magnitude)")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"a number out of range ({text[:40]})")
    return value


def _constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def _lone_surrogate(data: Any) -> bool:
    """Whether a string of data (keys included) holds half a UTF-16 pair."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def parse(data: bytes | str, where: str) -> Any:
    """JSON text as Python values; DocumentError for bad bytes or JSON, deep nesting, integers
    past 2^63, NaN, Infinity and numbers that overflow, and a string holding a lone surrogate."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except UnicodeDecodeError as exc:
        raise DocumentError(f"{where}: not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise DocumentError(
            f"{where}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise DocumentError(f"{where}: not valid JSON: nested too deeply") from None
    except ValueError as exc:  # from the number hooks, or an int past Python's digit limit
        raise DocumentError(f"{where}: not valid JSON: {str(exc).splitlines()[0][:120]}") from None
    if _SURROGATE.search(text) and _lone_surrogate(value):
        raise DocumentError(f"{where}: not valid JSON: a string holds a lone UTF-16 surrogate")
    return value


@functools.cache
def _validator(kind: str) -> jsonschema.protocols.Validator:
    text = (
        resources.files("mlagate").joinpath("schemas", f"{kind}.json").read_text(encoding="utf-8")
    )
    schema = json.loads(text)  # a shipped schema (each checked against its metaschema: tests)
    return jsonschema.validators.validator_for(schema)(schema)


def validate(data: Any, kind: str, where: str) -> dict:
    """data if it is a document of this kind (an older version upgraded to the current one);
    DocumentError naming the first bad key."""
    want = KINDS[kind]
    got = data.get("schema") if isinstance(data, dict) else None
    steps = upgrade.STEPS.get(kind, {})
    while (got is None or isinstance(got, str)) and got in steps:  # None: no schema field
        schema_file, step = steps[got]
        data = step(_check(data, schema_file, where))
        got = data.get("schema")
    if got != want:
        shown = repr(got)[:60] if isinstance(got, (str, int, float, type(None))) else "not a string"
        raise DocumentError(f"{where}: schema is {shown}, expected {want}")
    return _case_ids(_check(data, kind, where), kind, where)


def _case_ids(data: dict, kind: str, where: str) -> dict:
    """data when every case id it carries parses (mlagate.caseid); DocumentError naming the key
    and the id otherwise."""
    if kind in ("result", "stored-result"):
        found = [("case_id", data["case_id"])]
    elif kind == "manifest":
        found = [(f"cases.{i}", c) for i, c in enumerate(data["cases"])]
    elif kind == "plan":
        found = [
            (f"jobs.{j}.case_ids.{i}", c)
            for j, job in enumerate(data["jobs"])
            for i, c in enumerate(job["case_ids"])
        ]
    else:
        return data
    for key, text in found:
        try:
            CaseId.parse(text)
        except CaseIdError as exc:
            raise DocumentError(f"{where}: {key}: {exc}") from None
    return data


def _check(data: dict, schema_file: str, where: str) -> dict:
    try:
        error = jsonschema.exceptions.best_match(_validator(schema_file).iter_errors(data))
    except RecursionError:
        raise DocumentError(f"{where}: nested too deeply") from None
    if error is not None:
        key = ".".join(str(p) for p in error.absolute_path) or "<root>"
        if error.validator == "required":
            missing = next((k for k in error.validator_value if k not in error.instance), "?")
            raise DocumentError(f"{where}: {key}: missing key {missing!r}")
        raise DocumentError(f"{where}: {key}: {error.message.splitlines()[0][:160]}")
    return data


def load(path: Path, kind: str) -> dict:
    """Read, parse and validate one document."""
    return validate(parse(read_bytes(Path(path)), str(path)), kind, str(path))
