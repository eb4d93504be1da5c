"""An arm's identity: what it is by content, and the two keys hashed from it.

An arm is its source, its patches, its activation, its overlay and its needs
(mlagate.matrix.Arm); its id, role and baseline only name it. Each part is hashed here, by one
rule (mlagate.hashing.file_sha for every file), for:

- the cache key (`cache_key`, mlagate.arm.arms.arm_key): what the install holds, so an arm's folder
  in the cache is found again; an activation's module, function and env do not count (they are
  the worker's, not the install's);
- the reuse part (`reuse_data`, mlagate.gate.reuse.keys): what a case's verdict depends on
  beyond the runtime's files, which the reuse key hashes from the install itself (so the
  source does not count there);
- the records of arm.json (`source_record`, `patch_records`), which `mlagate arms --verify`
  re-derives from the matrix.

Both keys are pinned for the shipped matrix by tests/test_armidentity.py: a change here that
moves one reinstalls every arm or re-runs every case.
"""

from __future__ import annotations

import hashlib
import json
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from mlagate import armsources
from mlagate.hashing import file_sha, tree_digest
from mlagate.matrix import Arm

LAYOUT = 1  # of the cache key


@dataclass(frozen=True)
class Interpreter:
    """What an install with needs (which may be compiled) is bound to."""

    python: str  # major.minor
    platform: str  # sysconfig.get_platform()

    @classmethod
    def here(cls) -> Interpreter:
        return cls(f"{sys.version_info.major}.{sys.version_info.minor}", sysconfig.get_platform())


def source_record(arm: Arm) -> dict:
    return {"kind": arm.source.kind, "spec": arm.source.spec, "ref": arm.source.ref}


def patches(arm: Arm) -> list[str]:
    """Each patch's sha256, in the order they apply."""
    return [file_sha(p) for p in arm.patches]


def patch_records(arm: Arm) -> list[dict]:
    """arm.json's `patches`: each patch's name and sha256."""
    return [{"name": Path(p).name, "sha256": file_sha(p)} for p in arm.patches]


def overlay(arm: Arm) -> list[list[str]]:
    """[place in site/, sha256 of the file copied there] of each overlaid file."""
    if arm.overlay is None:
        return []
    return [[f.dest, file_sha(f.source)] for f in arm.overlay.files]


def cache_key(arm: Arm, interpreter: Interpreter | None = None) -> str:
    """The cache's content address: the source, the patches' bytes and the needs; with needs,
    also the interpreter and platform (default: this one). A runtime alone is pure Python, so
    its install serves any Python 3 on any platform, and an exported cache travels between
    them. An overlay arm: the key of the arm it overlays and each overlaid file's bytes. What an
    arm activates installs (activate.install) counts, a local path by its name and content."""
    if arm.overlay is not None:
        payload = {
            "layout": LAYOUT,
            "on": cache_key(arm.overlay.on, interpreter),
            "overlay": overlay(arm),
        }
    else:
        payload = {
            "layout": LAYOUT,
            "source": [arm.source.kind, arm.source.spec, arm.source.ref],
            "needs": sorted(arm.needs),
        }
        if arm.needs:
            here = interpreter or Interpreter.here()
            payload["python"], payload["platform"] = here.python, here.platform
        if armsources.KINDS[arm.source.kind].local:
            payload["tree"] = tree_digest(Path(arm.source.spec))
    payload["patches"] = patches(arm)
    if arm.activate is not None and arm.activate.install:
        payload["activate_install"] = [_installed(s) for s in arm.activate.install]
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]


def _installed(spec: str) -> list[str]:
    """An activate.install entry in the cache key: a requirement as written; a local path
    (the matrix resolves those) by its name and content, a folder by its Python files."""
    path = Path(spec)
    if not path.is_absolute() or not path.exists():
        return [spec]
    return [path.name, tree_digest(path) if path.is_dir() else file_sha(path)]


def reuse_data(arm: Arm) -> dict:
    """The reuse key's arm part: its patches, overlaid files, activation and needs."""
    act = arm.activate
    return {
        "patches": patches(arm),
        "overlay": overlay(arm),
        "activate": None
        if act is None
        else {
            "module": act.module,
            "function": act.function,
            "env": dict(act.env),
            "install": [_activated(s) for s in act.install],
        },
        "needs": sorted(arm.needs),
    }


def _activated(spec: str) -> str:
    """An activate.install entry in the reuse part: a file by its name and content; a folder or
    a requirement as written (a folder's modules enter the reuse key as the install's files)."""
    path = Path(spec)
    return f"{path.name}:{file_sha(path)}" if path.is_file() else spec
