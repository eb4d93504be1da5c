"""Mutant arms: the parent arm plus one more patch, in the arm cache under the parent's rules.

A mutant arm is the parent Arm with the mutant's patch appended, so its cache key is the one
mlagate.arm.arms.arm_key gives it, and a worker that materialises it finds it installed. Instead
of reinstalling the parent from its source, the parent's installed site/ is hard-linked into
the new entry (the files the patch touches are copied, never linked) and the patch is applied
with `git apply -p1` as arms.py applies every patch. Reruns find the entry and do nothing.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from mlagate.arm import armidentity
from mlagate.arm import arms as arms_mod
from mlagate.matrix import Arm


def mutant_arm(parent: Arm, arm_id: str, patch: Path) -> Arm:
    return dataclasses.replace(parent, id=arm_id, patches=(*parent.patches, Path(patch)))


def materialise(
    parent: arms_mod.ArmInstall, arm: Arm, touched: list[str], root: Path | None = None
) -> Path:
    """The mutant arm's cache directory, made now from the parent's when missing."""
    root = Path(root) if root else arms_mod.cache_root()
    arms_dir = root / "arms"
    key = arms_mod.arm_key(arm)
    final = arms_dir / key
    if (final / "arm.json").is_file():
        return final
    with open(arms_dir / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "arm.json").is_file():
            return final
        staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=arms_dir))
        try:
            _build(parent, arm, touched, staging, key)
            os.rename(staging, final)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return final


def _build(
    parent: arms_mod.ArmInstall, arm: Arm, touched: list[str], staging: Path, key: str
) -> None:
    site = staging / "site"
    shutil.copytree(
        parent.site,
        site,
        symlinks=True,
        copy_function=os.link,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for rel in touched:
        target = site / rel
        target.unlink()
        shutil.copy2(parent.site / rel, target)
    patch = arm.patches[-1]
    problem = arms_mod.apply_patch(site, patch, staging.parent)
    if problem:
        raise arms_mod.ArmError(arm.id, f"mutant patch {patch.name} does not apply: {problem}")
    manifest = arms_mod.read_manifest(parent.dir)
    manifest.update(
        {
            "arm": arm.id,
            "patches": armidentity.patch_records(arm),
            "key": key,
            "mutant_of": parent.key,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    )
    (staging / "arm.json").write_text(json.dumps(manifest, indent=1))
