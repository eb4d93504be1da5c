"""A model file of a runtime tree read with `ast` (never imported): which classes it defines or
imports, the fields of its args dataclass (following relative imports and base classes inside
the tree), and the tiny config a new matrix entry builds it with."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from mlagate.modulefiles import module_file, source_file

# keys that keep a whole model tiny, where its args class has them (the shipped matrix's values)
TINY = {
    "intermediate_size": 256,
    "moe_intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_key_value_heads": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,  # layer 0 dense: no experts built
}
# a value for a required field (no default) the harness does not set, by its annotation
_BY_TYPE = {"int": 1, "float": 1.0, "bool": False, "str": ""}
_DEPTH = 8  # base classes and re-imports followed at most


@dataclass
class Source:
    path: Path | None
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    imported: dict[str, tuple[int, str, str]] = field(default_factory=dict)  # name: level, mod
    names: set[str] = field(default_factory=set)  # every top-level name it binds
    # every import anywhere in the file (functions too): (level, module, names imported from it)
    modules: list[tuple[int, str, tuple[str, ...]]] = field(default_factory=list)

    @classmethod
    def read(cls, path: Path | None) -> Source:
        src = cls(path)
        if path is None or not path.is_file():
            return src
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), str(path))
        except (SyntaxError, ValueError, RecursionError):
            return src
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                src.modules.append(
                    (node.level, node.module or "", tuple(a.name for a in node.names))
                )
            elif isinstance(node, ast.Import):
                src.modules += [(0, a.name, ()) for a in node.names]
        for stmt in tree.body:
            if isinstance(stmt, ast.ClassDef):
                src.classes[stmt.name] = stmt
                src.names.add(stmt.name)
            elif isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    name = alias.asname or alias.name
                    src.imported[name] = (stmt.level, stmt.module or "", alias.name)
                    src.names.add(name)
            elif isinstance(stmt, (ast.Import, ast.Assign, ast.FunctionDef)):
                src.names.update(_bound(stmt))
        return src

    @classmethod
    def of(cls, head: Path, import_path: str) -> Source:
        """The file of a dotted module path under head."""
        path = module_file(Path(head), import_path)
        return cls(None) if path is None else cls.read(path)

    def defines(self, name: str) -> bool:
        return name in self.names

    def _resolve(self, name: str) -> tuple[Source, ast.ClassDef] | None:
        """The class a name stands for: defined here or imported relatively (inside the tree)."""
        src = self
        for _ in range(_DEPTH):
            if name in src.classes:
                return src, src.classes[name]
            if name not in src.imported or src.path is None:
                return None
            level, module, name = src.imported[name]
            if level == 0:
                return None  # from another package: not read
            folder = src.path.parent
            for _ in range(level - 1):
                folder = folder.parent
            base = Path(folder, *module.split(".")) if module else folder
            nxt = source_file(base)
            if nxt is None:
                return None
            src = Source.read(nxt)
        return None

    def fields(self, name: str, depth: int = 0) -> set[str] | None:
        """The names a class's constructor takes (dataclass fields and __init__ parameters,
        with its bases'); None when not all can be read (**kwargs, a base outside the tree, a
        from_dict of the class's own)."""
        found = self._resolve(name)
        if found is None or depth > _DEPTH:
            return None
        src, node = found
        if depth == 0 and any(
            isinstance(s, ast.FunctionDef) and s.name == "from_dict" for s in node.body
        ):
            return None  # its own from_dict reads the config its own way
        out: set[str] = set()
        for base in node.bases:
            if not isinstance(base, ast.Name):
                return None
            inner = src.fields(base.id, depth + 1)
            if inner is None:
                return None
            out |= inner
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                out.add(stmt.target.id)
            elif isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
                if stmt.args.kwarg is not None:
                    return None
                a = stmt.args
                out |= {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)} - {"self"}
        return out

    def defaults(self, name: str) -> dict[str, tuple[str, object]]:
        """A dataclass's own annotated fields: name -> (annotation, default or REQUIRED)."""
        found = self._resolve(name)
        if found is None:
            return {}
        _, node = found
        out = {}
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                annotation = ast.unparse(stmt.annotation)
                default = REQUIRED
                if stmt.value is not None:
                    try:
                        default = ast.literal_eval(stmt.value)
                    except ValueError:
                        default = OTHER
                out[stmt.target.id] = (annotation, default)
        return out


REQUIRED, OTHER = object(), object()  # no default; a default that is not a literal


def _bound(stmt) -> set[str]:
    if isinstance(stmt, ast.Import):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    if isinstance(stmt, ast.FunctionDef):
        return {stmt.name}
    return {t.id for t in stmt.targets if isinstance(t, ast.Name)}


def tiny_config(src: Source, args: str, harness_keys: set[str], stem: str) -> dict:
    """The config a new entry builds a tiny model with, from the args class's fields: the TINY
    keys it has, its model_type (its default, else the file's stem), and a value by annotation
    for every required field the harness does not set (harness_keys and vocab_size)."""
    fields = src.defaults(args) if args else {}
    config: dict = {}
    if "model_type" in fields:
        default = fields["model_type"][1]
        config["model_type"] = default if isinstance(default, str) and default else stem
    for key, value in TINY.items():
        if key in fields:
            config[key] = value
    for key, (annotation, default) in fields.items():
        if default is REQUIRED and key not in config and key not in harness_keys | {"vocab_size"}:
            config[key] = _BY_TYPE.get(annotation.split("[")[0])
    return config
