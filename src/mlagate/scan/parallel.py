"""Scanning many files on several cores: contiguous chunks of the file list in worker processes,
merged in file order, so the report is the one a serial scan builds. Parsing is most of a
scan's time (`ast.parse` alone is about 2.4 s of a whole mlx-vlm tree on one core)."""

from __future__ import annotations

import os
import sys
from functools import partial

from mlagate.scan.model import ScanReport

MIN_FILES = 200  # below this, starting workers costs more than it saves
CHUNKS_PER_WORKER = 8


def cpus() -> int:
    """The CPUs this process may run on (a `taskset -c 0` child gets 1)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _chunk(scan_file, jobs) -> ScanReport:
    part = ScanReport([])
    for path, base, display in jobs:
        scan_file(path, base, display, part)
    return part


def merge(report: ScanReport, part: ScanReport) -> None:
    report.files += part.files
    report.parsed += part.parsed
    report.findings.extend(part.findings)
    report.guards.extend(part.guards)
    report.modules.extend(part.modules)
    report.module_names |= part.module_names
    for module, path in part.module_paths.items():
        report.module_paths.setdefault(module, path)
    report.class_sites.update(part.class_sites)
    report.decision_calls |= part.decision_calls
    report.helper_floors.extend(part.helper_floors)
    report.unimportable.update(part.unimportable)


def run(jobs: list, report: ScanReport, scan_file, workers: int | None = None) -> None:
    """scan_file(path, base, display, report) for every job, on up to `workers` processes
    (default: cpus()); serial when there are few files or one CPU, or when no pool can start."""
    workers = cpus() if workers is None else workers
    workers = max(1, min(workers, 8, len(jobs) // (MIN_FILES // 2) or 1))
    if workers > 1 and len(jobs) >= MIN_FILES:
        import multiprocessing  # here: `plan` imports the scanner and never scans
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        size = max(1, -(-len(jobs) // (workers * CHUNKS_PER_WORKER)))
        chunks = [jobs[i : i + size] for i in range(0, len(jobs), size)]
        context = multiprocessing.get_context("fork") if sys.platform == "linux" else None
        try:
            with ProcessPoolExecutor(workers, mp_context=context) as pool:
                parts = list(pool.map(partial(_chunk, scan_file), chunks))
        except (OSError, BrokenProcessPool, RuntimeError):
            parts = None  # no pool here (a sandbox without semaphores): scan serially
        if parts is not None:
            for part in parts:
                merge(report, part)
            return
    for path, base, display in jobs:
        scan_file(path, base, display, report)
