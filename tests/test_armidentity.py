"""One arm identity, two keys: the arm cache key (mlagate.arm.arms.arm_key) and the reuse key's arm
part (mlagate.gate.reuse.keys), pinned to the values the code gave before they shared
mlagate.arm.armidentity (main at c0dff10, on 2-core Linux x86_64 with Python 3.11). A pin that moves
means every cached arm is installed again (its folder is not found) or every case is measured
again: change one only on purpose, and say why in the commit."""

from pathlib import Path
from types import MappingProxyType

import pytest

from mlagate import matrix
from mlagate.arm import armidentity, arms
from mlagate.arm.armidentity import Interpreter
from mlagate.gate.reuse.keys import digest
from mlagate.matrix import Activation, Arm, ArmSource, Overlay, OverlayFile

from .conftest import ROOT

LINUX_311 = Interpreter("3.11", "linux-x86_64")

# arm: (cache key on Linux x86_64 with Python 3.11, digest of the reuse key's arm part)
SHIPPED = {
    "mlx-lm-0.32.2": (
        "41c23ee1acd3ffd87a21",
        "24b2ea5c14a1d105ad5545087930bc55d8a6532acf9978fef05a1d03ca20de00",
    ),
    "mlx-lm-0.32.2-patched": (
        "8ce450e69fa2e2df8c7a",
        "277d0c0e7fd961721616c96ae4171ddb77527f5a9a4ff2b1c6db64bed3c551d9",
    ),
    "mlx-lm-0.31.3": (
        "711a5f009b91e2b341c7",
        "24b2ea5c14a1d105ad5545087930bc55d8a6532acf9978fef05a1d03ca20de00",
    ),
    "mlx-vlm-0.6.17": (
        "5695676233902e06e5f0",
        "1bddd5c26bda1684d0a196466b883fd8276cc0b23bdc29d651b4560bcaf879a6",
    ),
    "mlx-vlm-0.7.10": (
        "3de95b8e185df5b19e63",
        "1bddd5c26bda1684d0a196466b883fd8276cc0b23bdc29d651b4560bcaf879a6",
    ),
}

# each kind of arm, from files of fixed bytes: (cache key, digest of the reuse part)
KINDS = {
    "patched": (
        "cc48d89e03bfd284338d",
        "67c1e6b8539ffaa3114daa3caf892fcf8bbf3bf6f937513bdf0b826446047df2",
    ),
    "needs": (
        "5695676233902e06e5f0",
        "1bddd5c26bda1684d0a196466b883fd8276cc0b23bdc29d651b4560bcaf879a6",
    ),
    "git": (
        "fc277f425ecf695ac4bb",
        "24b2ea5c14a1d105ad5545087930bc55d8a6532acf9978fef05a1d03ca20de00",
    ),
    "activating": ("04847d01e2d29c0fcc5d", None),  # its reuse part names a folder by its path
    "overlay": (
        "3a6dfa3303ad708b7f0d",
        "a149fc1cd9af4dcfef7304a743eb6f081459efaef0412ff572b24c3327c37a8d",
    ),
}
PATCH_SHA = "922dd52a81ff1c3d456cb861de7ad959496295c809971e848d414d3cdfe3fb23"
EXTRA_SHA = "029beaa519a0d478f100f5e687d0cbea2de009ed619664cccd02b10b832943dd"


def _kinds(d: Path) -> dict[str, Arm]:
    d.mkdir(parents=True, exist_ok=True)
    (d / "fix.patch").write_bytes(b"--- a/x\n+++ b/x\n")
    (d / "over.py").write_bytes(b"# overlaid\n")
    (d / "extra-1.0.tar.gz").write_bytes(b"not really a tarball\n")
    (d / "pkg" / "sub").mkdir(parents=True)
    (d / "pkg" / "__init__.py").write_bytes(b"X = 1\n")
    (d / "pkg" / "sub" / "mod.py").write_bytes(b"Y = 2\n")
    (d / "pkg" / "data.txt").write_bytes(b"not python\n")
    lm = ArmSource("pypi", "mlx-lm==0.32.2")
    patched = Arm("patched", "mlx-lm", lm, "stock", patches=(d / "fix.patch",))
    env = MappingProxyType({"ON": "1", "OFF": None})
    installs = (str(d / "extra-1.0.tar.gz"), str(d / "pkg"), "somepkg==1.0")
    over = Overlay(patched, (OverlayFile("mlx_lm/models/x.py", d / "over.py"),))
    vlm = ArmSource("pypi", "mlx-vlm==0.6.17")
    git = ArmSource("git", "https://example.org/r.git", "abc123")
    return {
        "patched": patched,
        "needs": Arm("needs", "mlx-vlm", vlm, "stock", needs=("pillow", "numpy")),
        "git": Arm("git", "mlx-lm", git, "patched"),
        "activating": Arm(
            "activating",
            "mlx-lm",
            lm,
            "patched",
            patches=(d / "fix.patch",),
            activate=Activation("pkg", "enable", env, installs),
        ),
        "overlay": Arm(
            "overlay", "mlx-lm", lm, "patched", (d / "fix.patch",), ("numpy",), overlay=over
        ),
    }


def test_the_shipped_arms_keep_their_cache_and_reuse_keys():
    m = matrix.load(ROOT / "matrix.yaml")
    assert set(m.arms) == set(SHIPPED), "an arm was added or removed: pin its keys here"
    got = {
        a.id: (armidentity.cache_key(a, LINUX_311), digest(armidentity.reuse_data(a)))
        for a in m.arms.values()
    }
    assert got == SHIPPED
    for a in m.arms.values():  # what `mlagate arms --keys` prints and the cache is found by
        if not a.needs or Interpreter.here() == LINUX_311:
            assert arms.arm_key(a) == SHIPPED[a.id][0], a.id


def test_every_kind_of_arm_keeps_its_keys(tmp_path):
    for name, arm in _kinds(tmp_path).items():
        key, reuse = KINDS[name]
        assert armidentity.cache_key(arm, LINUX_311) == key, name
        if reuse is not None:
            assert digest(armidentity.reuse_data(arm)) == reuse, name
    act = armidentity.reuse_data(_kinds(tmp_path / "again")["activating"])
    assert act == {
        "patches": [PATCH_SHA],
        "overlay": [],
        "activate": {
            "module": "pkg",
            "function": "enable",
            "env": {"ON": "1", "OFF": None},
            "install": [
                f"extra-1.0.tar.gz:{EXTRA_SHA}",
                str(tmp_path / "again" / "pkg"),
                "somepkg==1.0",
            ],
        },
        "needs": [],
    }


def test_the_cache_uses_this_interpreter_only_for_arms_with_needs(tmp_path):
    kinds = _kinds(tmp_path)
    other = Interpreter("3.13", "macosx-14.0-arm64")
    for name in ("patched", "git", "activating"):
        arm = kinds[name]
        assert armidentity.cache_key(arm, other) == arms.arm_key(arm) == KINDS[name][0]
    needs = kinds["needs"]
    assert armidentity.cache_key(needs, other) != KINDS["needs"][0]
    assert arms.arm_key(needs) == armidentity.cache_key(needs, Interpreter.here())


@pytest.mark.parametrize(
    "change",
    ["patch", "overlaid file", "activated file", "activated folder", "need"],
)
def test_each_part_of_the_identity_moves_the_cache_key(tmp_path, change):
    kinds = _kinds(tmp_path)
    before = {n: armidentity.cache_key(a, LINUX_311) for n, a in kinds.items()}
    target, path = {
        "patch": ("patched", tmp_path / "fix.patch"),
        "overlaid file": ("overlay", tmp_path / "over.py"),
        "activated file": ("activating", tmp_path / "extra-1.0.tar.gz"),
        "activated folder": ("activating", tmp_path / "pkg" / "sub" / "mod.py"),
        "need": ("needs", None),
    }[change]
    arm = kinds[target]
    if path is None:
        arm = Arm(arm.id, arm.runtime, arm.source, arm.role, needs=(*arm.needs, "scipy"))
    else:
        path.write_bytes(path.read_bytes() + b"# changed\n")
    assert armidentity.cache_key(arm, LINUX_311) != before[target]


def test_activation_env_moves_the_reuse_part_not_the_cache_key(tmp_path):
    arm = _kinds(tmp_path)["activating"]
    act = Activation("pkg", "enable", MappingProxyType({"ON": "0"}), arm.activate.install)
    other = Arm(arm.id, arm.runtime, arm.source, arm.role, arm.patches, activate=act)
    assert armidentity.cache_key(other, LINUX_311) == KINDS["activating"][0]
    assert armidentity.reuse_data(other) != armidentity.reuse_data(arm)
