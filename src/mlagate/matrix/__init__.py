"""matrix.yaml, version 1: loaded once at the edge and validated strictly into frozen dataclasses.

Every error is a MatrixError whose str() is one line naming the file, the line and the key.
This module is the package's public face; the parts: model (MatrixError and the dataclasses),
reader (the node checks), targets, runs and findings (one reader per section of the file),
jsonform (the matrix as JSON); where the default matrix and the shipped files are: mlagate.paths.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

from mlagate import yamlread
from mlagate.matrix.armread import read_arms
from mlagate.matrix.findings import (
    read_allowlist,
    read_equivalent_mutants,
    read_expectations,
    read_unservable,
)
from mlagate.matrix.jsonform import from_json, thaw, to_json
from mlagate.matrix.limits import read_backend_limits
from mlagate.matrix.model import (
    DTYPES,
    ROLES,
    SCHEMA_VERSION,
    SUITE_KINDS,
    Activation,
    Allow,
    Arm,
    ArmSource,
    BackendLimit,
    Checkpoint,
    EquivalentMutant,
    Expectation,
    Geometry,
    Indexer,
    Matrix,
    MatrixError,
    Module,
    Overlay,
    OverlayFile,
    Profile,
    Runner,
    Runtime,
    Suite,
    Unservable,
)
from mlagate.matrix.reader import Node, Reader, compose
from mlagate.matrix.runs import (
    check_checkpoint_runners,
    check_runner_profiles,
    read_gates,
    read_profiles,
    read_runners,
    read_suites,
)
from mlagate.matrix.targets import (
    read_checkpoints,
    read_geometries,
    read_modules,
    read_runtimes,
)

__all__ = [  # the public face: every name importable from mlagate.matrix
    "DTYPES",
    "ROLES",
    "SCHEMA_VERSION",
    "SUITE_KINDS",
    "Activation",
    "Allow",
    "Arm",
    "ArmSource",
    "BackendLimit",
    "Checkpoint",
    "EquivalentMutant",
    "Expectation",
    "Unservable",
    "Geometry",
    "Indexer",
    "Matrix",
    "MatrixError",
    "Module",
    "Overlay",
    "OverlayFile",
    "Profile",
    "Runner",
    "Runtime",
    "Suite",
    "from_json",
    "load",
    "parse",
    "thaw",
    "to_json",
]


def load(path: str | Path) -> Matrix:
    """Read and validate a matrix file; raise MatrixError on the first problem."""
    path = Path(path)
    file = str(path)
    try:
        text = yamlread.read_text(path)
    except yamlread.ReadError as exc:
        raise MatrixError(file, exc.line, exc.key, exc.message) from None
    return parse(text, path)


def parse(text: str, path: Path) -> Matrix:
    """Validate the text of the matrix file at path (named in errors; the paths it gives start
    from its folder): one reader per section, each checked against the sections before it."""
    file = str(path)
    r = Reader(file)
    root, version = _root(r, compose(text, file))
    base = path.resolve().parent
    # what is tested
    runtimes = read_runtimes(r, root["runtimes"])
    arms = read_arms(r, root["arms"], runtimes, base)
    geometries = read_geometries(r, root["geometries"])
    modules = read_modules(r, root["modules"], runtimes, arms, geometries)
    checkpoints = read_checkpoints(r, root.get("checkpoints"), modules, geometries)
    # how it runs; a suite's gates are read last, as they may vary per profile
    suites, gate_nodes = read_suites(r, root["suites"], modules, base)
    runners = read_runners(r, root["runners"])
    check_checkpoint_runners(r, root.get("checkpoints"), checkpoints, runners)
    profiles = read_profiles(r, root["profiles"])
    allowlist = read_allowlist(r, root.get("allowlist"))
    check_runner_profiles(r, root["runners"], runners, profiles)
    suites = read_gates(r, suites, gate_nodes, modules, geometries, profiles)
    expectations = read_expectations(
        r, root.get("expectations"), suites, modules, arms, geometries, checkpoints
    )
    return Matrix(
        path=path,
        version=version,
        runtimes=MappingProxyType(runtimes),
        arms=MappingProxyType(arms),
        geometries=MappingProxyType(geometries),
        modules=MappingProxyType(modules),
        checkpoints=MappingProxyType(checkpoints),
        suites=MappingProxyType(suites),
        runners=MappingProxyType(runners),
        profiles=MappingProxyType(profiles),
        allowlist=allowlist,
        expectations=expectations,
        equivalent_mutants=read_equivalent_mutants(r, root.get("mutants"), arms),
        backend_limits=read_backend_limits(r, root.get("backend_limits"), modules, root["modules"]),
        unservable=read_unservable(r, root.get("unservable"), suites, modules, arms),
    )


_OPTIONAL = {  # sections one may leave out
    "checkpoints",
    "allowlist",
    "expectations",
    "mutants",
    "backend_limits",
    "unservable",
}
_REQUIRED = {
    "version",
    "runtimes",
    "arms",
    "geometries",
    "modules",
    "suites",
    "runners",
    "profiles",
}


def _root(r: Reader, node: Node) -> tuple[dict[str, Node], int]:
    """The top-level mapping, its keys checked, and the schema version it declares."""
    root = r.mapping(node, "<root>", _REQUIRED | _OPTIONAL, _REQUIRED)
    version = r.req(root, "version", "<root>", int)
    if version != SCHEMA_VERSION:
        raise r.fail(
            root["version"],
            "version",
            f"unsupported version {version} (this mlagate reads {SCHEMA_VERSION})",
        )
    return root, version
