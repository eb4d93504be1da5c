"""A runtime that patches with the exact formula plus a cache-length floor (verify steps on
caches shorter than the floor stay materialised) fails `dispatch` and `threshold` with a reason
naming the floor, where the shipped warm caches once all lay below it and it read as stock.

Fast: the fake runtime's correct module with a floor of 64 (its profile's caches are 16 and 32;
the warm caches here 4, 16, 32 and 128 span the floor as the shipped ones, 4 to 1280, span
1024). The real arm with a floor of 1024: tests/test_arm_kinds.py."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from mlagate import pathregions
from tests.conftest import FIXTURES, cli

FLOOR = 64


@pytest.fixture(scope="module")
def floored(tmp_path_factory):
    root = tmp_path_factory.mktemp("floor")
    shutil.copytree(FIXTURES / "fakemla-tree", root / "fakemla-tree")
    for name in ("fake-fix.patch", "fake-nudge.patch"):
        shutil.copy(FIXTURES / name, root / name)
    models = root / "fakemla-tree" / "fakemla" / "models"
    text = (models / "fixed.py").read_text()
    text = text.replace(
        "absorbed = L == 1 or use_absorbed(",
        f"absorbed = L == 1 or lat.shape[-2] - L >= {FLOOR} and use_absorbed(",
    )
    (models / "floored.py").write_text(text.replace("FixedAttention", "FlooredAttention"))
    matrix = (FIXTURES / "fake-correctness.yaml").read_text()
    matrix = matrix.replace(
        "gates: {tie_search: 512, cold_widths: [2, 8], ties: either}",
        "gates: {tie_search: 512, floor_caches: [4, 128], cold_widths: [2, 8], ties: either}",
    ).replace("warm_caches: [16, 32]", "warm_caches: [4, 16, 32, 128]")
    entry = re.search(r"(?ms)^  fake/fixed:.*?\n(?=  fake/)", matrix).group(0)
    matrix = matrix.replace(
        entry, entry + entry.replace("fixed", "floored").replace("Fixed", "Floored")
    )
    (root / "matrix.yaml").write_text(matrix)
    out = root / "out"
    argv = ["run", "--matrix", root / "matrix.yaml", "--out", out, "-n", "1"]
    argv += ["--suite", "dispatch", "--suite", "threshold"]
    proc = cli(*argv, "--module", "fake/floored", "--module", "fake/fixed", cache=root / "c")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    return {(r["suite"], r["module"]): r for r in rows}


def test_a_floor_fails_dispatch_with_a_reason_naming_the_floor(floored):
    row = floored[("dispatch", "fake/floored")]
    assert row["verdict"] == "fail" and row["failure"]["kind"] == "wrong_path"
    assert row["reason"].startswith(
        "materialised at L = 2, 3, 4, 8 for every warm T < 128 (T = 4, 16, 32), absorbed from "
        "T = 128: a cache-length floor; the formula says absorbed from T = 1"
    ), row["reason"]
    assert floored[("dispatch", "fake/fixed")]["verdict"] == "pass"  # the same without a floor


def test_a_floor_fails_threshold_with_the_region_first(floored):
    row = floored[("threshold", "fake/floored")]
    assert row["verdict"] == "fail" and "a cache-length floor" in row["reason"], row["reason"]
    assert "absorbed from T = 128" in row["reason"]
    assert floored[("threshold", "fake/fixed")]["verdict"] == "pass"


def test_regions_tell_a_floor_a_ceiling_and_every_cache_apart():
    rnv = (512, 128, 128)

    def sweep(took):
        return [(T, L, took(T, L), "absorbed") for T in (4, 64, 256, 1280) for L in (2, 8)]

    floor = pathregions.describe(sweep(lambda T, L: "absorbed" if T >= 1024 else "x"), rnv)
    assert "for every warm T < 1280 (T = 4, 64, 256), absorbed from T = 1280: a cache-length " \
        "floor" in floor  # fmt: skip
    ceiling = pathregions.describe(sweep(lambda T, L: "absorbed" if T < 100 else "x"), rnv)
    assert "for every warm T > 64 (T = 256, 1280), absorbed up to T = 64: a cache-length " \
        "ceiling" in ceiling  # fmt: skip
    stock = pathregions.describe(sweep(lambda T, L: "materialised"), rnv)
    assert stock.startswith("materialised at L = 2, 8 on every warm cache (T = 4, 64, 256, 1280)")
    assert pathregions.describe(sweep(lambda T, L: "absorbed"), rnv) == ""
    assert pathregions.first_absorbed(2, *rnv) == 1
