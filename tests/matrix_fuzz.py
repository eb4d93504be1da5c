"""A seeded generator of broken variants of the shipped matrix.yaml, and the check each must pass.

Every variant is (category, name, bytes, must_refuse). A variant that must be refused has to
give a MatrixError of one line (no internal repr) and never a traceback or a hang; the others
(a cut file that may still be valid) may also load. Used by tests/test_fuzz_matrix.py (a few
hundred variants) and benchmarks/matrix_fuzz.py (the full corpus of 1,000 and more).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "matrix.yaml"
REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-f]+>|_Node|Traceback")


@dataclass(frozen=True)
class Variant:
    category: str
    name: str
    data: bytes
    must_refuse: bool = True


# key -> values that must be refused wherever the key stands in the shipped matrix
BAD_VALUES = {
    "num_attention_heads": ["1", "0", "-4", "1.5", "abc", ".inf", "true", "[]"],
    "kv_lora_rank": ["64", "128", "0", "-1", "1e3"],
    "timeout_s": [".inf", "-.inf", ".nan", "-1", "0", "1e9", "abc", "[1]"],
    "samples": ["4", "0", "1000001", "-3", "2.5"],
    "warmup": ["-1", "100000", "x"],
    "heads": ["1", "0", "4096"],
    "dtype": ["float8", "1", "null"],
    "role": ["boss", "1", "[stock]"],
    "backend": ["tpu", "GPU", "0"],
    "version": ["2", "0", "'1'", "1.0"],
    "size_gb": ["-1", ".inf", ".nan", "big"],
    "sample_min_s": [".nan", "11", "-0.5"],
    "cache_lengths": ["[]", "[-1]", "[1.5]", "x", "[99999999]"],
    "widths": ["[]", "[a]", "{}", "[100000000]"],
    "crossover_cache": ["0", "99999999999"],
    "hidden_size": ["0", "-1", "999999999"],
    "runtime": ["nosuch", "1"],
    "import": ["1", "not a path", "os.path"],
}
TAGS = [
    "!!int abc",
    "!!python/name:os.system",
    "!!python/object/apply:os.system ['true']",
    "!custom x",
    "!!binary aGVsbG8=",
    "!!timestamp 2020-01-01",
    "!!set {a, b}",
    "!!float nope",
    "!!omap [a: 1]",
    "2026-01-01",
    "!!int 0x" + "f" * 40,
    "! plain",
]
BYTES = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80", b"\xfe\xff"]
CONTROL = [b"\x00", b"\x07", b"\x1b", b"\x7f\x00"]


FREE_FORM = {
    "config",
    "deep",
    "geometry_keys",
    "gates",
}  # mappings of any keys (gates: typed by the suites)


def _ancestors(lines: list[str], i: int) -> set[str]:
    out, indent = set(), len(lines[i]) - len(lines[i].lstrip())
    for j in range(i - 1, -1, -1):
        ln = lines[j]
        if not ln.strip() or ln.lstrip().startswith("#"):
            continue
        ind = len(ln) - len(ln.lstrip())
        if ind < indent:
            out.add(ln.strip().lstrip("- ").split(":", 1)[0])
            indent = ind
    return out


def _lines(text: str, key: str) -> list[int]:
    """Lines where key holds a value outside the free-form mappings."""
    pat = re.compile(rf"^\s*{re.escape(key)}:\s*\S")
    lines = text.splitlines()
    return [
        i for i, ln in enumerate(lines) if pat.match(ln) and not _ancestors(lines, i) & FREE_FORM
    ]


def _set_value(text: str, line_no: int, value: str) -> str:
    lines = text.splitlines(keepends=True)
    head = lines[line_no].split(":", 1)[0]
    lines[line_no] = f"{head}: {value}\n"
    return "".join(lines)


def _value_line(rng: random.Random, text: str) -> int:
    """A random line holding `key: value` (not a comment)."""
    lines = text.splitlines()
    candidates = [
        i
        for i, ln in enumerate(lines)
        if re.match(r"^\s+[a-z_]+: \S", ln) and not ln.lstrip().startswith("#")
    ]
    return rng.choice(candidates)


def _nest(depth: int, flow: bool) -> str:
    return "[" * depth + "1" + "]" * depth if flow else "{a: " * depth + "1" + "}" * depth


def _bomb(levels: int) -> str:
    out = ["bomb_0: &b0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        prev = f"*b{i - 1}"
        out.append(f"bomb_{i}: &b{i} [{', '.join([prev] * 9)}]")
    return "\n".join(out) + "\n"


def variants(n: int, seed: int = 19) -> Iterator[Variant]:
    """n variants, the categories in turn, each drawn with a seeded generator."""
    text = SHIPPED.read_text(encoding="utf-8")
    rng = random.Random(seed)
    makers = [_bad_value, _tag, _bad_bytes, _nesting, _alias, _structure, _number, _cut]
    for i in range(n):
        yield makers[i % len(makers)](rng, text, i)


def _bad_value(rng, text, i) -> Variant:
    key = rng.choice(sorted(BAD_VALUES))
    value = rng.choice(BAD_VALUES[key])
    where = rng.choice(_lines(text, key))
    if key == "kv_lora_rank":  # 2r <= n + v for any shipped geometry
        value = rng.choice(["64", "128", "0", "-1"])
    return Variant(
        "value", f"{key}: {value} (line {where + 1})", _set_value(text, where, value).encode()
    )


def _tag(rng, text, i) -> Variant:
    where, tag = _value_line(rng, text), rng.choice(TAGS)
    return Variant("tag", f"{tag} (line {where + 1})", _set_value(text, where, tag).encode())


def _bad_bytes(rng, text, i) -> Variant:
    data = text.encode()
    at = rng.randrange(len(data))
    bad = rng.choice(BYTES + CONTROL)
    return Variant("bytes", f"{bad!r} at byte {at}", data[:at] + bad + data[at:])


def _nesting(rng, text, i) -> Variant:
    depth, flow = rng.choice([33, 100, 1000, 5000, 20000]), rng.random() < 0.5
    where = _value_line(rng, text)
    return Variant(
        "nesting",
        f"{depth} levels ({'flow' if flow else 'mapping'}) at line {where + 1}",
        _set_value(text, where, _nest(depth, flow)).encode(),
    )


def _alias(rng, text, i) -> Variant:
    kind = rng.choice(["bomb", "recursive", "harmless", "merge"])
    if kind == "bomb":
        extra = _bomb(rng.choice([3, 6, 9]))
    elif kind == "recursive":
        extra = "loop: &l [*l]\n"
    elif kind == "harmless":
        extra = "x: &a 1\ny: *a\n"
    else:
        extra = "base: &base {kind: correctness}\nother:\n  <<: *base\n"
    return Variant("alias", f"{kind} alias", (text + "\n" + extra).encode())


def _structure(rng, text, i) -> Variant:
    kind = rng.choice(
        [
            "unknown key",
            "duplicate key",
            "missing section",
            "empty",
            "list root",
            "scalar root",
            "non-scalar key",
            "dangling reference",
        ]
    )
    if kind == "unknown key":
        where = _value_line(rng, text)
        lines = text.splitlines(keepends=True)
        indent = re.match(r"^\s*", lines[where]).group(0)
        free = bool(_ancestors(text.splitlines(), where) & FREE_FORM)
        lines.insert(where, f"{indent}bogus_key: 1\n")
        return Variant(
            "structure",
            f"unknown key at line {where + 1}",
            "".join(lines).encode(),
            must_refuse=not free,
        )
    elif kind == "duplicate key":
        where = _value_line(rng, text)
        lines = text.splitlines(keepends=True)
        lines.insert(where, lines[where])
        out = "".join(lines)
    elif kind == "missing section":
        section = rng.choice(
            ["runtimes", "arms", "geometries", "modules", "suites", "runners", "profiles"]
        )
        out = re.sub(rf"^{section}:", f"{section}_gone:", text, count=1, flags=re.M)
    elif kind == "empty":
        out = rng.choice(["", "\n", "# only a comment\n", "---\n", "~\n"])
    elif kind == "list root":
        out = "- version: 1\n"
    elif kind == "scalar root":
        out = rng.choice(["42\n", "just text\n", "'1'\n"])
    elif kind == "non-scalar key":
        out = text + "\n? [a, b]\n: 1\n"
    else:
        where = rng.choice(_lines(text, "runtime"))
        out = _set_value(text, where, "mlx-nope")
    return Variant("structure", kind, out.encode())


def _number(rng, text, i) -> Variant:
    value = rng.choice(
        [
            "1" * 5000,
            "9" * 30,
            "-" + "9" * 25,
            "1e400",
            "-1e400",
            "0x" + "f" * 30,
            "0o777777777777777777777",
        ]
    )
    key = rng.choice(
        ["num_attention_heads", "samples", "timeout_s", "hidden_size", "heads", "version"]
    )
    where = rng.choice(_lines(text, key))
    return Variant(
        "number",
        f"{key}: {value[:12]}... ({len(value)} chars)",
        _set_value(text, where, value).encode(),
    )


def _cut(rng, text, i) -> Variant:
    """A file cut short: refused unless the cut lands where the rest is still a whole matrix."""
    at = rng.randrange(1, len(text))
    return Variant("cut", f"cut at char {at}", text[:at].encode(), must_refuse=False)


def special_files(folder: Path) -> list[tuple[str, Path]]:
    """Paths that are not a readable matrix file: a FIFO, a device, a folder, links, a big file."""
    import os

    folder.mkdir(parents=True, exist_ok=True)
    fifo = folder / "fifo.yaml"
    if not fifo.exists():
        os.mkfifo(fifo)
    loop = folder / "loop.yaml"
    if not loop.is_symlink():
        os.symlink(loop, loop)
    dangling = folder / "dangling.yaml"
    if not dangling.is_symlink():
        os.symlink(folder / "nowhere", dangling)
    big = folder / "big.yaml"
    with open(big, "wb") as fh:
        fh.write(b"notes: '" + b"x" * (50 << 20) + b"'\n")
    return [
        ("fifo", fifo),
        ("device", Path("/dev/urandom")),
        ("folder", folder),
        ("symlink loop", loop),
        ("dangling link", dangling),
        ("50 MB string", big),
        ("missing", folder / "missing.yaml"),
    ]


def judge(variant: Variant, load, path: Path, max_s: float = 30.0) -> list[str]:
    """Problems of one variant run through load(path): a crash, a hang, an internal repr, a
    message of more than one line, or a variant that must be refused being accepted."""
    import time

    from mlagate.matrix import MatrixError

    path.write_bytes(variant.data)
    t0 = time.perf_counter()
    problems = []
    try:
        load(path)
        if variant.must_refuse:
            problems.append("accepted")
    except MatrixError as exc:
        msg = str(exc)
        if "\n" in msg:
            problems.append("more than one line")
        if REPR.search(msg):
            problems.append(f"internal repr: {msg[:120]}")
    except BaseException as exc:  # noqa: BLE001 - any other exception is the defect being looked for
        problems.append(f"crash: {type(exc).__name__}")
    took = time.perf_counter() - t0
    if took > max_s:
        problems.append(f"took {took:.1f} s")
    return problems
