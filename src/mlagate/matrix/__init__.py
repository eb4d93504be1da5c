"""matrix.yaml, version 1: loaded once at the edge and validated strictly into frozen dataclasses.

Every error is a MatrixError whose str() is one line naming the file, the line and the key.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import MappingProxyType

from mlagate import gates as gatespec
from mlagate import suites as descriptors
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
from mlagate.matrix.reader import POSITIVE, Node, Reader, compose
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

    suites, gate_nodes = {}, {}
    for sid, node in r.table(root["suites"], "suites").items():
        key = f"suites.{sid}"
        m = r.mapping(
            node, key, {"kind", "gates", "baseline", "modules", "sparse", "file"}, {"kind"}
        )
        only = (
            r.id_list(m["modules"], f"{key}.modules", modules, "module") if "modules" in m else None
        )
        kind = r.req(
            m, "kind", key, str, check=lambda x: x in SUITE_KINDS, what=" or ".join(SUITE_KINDS)
        )
        own = r.opt(
            m,
            "file",
            key,
            str,
            check=lambda x: x.endswith(".py") and Path(x).name.startswith("test_"),
            what="a test_<name>.py file",
        )
        suite_path = (base / own).resolve() if own else bundled("suites") / kind / f"test_{sid}.py"
        if not suite_path.is_file():
            raise r.fail(node, key, f"no suite file {suite_path}")
        try:
            declared = descriptors.load(suite_path)
        except descriptors.DescriptorError as exc:
            raise r.fail(node, key, str(exc)) from None
        gate_nodes[sid] = (m.get("gates", node), declared) if "gates" in m else (None, declared)
        suites[sid] = Suite(
            sid,
            kind,
            MappingProxyType({}),
            bool(r.opt(m, "baseline", key, bool, default=False)),
            only,
            bool(r.opt(m, "sparse", key, bool, default=False)),
            declared.controls_fail,
            suite_path,
        )

    runners = {}
    for label, node in r.table(root["runners"], "runners").items():
        key = f"runners.{label}"
        m = r.mapping(
            node,
            key,
            {"backend", "notes", "runs_on", "perf_runs_on", "profile", "gate"},
            {"backend"},
        )
        runs_on = r.str_list(m.get("runs_on"), f"{key}.runs_on") or ("self-hosted", label)
        runners[label] = Runner(
            label,
            r.req(
                m, "backend", key, str, check=lambda x: x in BACKENDS, what=" or ".join(BACKENDS)
            ),
            r.opt(m, "notes", key, str, default=""),
            runs_on,
            r.str_list(m.get("perf_runs_on"), f"{key}.perf_runs_on") or runs_on,
            r.opt(m, "profile", key, str),
            bool(r.opt(m, "gate", key, bool, default=False)),
        )
    for cp in checkpoints.values():
        for label in cp.runners:
            if label not in runners:
                raise r.fail(
                    root["checkpoints"].value[cp.id],
                    f"checkpoints.{cp.id}.runners.{label}",
                    f"unknown runner label {label!r}",
                )

    profiles = {}
    pints = [
        "heads",
        "hidden_size",
        "q_lora_rank",
        "vocab_size",
        "index_heads",
        "index_topk",
        "prefill_chunk",
        "samples",
        "warmup",
        "crossover_cache",
    ]
    for pid, node in r.table(root["profiles"], "profiles").items():
        key = f"profiles.{pid}"
        lists = {
            "cache_lengths",
            "widths",
            "prefill_widths",
            "perf_cache_lengths",
            "crossover_widths",
        }
        m = r.mapping(
            node,
            key,
            {*pints, *lists, "dtype", "timeout_s", "sample_min_s"},
            {*pints, *lists, "dtype", "timeout_s"},
        )
        vals = {k: r.req(m, k, key, int, **POSITIVE) for k in pints}
        if vals["samples"] % 2 == 0:
            raise r.fail(
                m["samples"],
                f"{key}.samples",
                "use an odd number of samples (the median is then a sample)",
            )
        if vals["heads"] < 2:
            raise r.fail(
                m["heads"],
                f"{key}.heads",
                "at least 2 heads (the path probes tell the latent from the heads by that axis)",
            )
        _check_profile(r, m, key)
        profiles[pid] = Profile(
            pid,
            cache_lengths=r.int_list(m["cache_lengths"], f"{key}.cache_lengths"),
            widths=r.int_list(m["widths"], f"{key}.widths"),
            prefill_widths=r.int_list(m["prefill_widths"], f"{key}.prefill_widths"),
            perf_cache_lengths=r.int_list(m["perf_cache_lengths"], f"{key}.perf_cache_lengths"),
            crossover_widths=r.int_list(m["crossover_widths"], f"{key}.crossover_widths"),
            dtype=r.req(
                m, "dtype", key, str, check=lambda x: x in DTYPES, what=" or ".join(DTYPES)
            ),
            timeout_s=float(
                r.req(
                    m,
                    "timeout_s",
                    key,
                    (int, float),
                    check=lambda x: x > 0,
                    what="a positive number",
                )
            ),
            sample_min_s=float(
                r.opt(
                    m,
                    "sample_min_s",
                    key,
                    (int, float),
                    default=0.0,
                    check=lambda x: 0 <= x <= 10,
                    what="seconds between 0 and 10",
                )
            ),
            **vals,
        )

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

    for label, runner in runners.items():
        if runner.profile is not None and runner.profile not in profiles:
            raise r.fail(
                root["runners"].value[label].value["profile"],
                f"runners.{label}.profile",
                f"unknown profile {runner.profile!r}",
            )

    ctx = gatespec.Check(r.fail, tuple(profiles), BACKENDS, DTYPES)
    for sid, (gnode, declared) in gate_nodes.items():
        gates = gatespec.read(declared.gates, gnode, f"suites.{sid}.gates", ctx)
        suites[sid] = dataclasses.replace(suites[sid], gates=gates)
        if declared.plan_check is not None:
            _plan_check(r, gnode, sid, declared.plan_check, gates, modules, geometries, profiles)
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


def _plan_check(r: Reader, gnode, sid: str, check, gates, modules, geometries, profiles) -> None:
    """A sparse suite's grid checked against every sparse geometry and profile before anything
    runs."""
    for module in modules.values():
        if not module.sparse:
            continue
        for gid in module.geometries:
            ix = geometries[gid].indexer
            if ix is None:
                continue
            for pid, prof in profiles.items():
                why = check(ix.kpool or 1, min(ix.topk, prof.index_topk), gates)
                if why:
                    raise r.fail(
                        gnode, f"suites.{sid}.gates", f"{why} (geometry {gid}, profile {pid})"
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


# upper bounds of profile values: beyond them a case would run for days or not fit in memory
_PROFILE_MAX = {
    "heads": 1024,
    "hidden_size": 1 << 16,
    "q_lora_rank": 1 << 16,
    "vocab_size": 1 << 20,
    "index_heads": 1024,
    "index_topk": 1 << 16,
    "prefill_chunk": 1 << 20,
    "samples": 1001,
    "warmup": 1000,
    "crossover_cache": 1 << 22,
}
_PROFILE_LIST_MAX = {
    "cache_lengths": 1 << 22,
    "widths": 1 << 16,
    "prefill_widths": 1 << 20,
    "perf_cache_lengths": 1 << 22,
    "crossover_widths": 1 << 16,
}
_MAX_TIMEOUT_S = 86400


def _check_profile(r: Reader, m: dict[str, Node], key: str) -> None:
    for name, most in _PROFILE_MAX.items():
        if m[name].value > most:
            raise r.fail(m[name], f"{key}.{name}", f"at most {most}, got {m[name].value}")
    for name, most in _PROFILE_LIST_MAX.items():
        values = m[name].value if isinstance(m[name].value, list) else []
        if len(values) > 64:
            raise r.fail(m[name], f"{key}.{name}", "at most 64 entries")
        for i, v in enumerate(values):
            if isinstance(v.value, int) and v.value > most:
                raise r.fail(v, f"{key}.{name}[{i}]", f"at most {most}, got {v.value}")
    t = m["timeout_s"].value
    if isinstance(t, int | float) and not isinstance(t, bool) and t > _MAX_TIMEOUT_S:
        raise r.fail(
            m["timeout_s"], f"{key}.timeout_s", f"at most {_MAX_TIMEOUT_S} seconds, got {t}"
        )
