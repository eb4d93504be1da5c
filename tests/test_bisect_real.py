"""`mlagate bisect` on a real history: mlx-lm 0.32.2's installed files with the shipped patch,
then 32 commits (unrelated edits; `L == 1` put back into deepseek_v3 at commit 19), bisected on
one dispatch case. The first bad commit is found in at most ceil(log2 N) + 2 commits tried; a
second bisection through the same store measures nothing again."""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from tests.conftest import ROOT, cli
from tests.realhistory import guard, history

pytestmark = pytest.mark.arms
CASE = "dispatch::mlx-lm/deepseek_v3::mlx-lm-0.32.2-patched::deepseek-v3::float32::cpu"
N = 32


def bisect(repo, out, store, cache, *more):
    argv = ["bisect", "--head", repo, "--good", "main~32", "--bad", "main", "--case", CASE]
    return cli(*argv, "--out", out, "--reuse", store, "--matrix", ROOT / "matrix.yaml", *more,
               cache=cache, timeout=1200)  # fmt: skip


@pytest.fixture
def planted(tmp_path, real_cache):
    shas = history(tmp_path / "mlx-lm", real_cache, N, {19: guard})
    return tmp_path / "mlx-lm", shas


def test_the_commit_that_put_l_equals_1_back_is_found(tmp_path, real_cache, planted):
    repo, shas = planted
    proc = bisect(repo, tmp_path / "out", tmp_path / "store", real_cache)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert doc["status"] == "found" and [c["commit"] for c in doc["culprits"]] == [shas[19]]
    assert len(doc["tried"]) <= math.ceil(math.log2(N)) + 2, doc["tried"]
    stat = doc["culprits"][0]["diff_stat"]
    assert stat == [{"file": "mlx_lm/models/deepseek_v3.py", "added": 1, "removed": 3}], stat
    assert doc["culprits"][0]["replay"] and "bisect: " in proc.stderr  # the progress lines
    verdicts = {t["commit"]: t["verdict"] for t in doc["tried"]}
    assert all(v == "good" for s, v in verdicts.items() if shas.index(s) < 19)
    assert all(v == "bad" for s, v in verdicts.items() if shas.index(s) >= 19)
    assert (tmp_path / "out" / "bisect.html").read_text().count(shas[19][:12]) >= 2
    again = bisect(repo, tmp_path / "again", tmp_path / "store", real_cache)
    assert again.returncode == 0, again.stderr[-3000:]
    redo = json.loads((tmp_path / "again" / "bisect.json").read_text())
    assert redo["culprits"] == doc["culprits"] or redo["culprits"][0]["commit"] == shas[19]
    assert all(t["reused"] == 1 for t in redo["tried"]), redo["tried"]  # nothing measured again


def test_a_second_runner_bisects_through_the_git_store_measuring_nothing(
    tmp_path, real_cache, planted
):
    """Runner A bisects into its folder store and publishes it; runner B, with nothing of its
    own, reads the git store: every commit it tries is reused, and nothing goes to the remote."""
    repo, shas = planted
    first = bisect(repo, tmp_path / "a", tmp_path / "store-a", real_cache, "--max-commits", "4")
    assert first.returncode == 3, first.stdout[-3000:] + first.stderr[-3000:]
    remote = tmp_path / "fleet.git"
    subprocess.run(["git", "init", "-q", "--bare", remote], check=True)
    spec = f"git+file://{remote}"
    push = cli("store", "push", tmp_path / "store-a", spec, cache=real_cache)
    assert push.returncode == 0, push.stdout + push.stderr
    ref = ["git", "-C", remote, "rev-parse", "refs/heads/mlagate-results"]
    before = subprocess.run(ref, capture_output=True, text=True, check=True).stdout
    other = tmp_path / "cache-b"
    other.mkdir()
    for part in ("arms", "blas", "checkpoints", "scans"):  # runner B: no store in its cache
        (other / part).symlink_to(real_cache / part)
    second = bisect(repo, tmp_path / "b", spec, other, "--max-commits", "4")
    assert second.returncode == 3, second.stdout[-3000:] + second.stderr[-3000:]
    tried = json.loads((tmp_path / "b" / "bisect.json").read_text())["tried"]
    assert len(tried) == 4 and all(t["reused"] == 1 for t in tried), tried
    assert subprocess.run(ref, capture_output=True, text=True, check=True).stdout == before
    assert not any((other / "store").rglob("*.json"))  # nothing measured, nothing stored


def test_a_limit_says_which_range_is_left(tmp_path, real_cache, planted):
    repo, shas = planted
    proc = bisect(repo, tmp_path / "out", tmp_path / "store", real_cache, "--max-commits", "3")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert doc["status"] == "range left" and len(doc["tried"]) == 3
    assert shas[19] in doc["range_left"] and "--max-commits 3 reached" in doc["message"]


def test_ends_that_do_not_differ_say_so_and_stop(tmp_path, real_cache, planted):
    repo, shas = planted
    proc = cli("bisect", "--head", repo, "--good", shas[0], "--bad", shas[10], "--case", CASE,
               "--out", tmp_path / "out", "--reuse", tmp_path / "store", cache=real_cache,
               timeout=600)  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "the ends do not differ: good " in proc.stdout and "dispatch pass" in proc.stdout
    doc = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert len(doc["tried"]) == 2 and not doc["culprits"]
