"""matrix.yaml, version 1: loaded once at the edge and validated strictly into frozen dataclasses.

Every error is a MatrixError whose str() is one line naming the file, the line and the key.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

from mlagate import yamlread
from mlagate.matrix.jsonform import from_json, thaw, to_json
from mlagate.matrix.model import (
    BACKENDS,
    DTYPES,
    ROLES,
    SCHEMA_VERSION,
    SUITE_KINDS,
    Allow,
    Arm,
    ArmSource,
    Checkpoint,
    EquivalentMutant,
    Expectation,
    Geometry,
    Indexer,
    Matrix,
    MatrixError,
    Module,
    Profile,
    Runner,
    Runtime,
    Suite,
)
from mlagate.matrix.paths import bundled, default_path
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
    read_arms,
    read_checkpoints,
    read_geometries,
    read_modules,
    read_runtimes,
)

__all__ = [  # the public face: every name importable from mlagate.matrix
    "BACKENDS",
    "DTYPES",
    "ROLES",
    "SCHEMA_VERSION",
    "SUITE_KINDS",
    "Allow",
    "Arm",
    "ArmSource",
    "Checkpoint",
    "EquivalentMutant",
    "Expectation",
    "Geometry",
    "Indexer",
    "Matrix",
    "MatrixError",
    "Module",
    "Profile",
    "Runner",
    "Runtime",
    "Suite",
    "bundled",
    "default_path",
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
    file = str(path)
    r = Reader(file)
    root = r.mapping(
        compose(text, file),
        "<root>",
        {
            "version",
            "runtimes",
            "arms",
            "geometries",
            "modules",
            "checkpoints",
            "suites",
            "runners",
            "profiles",
            "allowlist",
            "expectations",
            "mutants",
        },
        {"version", "runtimes", "arms", "geometries", "modules", "suites", "runners", "profiles"},
    )
    version = r.req(root, "version", "<root>", int)
    if version != SCHEMA_VERSION:
        raise r.fail(
            root["version"],
            "version",
            f"unsupported version {version} (this mlagate reads {SCHEMA_VERSION})",
        )
    base = path.resolve().parent

    runtimes = read_runtimes(r, root["runtimes"])
    arms = read_arms(r, root["arms"], runtimes, base)
    geometries = read_geometries(r, root["geometries"])
    modules = read_modules(r, root["modules"], runtimes, arms, geometries)
    checkpoints = read_checkpoints(r, root.get("checkpoints"), modules, geometries)

    suites, gate_nodes = read_suites(r, root["suites"], modules, base)
    runners = read_runners(r, root["runners"])
    check_checkpoint_runners(r, root.get("checkpoints"), checkpoints, runners)
    profiles = read_profiles(r, root["profiles"])

    allowlist = []
    if "allowlist" in root and root["allowlist"].value:
        if not isinstance(root["allowlist"].value, list):
            raise r.fail(root["allowlist"], "allowlist", "expected a list")
        for i, node in enumerate(root["allowlist"].value):
            key = f"allowlist[{i}]"
            m = r.mapping(
                node, key, {"module", "guard", "reason", "gates"}, {"module", "guard", "reason"}
            )
            allowlist.append(
                Allow(
                    r.req(m, "module", key, str),
                    r.req(m, "guard", key, str),
                    r.req(m, "reason", key, str),
                    r.opt(
                        m,
                        "gates",
                        key,
                        str,
                        default="other",
                        check=lambda x: x in ("absorbed", "pooling", "other"),
                        what="absorbed, pooling or other",
                    ),
                )
            )

    check_runner_profiles(r, root["runners"], runners, profiles)
    suites = read_gates(r, suites, gate_nodes, modules, geometries, profiles)
    expectations = _expectations(
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
        allowlist=tuple(allowlist),
        expectations=expectations,
        equivalent_mutants=_equivalent_mutants(r, root.get("mutants"), arms),
    )


def _expectations(
    r: Reader, node: Node | None, suites, modules, arms, geometries, checkpoints
) -> tuple[Expectation, ...]:
    """Known findings: `expectations: [{suite, module, arm, verdict, reason, link?, geometry?,
    backend?}]`."""
    if node is None or node.value is None:
        return ()
    if not isinstance(node.value, list):
        raise r.fail(node, "expectations", "expected a list")
    out = []
    for i, item in enumerate(node.value):
        key = f"expectations[{i}]"
        m = r.mapping(
            item,
            key,
            {"suite", "module", "arm", "geometry", "backend", "verdict", "reason", "link"},
            {"suite", "module", "arm", "verdict", "reason"},
        )
        for name, table in (("suite", suites), ("module", modules), ("arm", arms)):
            if r.req(m, name, key, str) not in table:
                raise r.fail(m[name], f"{key}.{name}", f"unknown {name} {m[name].value!r}")
        geometry = r.opt(m, "geometry", key, str)
        if geometry is not None and geometry not in geometries and geometry not in checkpoints:
            raise r.fail(
                m["geometry"], f"{key}.geometry", f"unknown geometry or checkpoint {geometry!r}"
            )
        exp = Expectation(
            m["suite"].value,
            m["module"].value,
            m["arm"].value,
            r.req(
                m,
                "verdict",
                key,
                str,
                check=lambda x: x in ("pass", "fail", "skip"),
                what="pass, fail or skip",
            ),
            r.req(m, "reason", key, str, check=lambda x: bool(x.strip()), what="a reason"),
            r.opt(m, "link", key, str, default=""),
            geometry,
            r.opt(
                m, "backend", key, str, check=lambda x: x in BACKENDS, what=" or ".join(BACKENDS)
            ),
        )
        if any(
            (e.suite, e.module, e.arm, e.geometry, e.backend)
            == (exp.suite, exp.module, exp.arm, exp.geometry, exp.backend)
            for e in out
        ):
            raise r.fail(
                item, key, "duplicate expectation (same suite, module, arm, geometry and backend)"
            )
        out.append(exp)
    return tuple(out)


def _equivalent_mutants(r: Reader, node: Node | None, arms: dict) -> tuple[EquivalentMutant, ...]:
    """`mutants: {equivalent: [{arm, mutant, reason}]}`; mutant is an id or a glob over ids."""
    if node is None or node.value is None:
        return ()
    m = r.mapping(node, "mutants", {"equivalent"}, set())
    if "equivalent" not in m or m["equivalent"].value is None:
        return ()
    if not isinstance(m["equivalent"].value, list):
        raise r.fail(m["equivalent"], "mutants.equivalent", "expected a list")
    found = []
    for i, item in enumerate(m["equivalent"].value):
        key = f"mutants.equivalent[{i}]"
        e = r.mapping(item, key, {"arm", "mutant", "reason"}, {"arm", "mutant", "reason"})
        arm = r.req(e, "arm", key, str)
        if arm not in arms:
            raise r.fail(e["arm"], f"{key}.arm", f"unknown arm {arm!r}")
        reason = r.req(
            e, "reason", key, str, check=lambda x: bool(x.strip()), what="a non-empty reason"
        )
        found.append(
            EquivalentMutant(
                arm,
                r.req(
                    e,
                    "mutant",
                    key,
                    str,
                    check=lambda x: bool(x.strip()),
                    what="a mutant id or glob",
                ),
                reason,
            )
        )
    return tuple(found)
