"""The one reader of mlagate's JSON documents: results, merged results, manifests, gate plans,
run plans, cost tables, history figures, arm content manifests, kill matrices, merge records,
machine records and comparisons.

A document is read as bytes (regular files only, at most MAX_BYTES), parsed with guards against
deep nesting and huge numbers, and validated against its JSON Schema (src/mlagate/schemas/,
chosen by the document's `schema` field) with the jsonschema library. Every problem is a
DocumentError of one line naming the file and the key. A document of an older version is
validated against its own schema and upgraded (mlagate.upgrade), then validated again.
"""

from __future__ import annotations

import functools
import json
import os
import stat
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from mlagate import upgrade

MAX_BYTES = 256 << 20
KINDS = {
    "result": "mlagate.result/2",
    "merged": "mlagate.merged/1",
    "manifest": "mlagate.manifest/1",
    "plan": "mlagate.plan/1",
    "costs": "mlagate.costs/1",
    "figures": "mlagate.figures/1",
    "arm-content": "mlagate.arm-content/1",
    "run-plan": "mlagate.run-plan/1",
    "kill-matrix": "mlagate.mutate/1",
    "suite": "mlagate.suite/1",
    "arm-scan": "mlagate.arm-scan/1",
    "merge": "mlagate.merge/1",
    "machine": "mlagate.machine/1",
    "compare": "mlagate.compare/1",
}


class DocumentError(ValueError):
    """A document that cannot be read or does not match its schema; one line."""


def read_bytes(path: Path, max_bytes: int = MAX_BYTES) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError) as exc:
        raise DocumentError(
            f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise DocumentError(f"{path}: not a regular file")
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise DocumentError(f"{path}: larger than {max_bytes} bytes")
    return data


def parse(data: bytes | str, where: str) -> Any:
    """JSON text as Python values; DocumentError for bad bytes or JSON, deep nesting, big ints."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        return json.loads(text)
    except UnicodeDecodeError as exc:
        raise DocumentError(f"{where}: not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise DocumentError(
            f"{where}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise DocumentError(f"{where}: not valid JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise DocumentError(f"{where}: not valid JSON: {str(exc).splitlines()[0][:120]}") from None


@functools.cache
def _validator(kind: str) -> jsonschema.protocols.Validator:
    text = (
        resources.files("mlagate").joinpath("schemas", f"{kind}.json").read_text(encoding="utf-8")
    )
    schema = json.loads(text)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate(data: Any, kind: str, where: str) -> dict:
    """data if it is a document of this kind (an older version upgraded to the current one);
    DocumentError naming the first bad key."""
    want = KINDS[kind]
    got = data.get("schema") if isinstance(data, dict) else None
    steps = upgrade.STEPS.get(kind, {})
    while isinstance(got, str) and got in steps:
        schema_file, step = steps[got]
        data = step(_check(data, schema_file, where))
        got = data.get("schema")
    if got != want:
        shown = repr(got)[:60] if isinstance(got, (str, int, float, type(None))) else "not a string"
        raise DocumentError(f"{where}: schema is {shown}, expected {want}")
    return _check(data, kind, where)


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
