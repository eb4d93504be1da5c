"""Discovery for `mlagate run --head` and `mlagate discover`: the MLA attention classes a runtime
tree holds, and the matrix entry each runs with.

- runtime_of(): the matrix's runtime whose package is a top-level folder of the tree; else one
  derived from the tree's one top-level package that holds MLA classes (id and package: its name).
- known_modules(): every MLA class under that package (mlagate.scan.guards.discover, vendored
  copies included) and the registered module it matches (see `match`). A match runs with that
  entry's geometries and config under the import path where it was found; every class that
  matches none is reported in one DiscoveryError, and snippet() writes entries for them.
- extend(): the found entries written into a matrix document.

The args classes are read with `ast` (mlagate.scan.modelargs); nothing of the tree is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from mlagate.errors import UsageError
from mlagate.matrix import Matrix
from mlagate.matrix.model import Module, Runtime
from mlagate.matrix.targets import GEOMETRY_DIMS
from mlagate.scan import guards as scanner
from mlagate.scan import importable
from mlagate.scan.modelargs import Source, tiny_config

# the config keys the harness sets from a geometry (mlagate.harness.shapes), before geometry_keys
GEOMETRY_KEYS = (*GEOMETRY_DIMS, "q_lora_rank")
INDEXER_KEYS = ("index_n_heads", "index_head_dim", "index_topk")
OPTIONAL_KEYS = ("q_lora_rank",)  # a model without a query LoRA ignores it


class DiscoveryError(UsageError):
    """What discovery could not place; one line."""


@dataclass(frozen=True)
class Found:
    import_path: str  # where the class is, in the tree
    attention: str  # the class
    module: str  # the matrix module id it runs as
    reuses: str | None  # the registered module whose geometries and config it carries (None: new)
    entry: Mapping = field(default_factory=dict)  # its modules: entry
    why: str = ""  # for a class that matches no registered module: why not


def _plain(value):
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _packages(head: Path) -> list[str]:
    return sorted(p.name for p in head.iterdir() if p.is_dir() and (p / "__init__.py").is_file())


def runtime_of(matrix: Matrix, head: Path, where: str = "") -> Runtime:
    """The runtime the tree holds: the matrix's (by package folder), else one derived from the
    tree's one top-level package that holds MLA classes. where: how errors name the tree."""
    where = where or f"--head {head}"
    found = [r for r in matrix.runtimes.values() if (head / r.package).is_dir()]
    if len(found) > 1:
        raise DiscoveryError(
            f"{where}: holds {' and '.join(r.id for r in found)} of the runtimes of "
            f"{matrix.path}: gate one runtime per tree"
        )
    if found:
        return found[0]
    with_mla = [p for p in _packages(head) if scanner.discover(head, p)]
    looked = ", ".join(f"{r.package}/" for r in matrix.runtimes.values())
    if len(with_mla) != 1:
        what = "no top-level package" if not with_mla else "packages " + ", ".join(with_mla)
        name = with_mla[0] if with_mla else "PACKAGE"
        which = "the one under test, e.g. " if with_mla else ""
        raise DiscoveryError(
            f"{where}: holds none of the runtimes of {matrix.path} (looked for {looked}) "
            f"and {what} with MLA classes: add to runtimes: in {matrix.path} {which}"
            f"`{name.replace('_', '-')}: {{package: {name}, distribution: DISTRIBUTION}}`"
        )
    package = with_mla[0]
    rid = package.replace("_", "-")
    if rid in matrix.runtimes:
        rid = f"{rid}-tree"
    return Runtime(rid, package, _distribution(head) or rid)


def _distribution(head: Path) -> str | None:
    """The project name of head's pyproject.toml, if it has one."""
    import tomllib  # noqa: PLC0415

    try:
        project = tomllib.loads((head / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    name = project.get("project", {}).get("name")
    return name if isinstance(name, str) else None


def derived(matrix: Matrix, runtime: Runtime) -> bool:
    """Whether runtime is one discovery derived (absent from the matrix)."""
    return matrix.runtimes.get(runtime.id) != runtime


# --- matching ---------------------------------------------------------------------------


def _candidates(matrix: Matrix, cls: str) -> list[tuple[Module, dict]]:
    """The registered modules with class cls (their own or an arm's override), each with the
    config it runs with for that class."""
    out = []
    for m in matrix.modules.values():
        if m.attention == cls:
            out.append((m, _plain(m.config)))
            continue
        for o in m.overrides.values():
            if o.get("attention") == cls:
                out.append((m, {**_plain(m.config), **_plain(o.get("config", {}))}))
                break
    return out


def needed_keys(matrix: Matrix, m: Module, config: Mapping) -> set[str]:
    """The top-level config keys a module's build sets that its args class must take: its config,
    its deep keys, vocab_size and the geometry keys (renamed by geometry_keys, dropped where mapped
    to nothing; q_lora_rank only where the model has one)."""
    keys = set(config) | set(m.deep) | {"vocab_size"}
    geo = [k for k in GEOMETRY_KEYS if k not in OPTIONAL_KEYS]
    if any(matrix.geometries[g].indexer is not None for g in m.geometries):
        geo += INDEXER_KEYS
    for name in geo:
        target = m.geometry_keys.get(name, name)
        if target:
            keys.add(target)
    return keys


def _fits(matrix: Matrix, src: Source, m: Module, config: Mapping) -> str:
    """Why module m's entry cannot build the class of src ('' when it can)."""
    for role, name in (("model", m.model), ("args", m.args)):
        if not src.defines(name):
            return f"{m.id}: its {role} class {name} is not in the file"
    fields = src.fields(m.args)
    if fields is None:
        return ""  # an args class with **kwargs or outside the tree: the build checks it
    missing = sorted(needed_keys(matrix, m, config) - fields)
    if missing:
        return f"{m.id}: {m.args} has no field {', '.join(missing)}"
    return ""


def _tail(a: str, b: str) -> int:
    """How many trailing dotted segments a and b share."""
    n = 0
    for x, y in zip(reversed(a.split(".")), reversed(b.split(".")), strict=False):
        if x != y:
            break
        n += 1
    return n


def match(matrix: Matrix, src: Source, imp: str, cls: str) -> tuple[Module, dict] | str:
    """The registered module a found class runs as, with its config; else why none fits.

    Same class: the class name. Same dispatch: the file still defines the entry's model and args
    classes, and args has a field for every config key the entry's build sets (its config, the
    geometry keys, vocab_size), so the entry builds this class with the geometry applied. The
    guards are not compared: they are what a head run judges. Of several that fit, the one
    whose import path shares the longest dotted tail with imp (`pkg._vendor.mlx_lm.models.x`
    ends with `mlx_lm.models.x`, the rule of mlagate scan), then the first in the matrix."""
    fits, whys = [], []
    for m, config in _candidates(matrix, cls):
        why = _fits(matrix, src, m, config)
        (whys if why else fits).append(why or (m, config))
    if not fits:
        return "; ".join(whys) or "no registered module has this class"
    return max(fits, key=lambda mc: _tail(mc[0].import_path, imp))


def _entry(m: Module, runtime: Runtime, imp: str, cls: str, config: Mapping) -> dict:
    entry = {
        "runtime": runtime.id,
        "import": imp,
        "attention": cls,
        "model": m.model,
        "args": m.args,
        "config": _plain(config),
        "geometries": list(m.geometries),
    }
    if m.geometry_keys:
        entry["geometry_keys"] = _plain(m.geometry_keys)
    if m.sparse:
        entry["sparse"] = True
    if m.deep:
        entry["deep"] = _plain(m.deep)
    if m.ops:
        entry["ops"] = list(m.ops)  # the backend limits it meets travel with its entry
    entry["notes"] = f"discovered: {m.id}'s entry, found at {imp}"
    return entry


def _module_id(runtime: Runtime, m: Module, taken: set[str]) -> str:
    """`<runtime>/<name>`; where taken, `<runtime>/<registered id>`, then numbered."""
    for mid in (f"{runtime.id}/{m.id.split('/', 1)[-1]}", f"{runtime.id}/{m.id}"):
        if mid not in taken:
            return mid
    n = 2
    while f"{runtime.id}/{m.id}-{n}" in taken:
        n += 1
    return f"{runtime.id}/{m.id}-{n}"


def discover(matrix: Matrix, runtime: Runtime, head: Path) -> list[Found]:
    """Every MLA class under head/<package>, with the module it runs as (or why none)."""
    found, taken = [], set(matrix.modules)
    for imp, cls in scanner.discover(head, runtime.package):
        src = Source.of(head, imp)
        reg = match(matrix, src, imp, cls)
        if isinstance(reg, str):
            found.append(Found(imp, cls, "", None, {}, reg))
            continue
        m, config = reg
        if m.runtime == runtime.id and m.import_path == imp:
            mid = m.id
        else:
            mid = _module_id(runtime, m, taken)
            taken.add(mid)
        found.append(Found(imp, cls, mid, m.id, _entry(m, runtime, imp, cls, config)))
    return found


def known_modules(matrix: Matrix, runtime: Runtime, head: Path) -> dict[str, Found]:
    """Matrix module id -> the class found in head it runs; unknown classes are one error."""
    found = discover(matrix, runtime, head)
    packages = {r.package: r.id for r in matrix.runtimes.values()}
    where = {f.module or f.attention: f.import_path for f in found}
    importable.check(head, f"--head {head}", runtime.package, packages, where)
    unknown = [f for f in found if not f.module]
    if unknown:
        names = ", ".join(f"{f.attention} ({f.import_path})" for f in unknown)
        raise DiscoveryError(
            f"--head {head}: {len(unknown)} MLA class{'es' if len(unknown) > 1 else ''} "
            f"{'are' if len(unknown) > 1 else 'is'} not in {matrix.path}: {names}; "
            f"`mlagate discover {head} --matrix {matrix.path} --write-snippet FILE` writes "
            "their entries"
        )
    if not found:
        raise DiscoveryError(
            f"--head {head}: no MLA attention class (calling self.embed_q and self.unembed_out) "
            f"under {runtime.package}/"
        )
    return {f.module: f for f in found}


def extend(raw: dict, matrix: Matrix, runtime: Runtime, found: Mapping[str, Found]) -> None:
    """Write a derived runtime and the found modules' entries into the matrix document raw;
    a suite restricted to a registered module also takes the modules that reuse it."""
    if derived(matrix, runtime):
        raw.setdefault("runtimes", {})[runtime.id] = {
            "package": runtime.package,
            "distribution": runtime.distribution,
        }
    for mid, f in found.items():
        if mid not in (raw.get("modules") or {}):
            raw.setdefault("modules", {})[mid] = dict(f.entry)
    for suite in (raw.get("suites") or {}).values():
        if isinstance(suite, dict) and isinstance(suite.get("modules"), list):
            listed = suite["modules"]
            suite["modules"] = listed + [
                mid for mid, f in found.items() if f.reuses in listed and mid not in listed
            ]


# --- snippets for unknown classes ---------------------------------------------------------


def new_entry(matrix: Matrix, runtime: Runtime, head: Path, f: Found, taken: set[str]) -> tuple:
    """(module id, modules: entry) for a class that matches no registered module: the entry of
    a registered module of the same class where its model and args are in the file (config keys
    kept where args has them), else the file's Model and ModelArgs with a tiny config read from
    ModelArgs (mlagate.scan.modelargs.tiny_config)."""
    src = Source.of(head, f.import_path)
    parts = f.import_path.split(".")
    stem = parts[-2] if parts[-1] in ("language", "model") and len(parts) > 1 else parts[-1]
    mid = f"{runtime.id}/{stem}"
    n = 2
    while mid in taken:
        mid, n = f"{runtime.id}/{stem}-{n}", n + 1
    for m, config in _candidates(matrix, f.attention):
        if src.defines(m.model) and src.defines(m.args):
            fields = src.fields(m.args)
            kept = {k: v for k, v in config.items() if fields is None or k in fields}
            return mid, _entry(m, runtime, f.import_path, f.attention, kept) | {
                "notes": f"written by mlagate discover from {m.id}'s entry"
            }
    model = next((n for n in ("Model", "LanguageModel") if src.defines(n)), "Model")
    args = next((n for n in ("ModelArgs", "ModelConfig", "TextConfig") if src.defines(n)), "")
    fields = src.fields(args) if args else None
    sparse = bool(fields and set(INDEXER_KEYS) <= fields)
    geometry = _geometry(matrix, src, args, sparse)
    entry = {
        "runtime": runtime.id,
        "import": f.import_path,
        "attention": f.attention,
        "model": model,
        "args": args or "ModelArgs",
        "config": tiny_config(src, args, set(GEOMETRY_KEYS) | set(INDEXER_KEYS), stem),
        "geometries": [geometry.id] if geometry else [],
    }
    if sparse:
        entry["sparse"] = True
    entry["notes"] = "written by mlagate discover: config read from " + (args or "no args class")
    return mid, entry


def _geometry(matrix: Matrix, src: Source, args: str, sparse: bool):
    """The matrix geometry whose r, n and v are the args class's defaults, else the first with
    (sparse) or without an indexer."""
    defaults = src.defaults(args) if args else {}
    rnv = tuple(defaults.get(k, (None, None))[1] for k in GEOMETRY_KEYS[:3])
    fit = [g for g in matrix.geometries.values() if (g.indexer is not None) == sparse]
    return next((g for g in fit if g.rnv == rnv), fit[0] if fit else None)


def _block(section: str, entries: dict) -> str:
    text = yaml.safe_dump(entries, sort_keys=False, default_flow_style=False, width=100)
    body = "".join(f"  {line}\n" if line else "\n" for line in text.splitlines())
    return f"# --- under {section}: ---\n{body}"


def snippet(matrix: Matrix, runtime: Runtime, head: Path, found: list[Found]) -> str:
    """The matrix entries for the unknown classes among found, ready to paste: each block goes
    under the section its header names (a derived runtime under runtimes:, the modules under
    modules:), indented for it."""
    unknown = [f for f in found if not f.module]
    taken = set(matrix.modules) | {f.module for f in found}
    entries = {}
    for f in unknown:
        mid, entry = new_entry(matrix, runtime, head, f, taken)
        taken.add(mid)
        entries[mid] = entry
    head_lines = [
        f"# written by mlagate discover {head}: {len(unknown)} MLA "
        f"class{'es' if len(unknown) != 1 else ''} that "
        f"{matrix.path} does not register.",
        "# Paste each block under the section its header names, in that file.",
    ]
    blocks = []
    if derived(matrix, runtime):
        blocks.append(
            _block(
                "runtimes",
                {runtime.id: {"package": runtime.package, "distribution": runtime.distribution}},
            )
        )
    blocks.append(_block("modules", entries))
    return "\n".join(head_lines) + "\n" + "".join(blocks)


@dataclass(frozen=True)
class Survey:
    """What `mlagate discover` reports: the tree's runtime and every MLA class in it."""

    matrix: Path
    runtime: Runtime
    derived: bool
    found: tuple[Found, ...]
    snippet: str  # entries for the unknown classes ('' when there are none)
    foreign: tuple[tuple[str, str], ...] = ()  # (import path, another runtime's package it imports)

    @property
    def unknown(self) -> tuple[Found, ...]:
        return tuple(f for f in self.found if not f.module)


def survey(matrix: Matrix, head: Path) -> Survey:
    head = Path(head).resolve()
    if not head.is_dir():
        raise DiscoveryError(f"discover {head}: no such directory")
    runtime = runtime_of(matrix, head, f"discover {head}")
    found = discover(matrix, runtime, head)
    text = snippet(matrix, runtime, head, found) if any(not f.module for f in found) else ""
    others = {r.package for r in matrix.runtimes.values()} - {runtime.package}
    foreign = tuple(
        (f.import_path, pkgs[0])
        for f in found
        if (pkgs := importable.foreign_imports(head, f.import_path, others))
    )
    return Survey(matrix.path, runtime, derived(matrix, runtime), tuple(found), text, foreign)
