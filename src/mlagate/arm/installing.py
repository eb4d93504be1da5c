"""Installing one arm into a staging folder: its source (pip --no-deps, or a package tree
copied), its needs, what its activation installs, the files an overlay arm copies over another
arm's install, and its patches (`git apply -p1`). mlagate.arm.arms decides when (the cache, the
lock, the rename into place).

A distribution whose Requires-Python excludes this interpreter is installed all the same, with
a note in arm.json: the worker imports only its attention code (no entry points, no package
inits), so the interpreter it declares matters only where that code's syntax needs it.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from mlagate import armsources, documents
from mlagate.arm import armidentity
from mlagate.hashing import file_sha
from mlagate.matrix import Arm, Runtime
from mlagate.modulefiles import module_file


@dataclass(frozen=True)
class Installed:
    """What an overlay arm needs of the arm it overlays."""

    arm_id: str
    key: str
    site: Path


class ArmError(RuntimeError):
    """An arm could not be materialised; str() is one line naming the arm."""

    def __init__(self, arm: str, message: str):
        super().__init__(f"arm {arm}: {message}")
        self.arm = arm
        self.pip_errors: list[str] = []  # pip's ERROR lines, when pip failed


# pip's words for a distribution whose Requires-Python excludes this interpreter
_OTHER_PYTHON = re.compile(r"requires? a different python", re.IGNORECASE)


def apply_patch(site: Path, patch: Path, ceiling: Path) -> str | None:
    """`git apply -p1` of one patch inside an arm's site/ (git never looks above ceiling); the
    first line of git's complaint when it does not apply, else None."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(ceiling)}
    proc = subprocess.run(
        ["git", "apply", "-p1", "--whitespace=nowarn", str(patch)],
        cwd=site,
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode == 0:
        return None
    return next((ln for ln in proc.stderr.splitlines() if ln.strip()), "git apply failed")


def _pip(arm: str, args: list[str], what: str) -> str | None:
    """pip install args; ArmError naming what failed. A distribution pip refuses for this
    Python (its Requires-Python) is installed anyway with --ignore-requires-python, for a
    --no-deps install only (the worker imports nothing of it but the code under test): the
    note saying so is returned."""
    try:
        _pip_run(arm, args, what)
        return None
    except ArmError as exc:
        refusals = [e for e in exc.pip_errors if _OTHER_PYTHON.search(e)]
        if "--no-deps" not in args or not refusals:
            raise
        _pip_run(arm, ["--ignore-requires-python", *args], what)
        refusal = refusals[0].removeprefix("ERROR: ")
        return (
            f"{what}: pip refuses it for Python {platform.python_version()} ({refusal}); "
            "installed with --ignore-requires-python, since the worker imports only its "
            "attention code"
        )


def _pip_run(arm: str, args: list[str], what: str) -> None:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "--quiet",
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [
            ln.strip()
            for ln in (proc.stderr + proc.stdout).splitlines()
            if ln.strip() and not ln.startswith("WARNING")
        ]
        errors = [ln for ln in lines if ln.startswith("ERROR") and "yanked" not in ln]
        msg = errors[-1] if errors else (lines[-1] if lines else f"pip exited {proc.returncode}")
        exc = ArmError(arm, f"{what} failed: {msg}")
        exc.pip_errors = errors
        raise exc


def _requirement(arm: Arm, runtime: Runtime) -> str:
    src = arm.source
    return armsources.KINDS[src.kind].requirement(src.spec, src.ref, runtime.distribution)


def _version(site: Path, runtime: Runtime) -> str:
    """The installed distribution's version; a copied source tree has none ("tree")."""
    norm = runtime.distribution.replace("-", "_").lower()
    for info in site.glob("*.dist-info"):
        if info.name.lower().startswith(norm + "-"):
            for line in (info / "METADATA").read_text(encoding="utf-8").splitlines():
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    return "tree"


def install(arm: Arm, runtime: Runtime, staging: Path, key: str, on: Installed | None) -> None:
    """Install an arm into staging (site/ and arm.json); on: the installed arm an overlay arm
    overlays (materialised first by mlagate.arm.arms)."""
    site = staging / "site"
    notes: list[str] = []
    extra: dict = {}
    if arm.overlay is not None:
        extra["overlay"] = _overlay(arm, on, site)
    else:
        site.mkdir()
        _install_source(arm, runtime, site, notes)
    if arm.activate is not None:
        for spec in arm.activate.install:
            _install_extra(arm.id, spec, site, notes)
    if not (site / runtime.package).is_dir():
        raise ArmError(arm.id, f"the install holds no package {runtime.package}")
    for patch in arm.patches:
        problem = apply_patch(site, patch, staging.parent)
        if problem:
            raise ArmError(arm.id, f"patch {patch.name} does not apply: {problem}")
    if arm.activate is not None and not has_module(site, arm.activate.module):
        raise ArmError(
            arm.id, f"activate.module {arm.activate.module} is not in the install ({site})"
        )
    manifest = {
        "schema": documents.KINDS["arm"],
        "arm": arm.id,
        "runtime": runtime.id,
        "source": armidentity.source_record(arm),
        "patches": armidentity.patch_records(arm),
        "needs": list(arm.needs),
        **extra,
        "activate_install": list(arm.activate.install) if arm.activate else [],
        "version": _version(site, runtime),
        "key": key,
        "notes": notes,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (staging / "arm.json").write_text(json.dumps(manifest, indent=1))


def _install_source(arm: Arm, runtime: Runtime, site: Path, notes: list[str]) -> None:
    """The runtime from the arm's own source (pip --no-deps, or a package tree copied), then
    its needs (with their dependencies)."""
    tree = Path(arm.source.spec)
    if armsources.KINDS[arm.source.kind].local and not any(
        (tree / f).exists() for f in ("pyproject.toml", "setup.py")
    ):
        if not (tree / runtime.package).is_dir():
            raise ArmError(
                arm.id,
                f"{tree} holds neither a project (pyproject.toml, setup.py) nor a "
                f"{runtime.package}/ package",
            )
        _copy_package(tree / runtime.package, site / runtime.package)
    else:
        what = f"installing {arm.source.describe()}"
        args = ["--no-deps", "--no-compile", "--target", str(site), _requirement(arm, runtime)]
        notes += filter(None, [_pip(arm.id, args, what)])
    if arm.needs:
        _pip(
            arm.id,
            ["--no-compile", "--target", str(site), *arm.needs],
            f"installing needs {' '.join(arm.needs)}",
        )


def _copy_package(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def _install_extra(arm: str, spec: str, site: Path, notes: list[str]) -> None:
    """One entry of activate.install: a package folder (copied) or what pip installs (a
    requirement, a project, a wheel), with --no-deps: the runtime under test is the arm's."""
    path = Path(spec)
    if path.is_absolute() and path.is_dir() and (path / "__init__.py").is_file():
        if (site / path.name).exists():
            raise ArmError(arm, f"activate.install {spec}: the install holds {path.name} already")
        _copy_package(path, site / path.name)
        return
    args = ["--no-deps", "--no-compile", "--target", str(site), spec]
    notes += filter(None, [_pip(arm, args, f"installing activate.install {spec}")])


def _overlay(arm: Arm, on: Installed, site: Path) -> dict:
    """site/ as the install of overlay.on with the overlay's files copied over it; what it
    records in arm.json."""
    shutil.copytree(on.site, site, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    files = {}
    for f in arm.overlay.files:
        target = site / f.dest
        if target.is_symlink() or target.is_dir():
            raise ArmError(arm.id, f"overlay.files.{f.dest}: a folder or link in {on.arm_id}")
        replaced = target.exists()
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f.source, target)
        digest = file_sha(f.source)
        files[f.dest] = {"source": str(f.source), "sha256": digest, "replaced": replaced}
    return {"on": on.arm_id, "on_key": on.key, "files": files}


def has_module(site: Path, import_path: str) -> bool:
    return module_file(site, import_path) is not None
