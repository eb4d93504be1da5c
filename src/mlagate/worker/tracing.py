"""Where an exception came from, seen from inside a worker (stdlib only).

An exception whose traceback passes through a file of the arm's own folder was raised by the
runtime under test (its module, cache or rollback): that is a failure of the runtime. One that
never enters the arm's folder is the harness's (or MLX's, evaluating lazily for the harness).
"""

from __future__ import annotations

import os
import traceback


def runtime_frame(exc: BaseException, site: str) -> str | None:
    """`path:line in function` of the innermost frame inside `site` (path relative to it), or
    None when the traceback never enters the arm."""
    site = os.path.realpath(site) + os.sep
    where = None
    for frame in traceback.extract_tb(exc.__traceback__):
        path = os.path.realpath(frame.filename)
        if path.startswith(site):
            where = f"{path[len(site) :]}:{frame.lineno} in {frame.name}"
    return where


def innermost_frame(exc: BaseException) -> str:
    """`file:line in function` of the innermost frame, whatever file it is in."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    f = frames[-1]
    return f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}"
