"""The sections of matrix.yaml that say how the checks run: suites, runners, profiles and each
suite's gates, with the checks that tie them to the sections read before them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from mlagate import backends
from mlagate.contract import gates as gatespec
from mlagate.contract import suites as contracts
from mlagate.matrix.model import (
    DTYPES,
    MACHINE_CLASS_ID,
    SUITE_KINDS,
    Checkpoint,
    Geometry,
    Module,
    Profile,
    Runner,
    Suite,
)
from mlagate.matrix.reader import POSITIVE, Node, Reader
from mlagate.paths import shipped_suite

CLASS = "machine_class"  # a runner's key: the class its hosts must be
# a suite's `gates:` node (None without one) and its contract, read with the profiles
GateNodes = dict[str, tuple[Node | None, contracts.Contract]]


def read_suites(
    r: Reader, section: Node, modules: Mapping[str, Module], base: Path
) -> tuple[dict[str, Suite], GateNodes]:
    """`suites: {id: {kind, gates?, baseline?, modules?, sparse?, file?, retry?}}`: the suites
    with their gates still empty, and the gate nodes for read_gates."""
    suites, gate_nodes = {}, {}
    for sid, node in r.table(section, "suites").items():
        key = f"suites.{sid}"
        m = r.mapping(
            node, key, {"kind", "gates", "baseline", "modules", "sparse", "file", "retry"}, {"kind"}
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
        suite_path = (base / own).resolve() if own else shipped_suite(kind, sid)
        if not suite_path.is_file():
            raise r.fail(node, key, f"no suite file {suite_path}")
        try:
            declared = contracts.load(suite_path)
        except contracts.ContractError as exc:
            raise r.fail(node, key, str(exc)) from None
        if declared.kind != kind:
            raise r.fail(
                m["kind"], f"{key}.kind", f"{kind!r}, but its contract says {declared.kind!r}"
            )
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
            declared.failure_kinds,
            declared.control_kinds,
            bool(r.opt(m, "retry", key, bool, default=False)),
        )
    return suites, gate_nodes


def read_runners(r: Reader, section: Node) -> dict[str, Runner]:
    """`runners: {label: {backend, notes?, runs_on?, perf_runs_on?, profile?, gate?, workers?,
    machine_class?}}`; the profiles are checked once they are read."""
    runners = {}
    for label, node in r.table(section, "runners").items():
        key = f"runners.{label}"
        m = r.mapping(
            node,
            key,
            {"backend", "notes", "runs_on", "perf_runs_on", "profile", "gate", "workers", CLASS},
            {"backend"},
        )
        runs_on = r.str_list(m.get("runs_on"), f"{key}.runs_on") or ("self-hosted", label)
        runners[label] = Runner(
            label,
            r.req(
                m,
                "backend",
                key,
                str,
                check=lambda x: x in backends.names(),
                what=" or ".join(backends.names()),
            ),
            r.opt(m, "notes", key, str, default=""),
            runs_on,
            r.str_list(m.get("perf_runs_on"), f"{key}.perf_runs_on") or runs_on,
            r.opt(m, "profile", key, str),
            bool(r.opt(m, "gate", key, bool, default=False)),
            r.opt(
                m, "workers", key, int, check=lambda x: 1 <= x <= 1024, what="an integer 1 to 1024"
            ),
            r.opt(
                m,
                CLASS,
                key,
                str,
                check=lambda x: MACHINE_CLASS_ID.fullmatch(x) is not None,
                what="a machine class id, mc- and 12 hex digits (mlagate health prints it)",
            ),
        )
    return runners


def check_checkpoint_runners(
    r: Reader,
    section: Node | None,
    checkpoints: Mapping[str, Checkpoint],
    runners: Mapping[str, Runner],
) -> None:
    """Every runner label a checkpoint names (section: `checkpoints:`) is a runner."""
    for cp in checkpoints.values():
        for label in cp.runners:
            if label not in runners:
                raise r.fail(
                    section.value[cp.id],
                    f"checkpoints.{cp.id}.runners.{label}",
                    f"unknown runner label {label!r}",
                )


def check_runner_profiles(
    r: Reader, section: Node, runners: Mapping[str, Runner], profiles: Mapping[str, Profile]
) -> None:
    """Every profile a runner names (section: `runners:`) is a profile."""
    for label, runner in runners.items():
        if runner.profile is not None and runner.profile not in profiles:
            raise r.fail(
                section.value[label].value["profile"],
                f"runners.{label}.profile",
                f"unknown profile {runner.profile!r}",
            )


# the integer fields of a profile, in the order they are checked
_PROFILE_INTS = (
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
)
_PROFILE_LISTS = {
    "cache_lengths",
    "widths",
    "prefill_widths",
    "perf_cache_lengths",
    "crossover_widths",
}
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


def read_profiles(r: Reader, section: Node) -> dict[str, Profile]:
    """`profiles: {id: {the integer fields, the lists, dtype, timeout_s, sample_min_s?}}`."""
    return {pid: _profile(r, pid, node) for pid, node in r.table(section, "profiles").items()}


def _profile(r: Reader, pid: str, node: Node) -> Profile:
    key = f"profiles.{pid}"
    m = r.mapping(
        node,
        key,
        {*_PROFILE_INTS, *_PROFILE_LISTS, "dtype", "timeout_s", "sample_min_s"},
        {*_PROFILE_INTS, *_PROFILE_LISTS, "dtype", "timeout_s"},
    )
    vals = {k: r.req(m, k, key, int, **POSITIVE) for k in _PROFILE_INTS}
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
    return Profile(
        pid,
        cache_lengths=r.int_list(m["cache_lengths"], f"{key}.cache_lengths"),
        widths=r.int_list(m["widths"], f"{key}.widths"),
        prefill_widths=r.int_list(m["prefill_widths"], f"{key}.prefill_widths"),
        perf_cache_lengths=r.int_list(m["perf_cache_lengths"], f"{key}.perf_cache_lengths"),
        crossover_widths=r.int_list(m["crossover_widths"], f"{key}.crossover_widths"),
        dtype=r.req(m, "dtype", key, str, check=lambda x: x in DTYPES, what=" or ".join(DTYPES)),
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


def read_gates(
    r: Reader,
    suites: Mapping[str, Suite],
    gate_nodes: GateNodes,
    modules: Mapping[str, Module],
    geometries: Mapping[str, Geometry],
    profiles: Mapping[str, Profile],
) -> dict[str, Suite]:
    """The suites with their gates, read against each suite contract's gates once the profiles
    are known; a sparse suite's plan_check rules run on them."""
    ctx = gatespec.Check(r.fail, tuple(profiles), backends.names(), DTYPES)
    read = dict(suites)
    for sid, (gnode, declared) in gate_nodes.items():
        gates = gatespec.read(declared.gates, gnode, f"suites.{sid}.gates", ctx)
        read[sid] = dataclasses.replace(suites[sid], gates=gates)
        if declared.rules:
            _plan_check(r, gnode, sid, declared.plan_check, gates, modules, geometries, profiles)
        found = declared.gate_check(gates)
        if found:
            key, why = found
            raise r.fail(gnode.value.get(key, gnode), f"suites.{sid}.gates.{key}", why)
    return read


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
