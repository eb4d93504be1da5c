"""Arm packs: crafted packs are refused whole; installed arms are checked against their manifest."""

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from mlagate import matrix
from mlagate.arm import arms, packs

KEY = "0123456789abcdef0123"


def _arm(fake_matrix: Path):
    m = matrix.load(fake_matrix)
    return m.arms["fake-stock"], m.runtimes["fakemla"]


def _file(tar, name, data=b"x = 1\n", mode=0o644):
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def _manifest(key: str) -> bytes:
    """An arm.json as an install of an older mlagate wrote it (no schema field)."""
    source = {"kind": "path", "spec": "/x/fakemla-tree", "ref": None}
    fields = {"arm": "fake-stock", "runtime": "fakemla", "source": source, "patches": []}
    fields.update(needs=[], version="tree", key=key, created="2026-12-01T22:50:31Z")
    return json.dumps(fields).encode()


def _good_arm(tar, key=KEY, files=None, signed=True):
    files = files or {"site/fakemla/__init__.py": b"", "arm.json": _manifest(key)}
    digest = {rel: __import__("hashlib").sha256(data).hexdigest() for rel, data in files.items()}
    content = json.dumps({"schema": packs.CONTENT_SCHEMA, "files": digest}).encode()
    _file(tar, f"arms/{key}/{packs.CONTENT}", content)
    if signed:
        sig = packs.signature(packs.signing_key(), key, content).encode()
        _file(tar, f"arms/{key}/{packs.SIGNATURE}", sig)
    for rel, data in files.items():
        _file(tar, f"arms/{key}/{rel}", data)


def _pack(path: Path, build) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        build(tar)
    return path


def _link(tar, name, target, kind=tarfile.SYMTYPE):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    tar.addfile(info)


def _snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


CRAFTED = {
    "symlink chain": lambda t: (
        _good_arm(t),
        _link(t, f"arms/{KEY}/a", "."),
        _link(t, f"arms/{KEY}/b", "a/../../.."),
        _file(t, f"arms/{KEY}/b/escaped.txt"),
    ),
    "hard link": lambda t: (
        _good_arm(t),
        _link(t, f"arms/{KEY}/h", "/etc/passwd", tarfile.LNKTYPE),
    ),
    "absolute path": lambda t: (_good_arm(t), _file(t, "/tmp/mlagate-escaped.txt")),
    "parent path": lambda t: (_good_arm(t), _file(t, f"arms/{KEY}/../../escaped.txt")),
    "device file": lambda t: (_good_arm(t), _dev(t, f"arms/{KEY}/null")),
    "outside arms/": lambda t: (_good_arm(t), _file(t, "elsewhere/x.py")),
    "oversized member": lambda t: (_good_arm(t), _file(t, f"arms/{KEY}/big.bin", b"\0" * 70_000)),
    "poisoned file": lambda t: (
        _good_arm(t, files={"arm.json": b"{}"}),
        _file(t, f"arms/{KEY}/site/evil.py", b"import os\n"),
    ),
    "a good arm then a bad one": lambda t: (
        _good_arm(t, key="f" * 20),
        _good_arm(t),
        _link(t, f"arms/{KEY}/s", "/"),
    ),
}


WHY = {
    "symlink chain": "a link",
    "hard link": "a link",
    "absolute path": "absolute",
    "parent path": "parent",
    "device file": "not a regular file",
    "outside arms/": "outside arms/",
    "oversized member": "over the limit",
    "poisoned file": "not in its content manifest",
    "a good arm then a bad one": "a link",
}


def _dev(tar, name):
    info = tarfile.TarInfo(name)
    info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
    tar.addfile(info)


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_a_crafted_pack_is_refused_whole_and_nothing_lands(case, tmp_path):
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    (cache / "arms").mkdir(parents=True)
    outside.mkdir()
    pack = _pack(outside / "pack.tar.gz", CRAFTED[case])
    before, before_cache = _snapshot(tmp_path), _snapshot(cache)
    with pytest.raises(packs.PackError) as err:
        arms.import_cache(pack, cache, packs.Limits(member_bytes=64_000))
    assert "\n" not in str(err.value) and str(err.value).startswith(f"{pack}: ")
    assert WHY[case] in str(err.value)
    assert _snapshot(cache) == before_cache, "nothing lands inside the cache"
    assert _snapshot(tmp_path) == before, "nothing lands outside it"
    assert not Path("/tmp/mlagate-escaped.txt").exists()


def test_a_clean_crafted_pack_is_accepted(tmp_path):
    """The crafted packs above are refused for their defect, not for their shape."""
    pack = _pack(tmp_path / "pack.tar.gz", _good_arm)
    assert arms.import_cache(pack, tmp_path / "cache") == [KEY]
    packs.verify(tmp_path / "cache" / "arms" / KEY)


def test_a_pack_cannot_overwrite_an_installed_arm(fake_matrix, fake_cache, tmp_path):
    arm, rt = _arm(fake_matrix)
    inst = arms.materialise(arm, rt, fake_cache)
    pack = arms.export({arm.id: inst}, tmp_path / "arms.tar.gz")
    other = tmp_path / "other"
    assert arms.import_cache(pack, other) == [inst.key]
    target = other / "arms" / inst.key / "site" / "fakemla" / "models" / "good.py"
    original = target.read_bytes()

    def poisoned(tar):
        files = {
            str(p.relative_to(inst.dir)): p.read_bytes()
            for p in inst.dir.rglob("*")
            if p.is_file() and p.name != packs.CONTENT
        }
        files["site/fakemla/models/good.py"] = b"# poisoned\n"
        _good_arm(tar, key=inst.key, files=files)

    bad = _pack(tmp_path / "poison.tar.gz", poisoned)
    with pytest.raises(packs.PackError, match="installed with other content"):
        arms.import_cache(bad, other)
    assert target.read_bytes() == original
    assert arms.import_cache(pack, other) == [inst.key], "the same content imports again"


def test_a_changed_arm_is_refused_at_run_start(fake_matrix, fake_cache, run_cli):
    assert run_cli("plan", "--matrix", fake_matrix, cache=fake_cache).returncode == 0
    assert run_cli("arms", "--matrix", fake_matrix, "--verify", cache=fake_cache).returncode == 0
    arm, rt = _arm(fake_matrix)
    changed = arms.materialise(arm, rt, fake_cache).site / "fakemla" / "models" / "good.py"
    changed.write_text(changed.read_text() + "\n# changed after install\n")
    proc = run_cli(
        "run", "--matrix", fake_matrix, "--out", fake_cache.parent / "o", cache=fake_cache
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        proc.stderr.count("\n") == 1
        and "site/fakemla/models/good.py changed since install" in proc.stderr
    )
    assert not (fake_cache.parent / "o" / "results").exists()
    verify = run_cli("arms", "--matrix", fake_matrix, "--verify", cache=fake_cache)
    assert verify.returncode == 1 and "CHANGED" in verify.stdout


def test_an_added_file_is_refused(fake_matrix, fake_cache):
    arm, rt = _arm(fake_matrix)
    inst = arms.materialise(arm, rt, fake_cache)
    (inst.site / "fakemla" / "sitecustomize.py").write_text("print('hi')\n")
    with pytest.raises(arms.ArmError, match="not in its content manifest"):
        arms.verify_all({arm.id: inst})
    os.remove(inst.site / "fakemla" / "sitecustomize.py")
    (inst.site / "fakemla" / "__pycache__").mkdir(exist_ok=True)
    (inst.site / "fakemla" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    arms.verify_all({arm.id: inst})  # byte code caches are not content


@pytest.mark.parametrize("data", [b"", b"not a tar", b"\x1f\x8b\x08\x00garbage"])
def test_a_broken_pack_is_one_line(data, tmp_path, run_cli):
    pack = tmp_path / "pack.tar.gz"
    pack.write_bytes(data)
    proc = run_cli("arms", "--import", pack, cache=tmp_path / "cache")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    missing = run_cli("arms", "--import", tmp_path / "nope.tgz", cache=tmp_path / "cache")
    assert missing.returncode == 2 and "cannot read" in missing.stderr
