"""The sections of matrix.yaml that say what is tested: runtimes, geometries, modules and
checkpoints (arms: mlagate.matrix.armread). Each reader takes its section's node and the tables
read before it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from mlagate.matrix.model import (
    Arm,
    Checkpoint,
    Geometry,
    Indexer,
    Module,
    Runtime,
)
from mlagate.matrix.reader import NON_NEGATIVE, POSITIVE, Node, Reader


def read_runtimes(r: Reader, section: Node) -> dict[str, Runtime]:
    """`runtimes: {id: {package, distribution}}`."""
    runtimes = {}
    for rid, node in r.table(section, "runtimes").items():
        key = f"runtimes.{rid}"
        m = r.mapping(node, key, {"package", "distribution"}, {"package", "distribution"})
        runtimes[rid] = Runtime(
            rid, r.req(m, "package", key, str), r.req(m, "distribution", key, str)
        )
    return runtimes


# the integer dimensions of a geometry, in the order they are checked
GEOMETRY_DIMS = (
    "kv_lora_rank",
    "qk_nope_head_dim",
    "v_head_dim",
    "qk_rope_head_dim",
    "num_attention_heads",
    "hidden_size",
)
_GEOMETRY_MAX = 1 << 20  # upper bound of every dimension


def read_geometries(r: Reader, section: Node) -> dict[str, Geometry]:
    """`geometries: {id: {the six dimensions, source, q_lora_rank?, indexer?}}`."""
    geometries = {}
    for gid, node in r.table(section, "geometries").items():
        key = f"geometries.{gid}"
        m = r.mapping(
            node,
            key,
            {*GEOMETRY_DIMS, "q_lora_rank", "source", "indexer"},
            {*GEOMETRY_DIMS, "source"},
        )
        indexer = _indexer(r, m, key)
        dims = {
            k: r.req(m, k, key, int, **(NON_NEGATIVE if k == "qk_rope_head_dim" else POSITIVE))
            for k in GEOMETRY_DIMS
        }
        _check_geometry(r, m, key, dims)
        geometries[gid] = Geometry(
            gid,
            **dims,
            q_lora_rank=r.opt(m, "q_lora_rank", key, int, **POSITIVE),
            source=r.req(m, "source", key, str),
            indexer=indexer,
        )
    return geometries


def _indexer(r: Reader, m: dict[str, Node], key: str) -> Indexer | None:
    """A sparse geometry's indexer: `{n_heads, head_dim, topk, kpool?}`; None without one."""
    if "indexer" not in m or m["indexer"].value is None:
        return None
    ik = f"{key}.indexer"
    im = r.mapping(
        m["indexer"],
        ik,
        {"n_heads", "head_dim", "topk", "kpool"},
        {"n_heads", "head_dim", "topk"},
    )
    return Indexer(
        r.req(im, "n_heads", ik, int, **POSITIVE),
        r.req(im, "head_dim", ik, int, **POSITIVE),
        r.req(im, "topk", ik, int, **POSITIVE),
        r.opt(im, "kpool", ik, int, **POSITIVE),
    )


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


_MODULE_KEYS = {
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
    "ops",
}
_MODULE_REQUIRED = {"runtime", "import", "attention", "model", "args", "geometries"}


def read_modules(
    r: Reader,
    section: Node,
    runtimes: Mapping[str, Runtime],
    arms: Mapping[str, Arm],
    geometries: Mapping[str, Geometry],
) -> dict[str, Module]:
    """`modules: {id: {runtime, import, attention, model, args, geometries, config?, ...}}`: the
    attention classes under test."""
    modules = {}
    for mid, node in r.table(section, "modules").items():
        key = f"modules.{mid}"
        m = r.mapping(node, key, _MODULE_KEYS, _MODULE_REQUIRED)
        runtime = r.req(m, "runtime", key, str)
        if runtime not in runtimes:
            raise r.fail(m["runtime"], f"{key}.runtime", f"unknown runtime {runtime!r}")
        import_path = _import_path(r, m, key, runtimes[runtime])
        geos = r.id_list(m["geometries"], f"{key}.geometries", geometries, "geometry")
        if not geos:
            raise r.fail(m["geometries"], f"{key}.geometries", "name at least one geometry")
        module_arms = _module_arms(r, m, key, arms, runtime) if "arms" in m else None
        config, gkeys, deep = _module_configs(r, m, key)
        overrides = _overrides(r, m, key, arms)
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
            overrides,
            r.opt(m, "notes", key, str, default=""),
            deep,
            _ops(r, m.get("ops"), f"{key}.ops"),
        )
    return modules


def _ops(r: Reader, node: Node | None, key: str) -> tuple[str, ...]:
    """A module's `ops`: names of MLX operations (backend_limits names each one)."""
    ops = r.str_list(node, key)
    for i, op in enumerate(ops):
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", op):
            raise r.fail(node.value[i], f"{key}[{i}]", f"expected an MLX op name, got {op!r}")
    return ops


def _import_path(r: Reader, m: dict[str, Node], key: str, runtime: Runtime) -> str:
    """A module's dotted import path, inside its runtime's package."""
    import_path = r.req(
        m,
        "import",
        key,
        str,
        check=lambda x: re.fullmatch(r"[A-Za-z_][\w.]*", x) is not None,
        what="a dotted import path",
    )
    if import_path.split(".")[0] != runtime.package:
        raise r.fail(
            m["import"],
            f"{key}.import",
            f"{import_path} is not inside package {runtime.package}",
        )
    return import_path


def _module_arms(
    r: Reader, m: dict[str, Node], key: str, arms: Mapping[str, Arm], runtime: str
) -> tuple[str, ...]:
    """A module's own list of arms, each of the module's runtime."""
    module_arms = r.id_list(m["arms"], f"{key}.arms", arms, "arm")
    for i, a in enumerate(module_arms):
        if arms[a].runtime != runtime:
            raise r.fail(
                m["arms"].value[i],
                f"{key}.arms[{i}]",
                f"arm {a!r} is of runtime {arms[a].runtime}, not {runtime}",
            )
    return module_arms


def _module_configs(
    r: Reader, m: dict[str, Node], key: str
) -> tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]]:
    """A module's config, geometry_keys and deep config, frozen (empty when absent)."""
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
    return config, gkeys, deep


def _overrides(
    r: Reader, m: dict[str, Node], key: str, arms: Mapping[str, Arm]
) -> Mapping[str, Mapping[str, Any]]:
    """`overrides: {arm: {attention?, config?}}`: what a module is on one arm."""
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
    return MappingProxyType(overrides)


def read_checkpoints(
    r: Reader,
    section: Node | None,
    modules: Mapping[str, Module],
    geometries: Mapping[str, Geometry],
) -> dict[str, Checkpoint]:
    """`checkpoints: {id: {module, geometry, size_gb, runners?: {label: path}}}` (optional); the
    runner labels are checked once the runners are read."""
    checkpoints = {}
    if section is None or not section.value:
        return checkpoints
    for cid, node in r.table(section, "checkpoints").items():
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
    return checkpoints
