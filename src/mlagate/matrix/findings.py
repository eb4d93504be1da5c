"""The sections of matrix.yaml that record findings: the allowlist of intentional single-query
guards, the expected verdicts of known findings, the serving configurations a runtime cannot
serve and the mutants argued equivalent."""

from __future__ import annotations

from collections.abc import Mapping

from mlagate import backends
from mlagate.matrix.model import (
    Allow,
    Arm,
    Checkpoint,
    EquivalentMutant,
    Expectation,
    Geometry,
    Module,
    Suite,
    Unservable,
)
from mlagate.matrix.reader import Node, Reader


def read_allowlist(r: Reader, node: Node | None) -> tuple[Allow, ...]:
    """`allowlist: [{module, guard, reason, gates?}]`: single-query guards that are intentional
    (not MLA dispatch defects)."""
    if node is None or not node.value:
        return ()
    if not isinstance(node.value, list):
        raise r.fail(node, "allowlist", "expected a list")
    allowlist = []
    for i, item in enumerate(node.value):
        key = f"allowlist[{i}]"
        m = r.mapping(
            item, key, {"module", "guard", "reason", "gates"}, {"module", "guard", "reason"}
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
    return tuple(allowlist)


def read_expectations(
    r: Reader,
    node: Node | None,
    suites: Mapping[str, Suite],
    modules: Mapping[str, Module],
    arms: Mapping[str, Arm],
    geometries: Mapping[str, Geometry],
    checkpoints: Mapping[str, Checkpoint],
) -> tuple[Expectation, ...]:
    """Known findings: `expectations: [{suite, module, arm, verdict, reason, link?, geometry?,
    backend?, kind}]`; kind, with verdict fail and only then: the failure kind it fails with, or a
    list of them (a fail of another kind is a changed failure), each one of the suite's."""
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
            {"suite", "module", "arm", "geometry", "backend", "verdict", "reason", "link", "kind"},
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
            _backend(r, m, key),
            _kind(r, m, key, suites[m["suite"].value]),
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


def _kind(r: Reader, m: dict, key: str, suite: Suite) -> tuple[str, ...]:
    known = suite.failure_kinds
    node = m.get("kind")
    if m["verdict"].value != "fail":
        if node is not None:
            raise r.fail(node, f"{key}.kind", "a failure kind goes with verdict fail")
        return ()
    if node is None or node.value is None:
        raise r.fail(
            m["verdict"],
            f"{key}.kind",
            "a known fail names the failure kind it fails with (one of " + ", ".join(known) + ")",
        )
    if isinstance(node.value, list):
        kinds = r.str_list(node, f"{key}.kind")
        if not kinds:
            raise r.fail(node, f"{key}.kind", "expected one of " + ", ".join(known))
        for i, k in enumerate(kinds):
            if k not in known:
                raise r.fail(
                    node.value[i], f"{key}.kind[{i}]", "expected one of " + ", ".join(known)
                )
        return tuple(dict.fromkeys(kinds))
    return (
        r.req(m, "kind", key, str, check=lambda x: x in known, what="one of " + ", ".join(known)),
    )


def read_equivalent_mutants(
    r: Reader, node: Node | None, arms: Mapping[str, Arm]
) -> tuple[EquivalentMutant, ...]:
    """`mutants: {equivalent: [{arm, mutant, reason, backend?}]}`; mutant is an id or a glob over
    ids; backend: argued on that backend only (elsewhere the mutant runs)."""
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
        e = r.mapping(
            item, key, {"arm", "mutant", "reason", "backend"}, {"arm", "mutant", "reason"}
        )
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
                _backend(r, e, key),
            )
        )
    return tuple(found)


SERVING_HOW = ("raises", "probe")
FINDING_FIXED = "finding_fixed"  # the kind of a suite that judges configurations one by one


def read_unservable(
    r: Reader,
    node: Node | None,
    suites: Mapping[str, Suite],
    modules: Mapping[str, Module],
    arms: Mapping[str, Arm],
) -> tuple[Unservable, ...]:
    """`unservable: [{finding, suite, configurations, how, reason, link?, modules?, arms?,
    backend?, match?}]`: serving configurations a runtime cannot serve or express, each against a
    named finding; configurations are globs over a serving suite's configuration labels."""
    if node is None or node.value is None:
        return ()
    if not isinstance(node.value, list):
        raise r.fail(node, "unservable", "expected a list")
    out = []
    allowed = {"finding", "suite", "configurations", "how", "reason", "link", "modules", "arms"}
    allowed |= {"match"}
    for i, item in enumerate(node.value):
        key = f"unservable[{i}]"
        m = r.mapping(
            item,
            key,
            allowed | {"backend"},
            {"finding", "suite", "configurations", "how", "reason"},
        )
        suite = r.req(m, "suite", key, str)
        if suite not in suites or FINDING_FIXED not in suites[suite].failure_kinds:
            raise r.fail(
                m["suite"],
                f"{key}.suite",
                f"{suite!r} is no suite that judges each configuration (its contract names no "
                f"failure kind {FINDING_FIXED})",
            )
        picked = {}
        for name, table in (("modules", modules), ("arms", arms)):
            if name not in m:
                picked[name] = None
                continue
            ids = r.str_list(m[name], f"{key}.{name}")
            for j, x in enumerate(ids):
                if x not in table:
                    raise r.fail(
                        m[name].value[j], f"{key}.{name}[{j}]", f"unknown {name[:-1]} {x!r}"
                    )
            picked[name] = ids
        globs = r.str_list(m["configurations"], f"{key}.configurations")
        if not globs:
            raise r.fail(m["configurations"], f"{key}.configurations", "expected configurations")
        out.append(
            Unservable(
                r.req(m, "finding", key, str, check=lambda x: bool(x.strip()), what="a name"),
                suite,
                globs,
                r.req(m, "how", key, str, check=lambda x: x in SERVING_HOW, what="raises or probe"),
                r.req(m, "reason", key, str, check=lambda x: bool(x.strip()), what="a reason"),
                r.opt(m, "link", key, str, default=""),
                picked["modules"],
                picked["arms"],
                _backend(r, m, key),
                r.opt(m, "match", key, str, default=""),
            )
        )
    return tuple(out)


def _backend(r: Reader, m: dict, key: str) -> str | None:
    """An entry's optional `backend`: one of the registry's."""
    names = backends.names()
    return r.opt(m, "backend", key, str, check=lambda x: x in names, what=" or ".join(names))
