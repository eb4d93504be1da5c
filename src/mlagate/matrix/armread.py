"""The `arms:` section of matrix.yaml: isolated installs of a runtime, and the two ways an arm can
carry a runtime's fix besides patches: code it activates in its worker (`activate`) and files
it copies over another arm's install (`overlay`)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from types import MappingProxyType

from mlagate import armsources
from mlagate.matrix.model import ROLES, Activation, Arm, ArmSource, Overlay, OverlayFile, Runtime
from mlagate.matrix.reader import Node, Reader

_KEYS = {  # and each source kind's key (mlagate.armsources)
    "runtime",
    "ref",
    "patches",
    "needs",
    "role",
    "baseline",
    "activate",
    "overlay",
}
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def read_arms(
    r: Reader, section: Node, runtimes: Mapping[str, Runtime], base: Path
) -> dict[str, Arm]:
    """`arms: {id: {runtime, role, pypi | git and ref | path | overlay, patches?, needs?,
    baseline?, activate?}}`; paths resolve beside the matrix (base)."""
    arms, overlays = {}, {}
    for aid, node in r.table(section, "arms").items():
        key = f"arms.{aid}"
        m = r.mapping(node, key, _KEYS | set(armsources.names()), {"runtime", "role"})
        runtime = r.req(m, "runtime", key, str)
        if runtime not in runtimes:
            raise r.fail(m["runtime"], f"{key}.runtime", f"unknown runtime {runtime!r}")
        if "overlay" in m:
            overlays[aid] = m
            source = ArmSource("path", str(base))  # replaced by overlay.on's source below
        else:
            source = _arm_source(r, node, m, key, base)
        arms[aid] = Arm(
            aid,
            runtime,
            source,
            r.req(m, "role", key, str, check=lambda x: x in ROLES, what=" or ".join(ROLES)),
            _patches(r, m, key, base),
            r.str_list(m.get("needs"), f"{key}.needs"),
            r.opt(m, "baseline", key, str),
            _activation(r, m, key, base),
        )
    for aid, m in overlays.items():  # an overlay may name an arm declared after it
        arms[aid] = _with_overlay(r, m, f"arms.{aid}", arms, set(overlays), base)
    for arm in arms.values():  # a baseline may name an arm declared after it
        if arm.baseline is not None and arm.baseline not in arms:
            raise r.fail(
                section.value[arm.id].value["baseline"],
                f"arms.{arm.id}.baseline",
                f"unknown arm {arm.baseline!r}",
            )
    return arms


def _arm_source(r: Reader, node: Node, m: dict[str, Node], key: str, base: Path) -> ArmSource:
    """Where an arm comes from: exactly one source kind (mlagate.armsources: pypi, git with a
    ref, an existing path) or an overlay on another arm."""
    sources = [s for s in armsources.names() if s in m]
    if len(sources) != 1:
        raise r.fail(node, key, f"give exactly one of {', '.join(armsources.names())} or overlay")
    kind = armsources.KINDS[sources[0]]
    spec = r.req(m, kind.key, key, str)
    ref = r.opt(m, "ref", key, str)
    if kind.takes_ref and not ref:
        raise r.fail(node, f"{key}.ref", f"a {kind.key} arm needs a ref")
    if not kind.takes_ref and ref:
        with_ref = " and ".join(k.key for k in armsources.KINDS.values() if k.takes_ref)
        raise r.fail(m["ref"], f"{key}.ref", f"ref is only for {with_ref} arms")
    if kind.local:
        spec = str((base / spec).resolve())
        if not Path(spec).exists():
            raise r.fail(m[kind.key], f"{key}.{kind.key}", f"no such directory: {spec}")
    return ArmSource(kind.key, spec, ref)


def _patches(r: Reader, m: dict[str, Node], key: str, base: Path) -> tuple[Path, ...]:
    """An arm's patch files, resolved beside the matrix; each must exist."""
    patches = []
    for i, p in enumerate(r.str_list(m.get("patches"), f"{key}.patches")):
        pp = (base / p).resolve()
        if not pp.is_file():
            raise r.fail(
                m["patches"].value[i],
                f"{key}.patches[{i}]",
                f"no such patch file: {pp} (patch paths resolve beside the matrix file: a copied "
                "matrix needs its patches/ folder beside it)",
            )
        patches.append(pp)
    return tuple(patches)


def _activation(r: Reader, m: dict[str, Node], key: str, base: Path) -> Activation | None:
    """`activate: {module, function?, env?, install?}`."""
    if "activate" not in m:
        return None
    ak = f"{key}.activate"
    am = r.mapping(m["activate"], ak, {"module", "function", "env", "install"}, {"module"})
    dotted = dict(check=lambda x: _DOTTED.fullmatch(x) is not None, what="a dotted import path")
    module = r.req(am, "module", ak, str, **dotted)
    function = r.opt(
        am,
        "function",
        ak,
        str,
        check=lambda x: x.isidentifier(),
        what="a function name of the module",
    )
    env = {}
    if "env" in am and am["env"].value is not None:
        if not isinstance(am["env"].value, dict):
            raise r.fail(am["env"], f"{ak}.env", "expected a mapping of variable names")
        for name, vnode in am["env"].value.items():
            ek = f"{ak}.env.{name}"
            if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
                raise r.fail(vnode, ek, "a variable name uses letters, digits and '_'")
            if name.startswith("MLAGATE_"):
                raise r.fail(vnode, ek, "MLAGATE_ variables belong to mlagate")
            if vnode.value is not None:
                r.scalar(vnode, ek, str, what="a string (quote numbers) or null (unset)")
            env[name] = vnode.value
    install = []
    for i, spec in enumerate(r.str_list(am.get("install"), f"{ak}.install")):
        local = (base / spec).resolve()
        if spec.startswith((".", "/")) and not local.exists():
            raise r.fail(am["install"].value[i], f"{ak}.install[{i}]", f"no such path: {spec}")
        install.append(str(local) if local.exists() else spec)
    return Activation(module, function, MappingProxyType(env), tuple(install))


def _with_overlay(
    r: Reader, m: dict[str, Node], key: str, arms: Mapping[str, Arm], overlays: set[str], base: Path
) -> Arm:
    """`overlay: {on: ARM, files: {path inside site/: source file}}`: the arm is ARM's install
    (source, needs, patches) with these files copied over it, then its own patches applied."""
    ok, arm = f"{key}.overlay", arms[key.removeprefix("arms.")]
    for k in (*armsources.names(), "ref", "needs"):
        if k in m:
            raise r.fail(
                m[k], f"{key}.{k}", "an overlay arm takes its install from overlay.on; drop " + k
            )
    om = r.mapping(m["overlay"], ok, {"on", "files"}, {"on", "files"})
    on = r.req(om, "on", ok, str)
    if on not in arms or on == arm.id:
        raise r.fail(om["on"], f"{ok}.on", f"unknown arm {on!r}")
    if on in overlays:
        raise r.fail(om["on"], f"{ok}.on", f"arm {on!r} is an overlay itself; name its base arm")
    if arms[on].runtime != arm.runtime:
        raise r.fail(
            om["on"], f"{ok}.on", f"arm {on!r} is of runtime {arms[on].runtime}, not {arm.runtime}"
        )
    files = []
    if not isinstance(om["files"].value, dict) or not om["files"].value:
        raise r.fail(om["files"], f"{ok}.files", "expected a mapping of site paths to files")
    for dest, snode in om["files"].value.items():
        fk = f"{ok}.files.{dest}"
        pure = PurePosixPath(str(dest))
        if pure.is_absolute() or ".." in pure.parts or "\\" in str(dest) or not pure.parts:
            raise r.fail(snode, fk, "a relative path inside the arm's site/ (no '..')")
        src = (base / r.scalar(snode, fk, str)).resolve()
        if not src.is_file():
            raise r.fail(snode, fk, f"no such file: {snode.value}")
        files.append(OverlayFile(pure.as_posix(), src))
    return dataclasses.replace(arm, source=arms[on].source, overlay=Overlay(arms[on], tuple(files)))
