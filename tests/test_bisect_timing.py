"""`mlagate bisect` on a performance case (l1_parity) over a real history: mlx-lm 0.32.2
patched, then 8 commits of unrelated edits with an L = 1 step about 8 % slower planted in
deepseek_v3 at commit 5 (a busy-wait of 8 % of the step measured on this machine). The ends are
confirmed by the suite's process pairs, each midpoint compared with both ends of its range (the
later commit always head: l1_parity is one-sided), the culprit re-checked against its parent,
measured fresh.

The matrix is the shipped one with l1_parity's CPU tolerance at 5 % (the shipped 3.2 % sits at
this shared 2-core machine's floor and takes up to 56 pairs a case; docs/bisect.md, with its
times, quiet and loaded). A loaded machine amplifies the planted wait (docs/performance.md) and
may leave a midpoint undecided (skipped, gone around)."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import ROOT, cli
from tests.realhistory import history, slowdown

pytestmark = pytest.mark.arms
CASE = "l1_parity::mlx-lm/deepseek_v3::mlx-lm-0.32.2-patched::deepseek-v3::float32::cpu"


def loose_matrix(folder):
    text = (ROOT / "matrix.yaml").read_text()
    assert text.count("tolerance: {cpu: 0.032,") == 1
    (folder / "matrix.yaml").write_text(
        text.replace("tolerance: {cpu: 0.032,", "tolerance: {cpu: 0.05,")
    )
    shutil.copytree(ROOT / "patches", folder / "patches")
    return folder / "matrix.yaml"


def test_a_planted_l1_slowdown_is_found_with_process_pairs(tmp_path, real_cache):
    shas = history(tmp_path / "mlx-lm", real_cache, 8, {5: slowdown})
    out = tmp_path / "out"
    proc = cli("bisect", "--head", tmp_path / "mlx-lm", "--good", shas[0], "--bad", shas[-1],
               "--case", CASE, "--matrix", loose_matrix(tmp_path), "--out", out,
               "--reuse", tmp_path / "store", "--allow-unfit", cache=real_cache,
               timeout=2400)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((out / "bisect.json").read_text())
    assert doc["kind"] == "performance" and doc["status"] == "found", doc["message"]
    assert [c["commit"] for c in doc["culprits"]] == [shas[5]], doc["message"]
    assert doc["pairs"] >= 8  # the ends and every comparison by process pairs
    end, *mids, recheck = doc["tried"]
    assert end["verdict"] == "end" and end["why"] == "bad against good: differs"
    assert recheck["commit"] == shas[5] and "re-checked against its parent" in recheck["why"]
    for t in mids:
        i = shas.index(t["commit"])
        assert t["verdict"] in ("skipped", "good" if i < 5 else "bad"), t
        assert all(c["interval"] for c in t["cases"].values()), t


def test_a_regression_that_does_not_reproduce_stops_at_the_ends(tmp_path, real_cache):
    shas = history(tmp_path / "mlx-lm", real_cache, 3, {})
    proc = cli("bisect", "--head", tmp_path / "mlx-lm", "--good", shas[0], "--bad", shas[-1],
               "--case", CASE, "--matrix", loose_matrix(tmp_path), "--out", tmp_path / "out",
               "--reuse", tmp_path / "store", "--allow-unfit", cache=real_cache,
               timeout=900)  # fmt: skip
    doc = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert len(doc["tried"]) == 1 and not doc["culprits"], doc
    assert "does not reproduce on this runner" in doc["message"], doc["message"]
    assert proc.returncode == (1 if doc["status"] == "ends do not differ" else 3)
