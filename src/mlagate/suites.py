"""A suite's declaration, read from its own file, so that adding a suite touches only that
file and a matrix:

- GATES: the `gates` keys it takes, typed with mlagate.gates (required);
- CONTROLS_FAIL: a control arm must fail it (the suite detects the single-query guard that
  stock and base arms carry);
- FAILURE_KINDS: the kinds of failure its test can produce (snake_case ids; mlagate.harness
  Failed carries them, `runtime_raised` is the policy's);
- CONTROL_KINDS: with CONTROLS_FAIL, the kinds a control arm's defect produces (a control
  failing with another kind is a changed failure);
- PLAN_CHECK: what a sparse suite can tell before running, from a geometry's pool width and
  top-k and the gates (a grid that cannot cover what the suite needs is refused when the
  matrix is read);
- ORDER: where the report lists it among the suites of its kind (lower first);
- KEY_FIGURES: the numbers the history follows per commit (KeyFigure);
- PLOTS: the report section drawn from its results (PlotSection).

The file is imported on its own (never through pytest) to read those names; suites import
only the standard library and mlagate's parent-side modules at their top.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Row = Mapping[str, Any]  # one result document (mlagate.results)


class DescriptorError(ValueError):
    """A suite file that does not declare its gates; one line."""


@dataclass(frozen=True)
class KeyFigure:
    """A number the history follows per (module, arm, geometry, backend) from one result:
    `value(row)` (None, or KeyError / TypeError / ValueError: the row has none), and where the
    suite measures one, `interval(row)`: its 95 % interval (mlagate compare, which calls a rise
    worse unless higher_is_worse is False)."""

    id: str
    label: str
    unit: str
    value: Callable[[Row], float | None]
    interval: Callable[[Row], tuple[float, float] | None] | None = None
    higher_is_worse: bool = True


@dataclass(frozen=True)
class PlotSection:
    """A section of the commit page: `plots(rows)` draws the suite's results
    (mlagate.report.plots.Plot), under a heading and one paragraph saying how to read them."""

    id: str
    heading: str
    blurb: str
    plots: Callable[[list[Row]], list]


@dataclass(frozen=True)
class Descriptor:
    path: Path
    gates: Mapping[str, Any]
    controls_fail: bool
    plan_check: Callable[[int, int, Mapping[str, Any]], str | None] | None = (
        None  # (kpool, top-k, gates) -> why not
    )
    order: int = 1000
    key_figures: tuple[KeyFigure, ...] = ()
    plots: PlotSection | None = None
    failure_kinds: tuple[str, ...] = ()
    control_kinds: tuple[str, ...] = ()


def _kinds(module, path: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """FAILURE_KINDS and CONTROL_KINDS, checked: snake_case ids, controls' among the suite's."""
    kinds = getattr(module, "FAILURE_KINDS", ("runtime_raised",))
    control = getattr(module, "CONTROL_KINDS", ())
    for name, value in (("FAILURE_KINDS", kinds), ("CONTROL_KINDS", control)):
        if not isinstance(value, (tuple, list)) or not all(
            isinstance(k, str) and k.isidentifier() and k == k.lower() for k in value
        ):
            raise DescriptorError(f"{path}: {name} must be a sequence of snake_case ids")
    stray = [k for k in control if k not in kinds]
    if stray:
        raise DescriptorError(f"{path}: CONTROL_KINDS {stray[0]!r} is not in FAILURE_KINDS")
    if bool(getattr(module, "CONTROLS_FAIL", False)) and not control:
        raise DescriptorError(
            f"{path}: CONTROLS_FAIL needs CONTROL_KINDS (the kinds a control's defect produces)"
        )
    return tuple(kinds), tuple(control)


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
        raise DescriptorError(
            f"{path}: declares no GATES mapping (the suite's gate keys and their types)"
        )
    order = getattr(module, "ORDER", 1000)
    if type(order) is not int:
        raise DescriptorError(f"{path}: ORDER must be an integer")
    figures = tuple(getattr(module, "KEY_FIGURES", ()))
    if not all(isinstance(f, KeyFigure) for f in figures):
        raise DescriptorError(f"{path}: KEY_FIGURES must be a sequence of mlagate.suites.KeyFigure")
    plots = getattr(module, "PLOTS", None)
    if plots is not None and not isinstance(plots, PlotSection):
        raise DescriptorError(f"{path}: PLOTS must be a mlagate.suites.PlotSection")
    return Descriptor(
        path,
        gates,
        bool(getattr(module, "CONTROLS_FAIL", False)),
        getattr(module, "PLAN_CHECK", None),
        order,
        figures,
        plots,
        *_kinds(module, path),
    )


@dataclass(frozen=True)
class Entry:
    """A suite the report knows: its id, kind and file."""

    id: str
    kind: str
    path: Path | None

    @property
    def descriptor(self) -> Descriptor | None:
        """The file's declarations; None when the file is gone or broken (a report of old
        results still lists the suite, without its figures)."""
        if self.path is None or not self.path.is_file():
            return None
        try:
            return load(self.path)
        except DescriptorError:
            return None


def shipped(root: Path) -> dict[str, Entry]:
    """The suites under a suites folder: <root>/<kind>/test_<id>.py."""
    return {
        p.stem.removeprefix("test_"): Entry(p.stem.removeprefix("test_"), p.parent.name, p)
        for p in sorted(root.glob("*/test_*.py"))
    }
