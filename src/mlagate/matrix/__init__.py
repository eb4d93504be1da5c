"""matrix.yaml, version 1: loaded once at the edge and validated strictly into frozen dataclasses.

Every error is a MatrixError whose str() is one line naming the file, the line and the key.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
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
from mlagate.matrix.reader import NON_NEGATIVE, POSITIVE, Node, Reader, compose

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

    runtimes = {}
    for rid, node in r.table(root["runtimes"], "runtimes").items():
        key = f"runtimes.{rid}"
        m = r.mapping(node, key, {"package", "distribution"}, {"package", "distribution"})
        runtimes[rid] = Runtime(
            rid, r.req(m, "package", key, str), r.req(m, "distribution", key, str)
        )

    arms = {}
    for aid, node in r.table(root["arms"], "arms").items():
        key = f"arms.{aid}"
        m = r.mapping(
            node,
            key,
            {"runtime", "pypi", "git", "ref", "path", "patches", "needs", "role", "baseline"},
            {"runtime", "role"},
        )
        runtime = r.req(m, "runtime", key, str)
        if runtime not in runtimes:
            raise r.fail(m["runtime"], f"{key}.runtime", f"unknown runtime {runtime!r}")
        sources = [s for s in ("pypi", "git", "path") if s in m]
        if len(sources) != 1:
            raise r.fail(node, key, "give exactly one of pypi, git or path")
        kind = sources[0]
        spec = r.req(m, kind, key, str)
        ref = r.opt(m, "ref", key, str)
        if kind == "git" and not ref:
            raise r.fail(node, f"{key}.ref", "a git arm needs a ref")
        if kind != "git" and ref:
            raise r.fail(m["ref"], f"{key}.ref", "ref is only for git arms")
        if kind == "path":
            spec = str((base / spec).resolve())
            if not Path(spec).exists():
                raise r.fail(m["path"], f"{key}.path", f"no such directory: {spec}")
        patches = []
        for i, p in enumerate(r.str_list(m.get("patches"), f"{key}.patches")):
            pp = (base / p).resolve()
            if not pp.is_file():
                raise r.fail(
                    m["patches"].value[i], f"{key}.patches[{i}]", f"no such patch file: {p}"
                )
            patches.append(pp)
        role = r.req(m, "role", key, str, check=lambda x: x in ROLES, what=" or ".join(ROLES))
        arms[aid] = Arm(
            aid,
            runtime,
            ArmSource(kind, spec, ref),
            role,
            tuple(patches),
            r.str_list(m.get("needs"), f"{key}.needs"),
            r.opt(m, "baseline", key, str),
        )
    for arm in arms.values():
        if arm.baseline is not None and arm.baseline not in arms:
            raise r.fail(
                root["arms"].value[arm.id].value["baseline"],
                f"arms.{arm.id}.baseline",
                f"unknown arm {arm.baseline!r}",
            )

    geometries = {}
    for gid, node in r.table(root["geometries"], "geometries").items():
        key = f"geometries.{gid}"
        ints = [
            "kv_lora_rank",
            "qk_nope_head_dim",
            "v_head_dim",
            "qk_rope_head_dim",
            "num_attention_heads",
            "hidden_size",
        ]
        m = r.mapping(node, key, {*ints, "q_lora_rank", "source", "indexer"}, {*ints, "source"})
        indexer = None
        if "indexer" in m and m["indexer"].value is not None:
            ik = f"{key}.indexer"
            im = r.mapping(
                m["indexer"],
                ik,
                {"n_heads", "head_dim", "topk", "kpool"},
                {"n_heads", "head_dim", "topk"},
            )
            indexer = Indexer(
                r.req(im, "n_heads", ik, int, **POSITIVE),
                r.req(im, "head_dim", ik, int, **POSITIVE),
                r.req(im, "topk", ik, int, **POSITIVE),
                r.opt(im, "kpool", ik, int, **POSITIVE),
            )
        dims = {
            k: r.req(m, k, key, int, **(NON_NEGATIVE if k == "qk_rope_head_dim" else POSITIVE))
            for k in ints
        }
        _check_geometry(r, m, key, dims)
        geometries[gid] = Geometry(
            gid,
            **dims,
            q_lora_rank=r.opt(m, "q_lora_rank", key, int, **POSITIVE),
            source=r.req(m, "source", key, str),
            indexer=indexer,
        )

    modules = {}
    for mid, node in r.table(root["modules"], "modules").items():
        key = f"modules.{mid}"
        m = r.mapping(
            node,
            key,
            {
                "runtime",
                "import",
                "attention",
                "model",
                "args",
                "config",
                "geometries",
                "geometry_keys",
                "arms",
                "sparse",
                "overrides",
                "notes",
                "deep",
            },
            {"runtime", "import", "attention", "model", "args", "geometries"},
        )
        runtime = r.req(m, "runtime", key, str)
        if runtime not in runtimes:
            raise r.fail(m["runtime"], f"{key}.runtime", f"unknown runtime {runtime!r}")
        import_path = r.req(
            m,
            "import",
            key,
            str,
            check=lambda x: re.fullmatch(r"[A-Za-z_][\w.]*", x) is not None,
            what="a dotted import path",
        )
        if import_path.split(".")[0] != runtimes[runtime].package:
            raise r.fail(
                m["import"],
                f"{key}.import",
                f"{import_path} is not inside package {runtimes[runtime].package}",
            )
        geos = r.id_list(m["geometries"], f"{key}.geometries", geometries, "geometry")
        if not geos:
            raise r.fail(m["geometries"], f"{key}.geometries", "name at least one geometry")
        module_arms = None
        if "arms" in m:
            module_arms = r.id_list(m["arms"], f"{key}.arms", arms, "arm")
            for i, a in enumerate(module_arms):
                if arms[a].runtime != runtime:
                    raise r.fail(
                        m["arms"].value[i],
                        f"{key}.arms[{i}]",
                        f"arm {a!r} is of runtime {arms[a].runtime}, not {runtime}",
                    )
        config = (
            r.plain(m["config"])
            if "config" in m and m["config"].value is not None
            else MappingProxyType({})
        )
        if not isinstance(config, Mapping):
            raise r.fail(m["config"], f"{key}.config", "expected a mapping")
        gkeys = r.plain(m["geometry_keys"]) if "geometry_keys" in m else MappingProxyType({})
        deep = MappingProxyType({})
        if "deep" in m and m["deep"].value is not None:
            if not isinstance(m["deep"].value, dict):
                raise r.fail(m["deep"], f"{key}.deep", "expected a mapping of config keys")
            deep = r.plain(m["deep"])
        overrides = {}
        if "overrides" in m and m["overrides"].value:
            for arm_id, onode in r.table(m["overrides"], f"{key}.overrides").items():
                ok = f"{key}.overrides.{arm_id}"
                if arm_id not in arms:
                    raise r.fail(onode, ok, f"unknown arm {arm_id!r}")
                om = r.mapping(onode, ok, {"attention", "config"}, set())
                entry = {}
                if "attention" in om:
                    entry["attention"] = r.req(om, "attention", ok, str)
                if "config" in om:
                    if not isinstance(om["config"].value, dict):
                        raise r.fail(om["config"], f"{ok}.config", "expected a mapping")
                    entry["config"] = r.plain(om["config"])
                overrides[arm_id] = MappingProxyType(entry)
        modules[mid] = Module(
            mid,
            runtime,
            import_path,
            r.req(m, "attention", key, str),
            r.req(m, "model", key, str),
            r.req(m, "args", key, str),
            config,
            geos,
            gkeys,
            module_arms,
            bool(r.opt(m, "sparse", key, bool, default=False)),
            MappingProxyType(overrides),
            r.opt(m, "notes", key, str, default=""),
            deep,
        )

    checkpoints = {}
    if "checkpoints" in root and root["checkpoints"].value:
        for cid, node in r.table(root["checkpoints"], "checkpoints").items():
            key = f"checkpoints.{cid}"
            m = r.mapping(
                node,
                key,
                {"module", "geometry", "size_gb", "runners"},
                {"module", "geometry", "size_gb"},
            )
            mod = r.req(m, "module", key, str)
            if mod not in modules:
                raise r.fail(m["module"], f"{key}.module", f"unknown module {mod!r}")
            geo = r.req(m, "geometry", key, str)
            if geo not in geometries:
                raise r.fail(m["geometry"], f"{key}.geometry", f"unknown geometry {geo!r}")
            held = {}
            if "runners" in m and m["runners"].value:
                for label, pnode in r.table(m["runners"], f"{key}.runners").items():
                    held[label] = r.scalar(pnode, f"{key}.runners.{label}", str)
            size = float(
                r.req(
                    m,
                    "size_gb",
                    key,
                    (int, float),
                    check=lambda x: x >= 0,
                    what="a number of GB, not negative",
                )
            )
            checkpoints[cid] = Checkpoint(cid, mod, geo, size, MappingProxyType(held))

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
_GEOMETRY_MAX = 1 << 20


def _check_geometry(r: Reader, m: dict[str, Node], key: str, dims: dict[str, int]) -> None:
    for name, value in dims.items():
        if value > _GEOMETRY_MAX:
            raise r.fail(m[name], f"{key}.{name}", f"at most {_GEOMETRY_MAX}, got {value}")
    if dims["num_attention_heads"] < 2:
        raise r.fail(
            m["num_attention_heads"],
            f"{key}.num_attention_heads",
            "at least 2 heads (the path probes tell the latent from the heads by that axis)",
        )
    rank, d = dims["kv_lora_rank"], dims["qk_nope_head_dim"] + dims["v_head_dim"]
    if 2 * rank <= d:
        raise r.fail(
            m["kv_lora_rank"],
            f"{key}.kv_lora_rank",
            f"2 * kv_lora_rank ({2 * rank}) must exceed qk_nope_head_dim + v_head_dim ({d}): "
            "otherwise the absorbed path wins at every width and there is no crossover to test",
        )


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
