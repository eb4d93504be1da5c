"""A small pytest plugin for mlagate run's child: which case each worker is running.

Each pytest process (an xdist worker, or the one serial process) keeps one file,
OUT/.events/<worker>.json, naming the case it runs now; the parent reads those files and the
results folder to show progress, so it needs no pytest internals. Loaded with -p
mlagate.harness.events.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

EVENTS = ".events"


def _file(config) -> Path | None:
    out = config.getoption("--mlagate-out", default=None)
    if not out:
        return None
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    return Path(out) / EVENTS / f"{worker}.json"


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    path = _file(item.config)
    case = getattr(getattr(item, "callspec", None), "params", {}).get("mla_case")
    if path is not None and case is not None:
        _write(path, {"case": case.id, "started": time.time()})


def pytest_sessionfinish(session):
    path = _file(session.config)
    if path is not None and path.exists():
        _write(path, {"case": None, "started": time.time()})


def current(out: Path) -> dict[str, dict]:
    """worker -> {"case", "started"} for every worker that runs a case now."""
    now = {}
    for p in sorted((Path(out) / EVENTS).glob("*.json")):
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("case"):
            now[p.stem] = data
    return now
