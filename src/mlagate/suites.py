"""A suite's declaration, read from its own file: the `gates` keys it takes (GATES, typed with
mlagate.gates) and whether a control arm must fail it (CONTROLS_FAIL: the suite detects
the single-query guard that stock and base arms carry), and optionally PLAN_CHECK: what a
sparse suite can tell before running, from a geometry's pool width and top-k and the gates
(a grid that cannot cover what the suite needs is refused when the matrix is read).

The file is imported on its own (never through pytest) to read those two names; suites import
only the standard library and mlagate's parent-side modules at their top.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class DescriptorError(ValueError):
    """A suite file that does not declare its gates; one line."""


@dataclass(frozen=True)
class Descriptor:
    path: Path
    gates: Mapping[str, Any]
    controls_fail: bool
    plan_check: Callable[[int, int, Mapping[str, Any]], str | None] | None = None  # (kpool, top-k, gates) -> why not


@functools.cache
def load(path: Path) -> Descriptor:
    spec = importlib.util.spec_from_file_location(f"mlagate_suite_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise DescriptorError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001  (a broken suite file is a configuration error, one line)
        raise DescriptorError(f"{path}: cannot be imported ({type(exc).__name__}: {exc})") from None
    gates = getattr(module, "GATES", None)
    if not isinstance(gates, Mapping):
        raise DescriptorError(f"{path}: declares no GATES mapping (the suite's gate keys and their types)")
    return Descriptor(path, gates, bool(getattr(module, "CONTROLS_FAIL", False)), getattr(module, "PLAN_CHECK", None))
