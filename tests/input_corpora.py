"""The command-line, history-folder and arm-pack corpora of tests/input_fuzz.py (the document
corpus and the judge are there)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import tarfile
from pathlib import Path

from .input_fuzz import FAKE, Case, _sample, fifo, link, result, run_folder, tarball, write

F = str(FAKE)
BAD_SHARDS = [
    " 1/2",
    "1/2 ",
    "1_0/20",
    "\u0661/\u0662",
    "+1/+2",
    "0/2",
    "3/2",
    "1/0",
    "-1/2",
    "1/1001",
    "",
    "1//2",
    "1/2/3",
    "0x1/2",
    "1.0/2",
    "\uff11/\uff12",
]
BAD_COUNTS = [
    "99999999999999999999",
    "0",
    "-1",
    "x",
    "\u0661",
    "1_0",
    " 2",
    "+2",
    "1e3",
    "2.0",
    "4097",
]
BAD_FLOATS = ["-1", "nan", "NaN", "inf", "-inf", "1e309", "x", "1e7", "", " 1"]


def _files(d: Path) -> None:
    run_folder(d)
    (d / "afile").write_text("x")
    fifo(d / "fifo")
    odd = d / b"not-utf8-\xff".decode("utf-8", "surrogateescape")
    odd.mkdir()
    run_folder(odd)


def cli_cases(n: int, seed: int = 27) -> list[Case]:
    """Bad command lines of every verb but scan (each must exit 2 with one line), and a few
    good ones (exit 0 or 3)."""
    rng = random.Random(seed)
    plan = ["plan", "--matrix", F]
    run = ["run", "--matrix", F, "--out", "{d}/out"]
    pool = [Case("cli", f"run --shard {s!r}", [*run, "--shard", s], _files) for s in BAD_SHARDS]
    pool += [Case("cli", f"run -n {c!r}", [*run, "-n", c], _files) for c in BAD_COUNTS]
    pool += [
        Case("cli", f"run --cpu {c!r}", [*run, "--cpu", c], _files)
        for c in ("-1", "x", "\u0661", "1_0", " 2", "99999999999999999999", "auto ")
    ]
    pool += [
        Case("cli", f"mutate -n {c!r}", ["mutate", "--matrix", F, "-n", c], _files)
        for c in BAD_COUNTS[:5]
    ]
    pool += [
        Case(
            "cli",
            f"plan --shards {c!r}",
            [*plan, "--format", "github", "--runner", "linux-cpu", "--shards", c],
            _files,
        )
        for c in BAD_COUNTS[:6]
    ]
    pool += [
        Case("cli", f"health --min-free-gb {v!r}", ["health", "--min-free-gb", v], _files)
        for v in BAD_FLOATS
    ]
    for flag in ("--suite", "--module", "--arm"):
        for verb in (run, plan):
            pool.append(Case("cli", f"{verb[0]} {flag} nosuch", [*verb, flag, "nosuch"], _files))
        pool.append(
            Case(
                "cli",
                f"run {flag} nosuch --shard 1/2 --backend cpu",
                [*run, flag, "nosuch", "--shard", "1/2", "--backend", "cpu"],
                _files,
            )
        )
    for cache in ("{d}/afile", "/dev/null", "{d}/fifo"):
        for verb in (run, plan, ["arms", "--matrix", F, "--keys"]):
            pool.append(
                Case("cli", f"{verb[0]} --cache {cache}", [*verb, "--cache", cache], _files)
            )
    for _verb, argv in [
        ("merge", ["merge", "{d}/fifo", "--out", "{d}/out"]),
        ("merge", ["merge", "{d}/afile", "--out", "{d}/out"]),
        ("merge", ["merge", "{d}/run", "--out", "{d}/afile"]),
        ("merge", ["merge", "{d}/run", "--out", "/dev/null"]),
        ("report", ["report", "{d}/fifo", "--out", "{d}/out"]),
        ("report", ["report", "/dev/null", "--out", "{d}/out"]),
        ("report", ["report", "{d}/run", "--out", "{d}/out", "--commit", ".."]),
        ("report", ["report", "{d}/run", "--out", "{d}/out", "--commit", "a/b"]),
        ("report", ["report", "{d}/run", "--out", "{d}/out", "--commit", "-x"]),
        ("report", ["report", "{d}/run", "--out", "{d}/out", "--mutation", "{d}/fifo"]),
        ("compare", ["compare", "{d}/fifo", "{d}/run"]),
        ("compare", ["compare", "/dev/zero", "{d}/run"]),
        ("compare", ["compare", "..", "{d}/run", "--history", "{d}"]),
        ("costs", ["costs", "{d}/fifo"]),
        ("costs", ["costs", "{d}/run", "--out", "/dev/null"]),
        ("costs", ["costs", "{d}/run", "--out", "{d}/fifo"]),
        ("arms", ["arms", "--matrix", F, "--import", "{d}/fifo"]),
        ("arms", ["arms", "--matrix", F, "--import", "/dev/zero"]),
        ("plan", [*plan, "--costs", "{d}/fifo"]),
        ("plan", [*plan, "--matrix", "{d}/fifo"]),
        ("plan", [*plan, "--profile", "nosuch"]),
        ("run", [*run, "--costs", "/dev/zero"]),
        ("run", [*run, "--profile", "nosuch"]),
        ("run", [*run, "--resume", "{d}/afile"]),
        ("run", ["run", "--matrix", F, "--out", b"{d}/not-utf8-\xff/o", "--suite", "nosuch"]),
        ("report", ["report", b"{d}/missing-\xff", "--out", "{d}/out"]),
    ]:
        pool.append(
            Case(
                "cli",
                " ".join(a if isinstance(a, str) else repr(a) for a in argv[1:]),
                argv,
                _files,
            )
        )
    pool += [
        Case("cli", "good: plan", plan, _files, bad=False, codes=(0,)),
        Case("cli", "good: merge", ["merge", "{d}/run", "--out", "{d}/out"], _files, False, (0,)),
        Case(
            "cli",
            "good: report from a folder whose name is not UTF-8",
            ["report", b"{d}/not-utf8-\xff/run", "--out", b"{d}/not-utf8-\xff/r"],
            _files,
            False,
            (0,),
            owned=("out", "cache", "not-utf8-\udcff/r"),
            env={"PYTHONIOENCODING": "utf-8"},  # a strict stdout: the path is echoed as its bytes
        ),
        Case(
            "cli",
            "good: health --min-free-gb 0.5",
            ["health", "--min-free-gb", "0.5"],
            _files,
            False,
            (0, 1),
        ),
    ]
    return _sample(rng, pool, n)


# --- history ------------------------------------------------------------------------------


def _figures(commit: str, figures: dict | str) -> dict | str:
    doc = {
        "schema": "mlagate.figures/1",
        "figures_version": [],
        "commit": commit,
        "commit_time": "2026-01-01T00:00:00Z",
        "counts": {"pass": 1},
        "figures": {},
    }
    if isinstance(figures, str):
        return json.dumps(doc).replace('"figures": {}', f'"figures": {figures}')
    doc["figures"] = figures
    return doc


def _commit(h: Path, name: str, figures=None, merged=None) -> Path:
    folder = h / name
    write(
        folder / "merged.json",
        merged
        or {
            "schema": "mlagate.merged/1",
            "commit": name,
            "counts": {"pass": 1},
            "results": [result()],
        },
    )
    if figures is not None:
        os.utime(folder / "merged.json", (1, 1))  # figures.json is current
        write(folder / "figures.json", _figures(name, figures))
    return folder


def _history(extra):
    def build(d: Path) -> None:
        run_folder(d)
        h = d / "hist"
        _commit(h, "c0", {"probes|ms|stock|g|cpu": 1.0})
        extra(d, h)

    return build


def _no_script_link(d: Path) -> str:
    page = (d / "out" / "index.html").read_text(encoding="utf-8")
    return (
        "bad input accepted (a javascript: link on the page)" if 'href="javascript:' in page else ""
    )


def history_cases(n: int, seed: int = 27) -> list[Case]:
    """report --history H with H crafted: bad commit ids and links are refused, bad folders are
    skipped with a warning, and nothing is ever written outside --out and H."""
    rng = random.Random(seed)
    argv = ["report", "{d}/run", "--out", "{d}/out", "--history", "{d}/hist"]
    owned = ("out", "hist", "cache")
    pool = []
    for commit in ("..", ".", "a/b", "/abs", "javascript:alert(1)", "a b", "x" * 81, "a\nb"):
        pool.append(
            Case(
                "history",
                f"--commit {commit!r}",
                [*argv, "--commit", commit],
                _history(lambda d, h: None),
                owned=owned,
            )
        )
        pool.append(
            Case(
                "history",
                f"GITHUB_SHA={commit!r}",
                argv,
                _history(lambda d, h: None),
                owned=owned,
                env={"GITHUB_SHA": commit},
            )
        )

    def outside_link(where):
        def extra(d, h):
            target = d / "outside" / "t"
            target.mkdir(parents=True)
            (target / "index.html").write_text("keep")
            if where == "commit":
                link(h / "c1", target)
            elif where == "plots":
                _commit(h, "c1")
                link(h / "c1" / "plots", target)
            elif where == "plot file":
                _commit(h, "c1")
                (h / "c1" / "plots").mkdir()
                for name in ("probes.svg", "index.svg"):
                    link(h / "c1" / "plots" / name, target / "index.html")
            elif where == "index":
                _commit(h, "c1")
                for name in ("index.html", "junit.xml", "summary.md"):
                    link(h / "c1" / name, target / "index.html")

        return extra

    for where in ("commit", "plots", "plot file", "index"):
        pool.append(
            Case(
                "history",
                f"a link at {where} of the commit written",
                [*argv, "--commit", "c1"],
                _history(outside_link(where)),
                owned=owned,
            )
        )
    for name, figures in [
        ("1.7e308", {"probes|ms|stock|g|cpu": 1.7e308}),
        ("-1.7e308", {"probes|ms|stock|g|cpu": -1.7e308}),
        ("a 401-digit integer", '{"probes|ms|stock|g|cpu": ' + "9" * 401 + "}"),
        ("NaN", '{"probes|ms|stock|g|cpu": NaN}'),
        ("a key of 3 parts", {"a|b|c": 1.0}),
    ]:
        pool.append(
            Case(
                "history",
                f"a folder with figures.json {name} (a cache: recomputed)",
                [*argv, "--commit", "c2"],
                _history(lambda d, h, f=figures: _commit(h, "c1", f)),
                bad=False,
                codes=(0,),
                owned=owned,
            )
        )
    for name, make in [
        ("merged.json a FIFO", lambda d, h: fifo(h / "c1" / "merged.json")),
        (
            "merged.json a link to /dev/zero",
            lambda d, h: link(h / "c1" / "merged.json", "/dev/zero"),
        ),
        (
            "merged.json a 401-digit integer",
            lambda d, h: write(
                h / "c1" / "merged.json",
                '{"schema": "mlagate.merged/1", "commit": "c1", '
                '"counts": {"pass": ' + "9" * 401 + '}, "results": []}',
            ),
        ),
        (
            "merged.json nested 100,000 deep",
            lambda d, h: write(h / "c1" / "merged.json", b"[" * 100_000),
        ),
        (
            "a commit id unlike its folder",
            lambda d, h: _commit(
                h,
                "c1",
                merged={
                    "schema": "mlagate.merged/1",
                    "commit": "other",
                    "counts": {},
                    "results": [],
                },
            ),
        ),
    ]:
        pool.append(
            Case(
                "history",
                f"a folder whose {name}",
                [*argv, "--commit", "c2"],
                _history(make),
                bad=False,
                codes=(0,),
                owned=owned,
                skipped="c1",
            )
        )
    merged = {"schema": "mlagate.merged/1", "commit": "c1", "counts": {"pass": 1}}
    for name, change in [  # issue 37: --rerender renders every commit's merged.json again
        ("mutation lacks mutants", {"mutation": {"schema": "mlagate.mutate/1"}}),
        ("gaps.missing an int", {"gaps": {"missing": 5}}),
        ("superseded an int", {"superseded": 3}),
        ("head_run an int", {"head_run": 3}),
        ("machines an int", {"machines": 4}),
        ("outcomes a list", {"outcomes": [1]}),
        (
            "a result's metrics malformed",
            {"results": [result(suite="marginal_cost", metrics={"l1_median_s": {"abc": 0.1}})]},
        ),
    ]:
        doc = {**merged, "results": [result()], **change}
        pool.append(
            Case(
                "history",
                f"--rerender: a folder whose merged.json {name}",
                [*argv, "--commit", "c2", "--rerender"],
                _history(lambda d, h, doc=doc: write(h / "c1" / "merged.json", doc)),
                bad=False,
                codes=(0,),
                owned=owned,
                skipped="c1",
            )
        )
    pool.append(
        Case(
            "history",
            "a folder whose name is not UTF-8",
            [*argv, "--commit", "c2"],
            _history(lambda d, h: _commit(h, "c\udcff")),
            bad=False,
            codes=(0,),
            owned=owned,
        )
    )
    pool.append(
        Case(
            "history",
            "--history named javascript:",
            [
                "report",
                "{d}/run",
                "--out",
                "{d}/out",
                "--history",
                "{d}/out/javascript:alert(1)",
                "--commit",
                "c1",
            ],
            _history(lambda d, h: None),
            bad=False,
            codes=(0,),
            owned=owned,
            check=_no_script_link,
        )
    )
    pool.append(
        Case(
            "history",
            "good: a second commit",
            [*argv, "--commit", "c2"],
            _history(lambda d, h: None),
            bad=False,
            codes=(0,),
            owned=owned,
        )
    )
    return _sample(rng, pool, n)


# --- packs --------------------------------------------------------------------------------


def make_pack(folder: Path, key_file: Path) -> Path:
    """A real pack of the fake matrix's arm, exported with the key (cached for the session)."""
    pack = folder / "pack.tgz"
    if not pack.exists():
        folder.mkdir(parents=True, exist_ok=True)
        key_file.write_bytes(hashlib.sha256(b"mlagate fuzz key").digest())
        env = {
            **os.environ,
            "MLAGATE_CACHE": str(folder / "cache"),
            "MLAGATE_PACK_KEY": str(key_file),
        }
        subprocess.run(
            [sys.executable, "-m", "mlagate", "arms", "--matrix", F, "--export", str(pack)],
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
    return pack


def _members(pack: Path) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    with tarfile.open(pack, "r:gz") as tar:
        return [(m, tar.extractfile(m).read() if m.isreg() else None) for m in tar.getmembers()]


def _rewrite(pack: Path, out: Path, change) -> None:
    members = change(_members(pack))
    for info, data in members:
        if data is not None:
            info.size = len(data)
    out.write_bytes(tarball(members))


def _tamper(consistent: bool, drop_signature: bool = False):
    """Change a module's code; with consistent, rewrite content.json to match."""

    def change(members):
        out, rel, new_hash = [], None, None
        for info, data in members:
            if info.name.endswith("fakemla/models/good.py"):
                data = data + b"\nimport os  # planted\n"
                new_hash = hashlib.sha256(data).hexdigest()
                rel = info.name.split("/", 2)[2]
            if drop_signature and info.name.endswith("/signature"):
                continue
            out.append((info, data))
        if consistent:
            for i, (info, data) in enumerate(out):
                if info.name.endswith("/content.json"):
                    content = json.loads(data)
                    content["files"][rel] = new_hash
                    out[i] = (info, json.dumps(content, indent=0, sort_keys=True).encode())
        return out

    return change


def _member(kind: str):
    def change(members):
        key = members[0][0].name.split("/")[1]
        info = tarfile.TarInfo(f"arms/{key}/site/extra")
        data = None
        if kind == "symlink":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        elif kind == "fifo":
            info.type = tarfile.FIFOTYPE
        elif kind == "device":
            info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 5
        elif kind == "dotdot":
            info.name, data = f"arms/{key}/../../outside/evil", b"x"
        elif kind == "absolute":
            info.name, data = "/tmp/mlagate-fuzz-evil", b"x"
        elif kind == "duplicate":
            first = next(m for m in members if m[0].isreg())
            return [*members, (first[0], b"changed")]
        return [*members, (info, data)]

    return change


def pack_cases(n: int, folder: Path, seed: int = 27) -> list[Case]:
    """arms --import PACK --verify with PACK a real pack changed: every change is refused (exit
    2) with nothing added to the cache; the pack itself imports."""
    rng = random.Random(seed)
    key_file = folder / "pack.key"
    pack = make_pack(folder, key_file)
    argv = ["arms", "--matrix", F, "--import", "{d}/p.tgz", "--verify"]
    env = {"MLAGATE_PACK_KEY": str(key_file)}

    def changed(change):
        def build(d: Path) -> None:
            (d / "outside").mkdir()
            if change is None:
                (d / "p.tgz").write_bytes(pack.read_bytes())
            else:
                _rewrite(pack, d / "p.tgz", change)

        return build

    def raw(make):
        def build(d: Path) -> None:
            (d / "outside").mkdir()
            make(d / "p.tgz")

        return build

    pool = [
        Case(
            "packs", "code tampered, content.json consistent", argv, changed(_tamper(True)), env=env
        ),
        Case(
            "packs",
            "code tampered, content.json consistent, signature dropped",
            argv,
            changed(_tamper(True, True)),
            env=env,
        ),
        Case("packs", "code tampered", argv, changed(_tamper(False)), env=env),
        Case(
            "packs",
            "signature dropped",
            argv,
            changed(lambda ms: [m for m in ms if not m[0].name.endswith("/signature")]),
            env=env,
        ),
        Case(
            "packs", "imported without the key", argv, changed(None), env={"MLAGATE_PACK_KEY": ""}
        ),
        Case(
            "packs",
            "imported with another key",
            argv,
            changed(None),
            env={"MLAGATE_PACK_KEY": "{d}/other.key"},
        ),
        Case("packs", "a FIFO named p.tgz", argv, raw(fifo), env=env),
        Case("packs", "a link to /dev/zero", argv, raw(lambda p: link(p, "/dev/zero")), env=env),
        Case("packs", "not gzip", argv, raw(lambda p: p.write_bytes(b"x" * 100)), env=env),
        Case(
            "packs",
            "cut short",
            argv,
            raw(lambda p: p.write_bytes(pack.read_bytes()[:500])),
            env=env,
        ),
        Case(
            "packs",
            "good: the pack as exported",
            argv,
            changed(None),
            bad=False,
            codes=(0,),
            env=env,
        ),
    ]
    pool += [
        Case("packs", f"a {kind} member", argv, changed(_member(kind)), env=env)
        for kind in ("symlink", "fifo", "device", "dotdot", "absolute", "duplicate")
    ]
    for case in pool:
        if case.name == "imported with another key":
            inner = case.build

            def build(d, inner=inner):
                inner(d)
                (d / "other.key").write_bytes(b"k" * 32)

            case.build = build
    return _sample(rng, pool, n)
