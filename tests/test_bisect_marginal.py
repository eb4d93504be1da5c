"""`mlagate bisect` on a suite with its own bound (marginal_cost: the second query's cost against
1.5 decode steps, not against base) over a real history: mlx-lm 0.32.2 patched, then 4
commits, `L == 1` put back into deepseek_v3 at commit 3 (a stock arm's marginal_cost fails).
Each commit is measured once as its own base; the culprit and its parent are measured again,
fresh, also when a second bisection takes everything else from the store (on a machine fit for
timings: an unfit one's are not stored, so there is nothing to take)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, cli
from tests.realhistory import guard, history

pytestmark = pytest.mark.arms
CASE = "marginal_cost::mlx-lm/deepseek_v3::mlx-lm-0.32.2-patched::deepseek-v3::float32::cpu"


def bisect(repo, shas, out, store, cache):
    return cli("bisect", "--head", repo, "--good", shas[0], "--bad", shas[-1], "--case", CASE,
               "--matrix", ROOT / "matrix.yaml", "--out", out, "--reuse", store,
               "--allow-unfit", cache=cache, timeout=1500)  # fmt: skip


def test_a_put_back_guard_is_found_by_marginal_cost_each_commit_its_own_base(tmp_path, real_cache):
    repo = tmp_path / "mlx-lm"
    shas = history(repo, real_cache, 4, {3: guard})
    proc = bisect(repo, shas, tmp_path / "out", tmp_path / "store", real_cache)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert doc["kind"] == "performance" and doc["status"] == "found", doc["message"]
    assert [c["commit"] for c in doc["culprits"]] == [shas[3]], doc["message"]
    assert doc["pairs"] == 0  # no process pairs: each case against its bound
    *searched, recheck = doc["tried"]
    assert recheck["commit"] == shas[3] and recheck["verdict"] == "bad", recheck
    assert "measured fresh: this bad, parent good" in recheck["why"], recheck
    for t in searched:
        want = "bad" if shas.index(t["commit"]) >= 3 else "good"
        assert t["verdict"] == want, t
    assert len({t["commit"] for t in searched}) == len(searched)  # each commit once
    for d in (tmp_path / "out" / "commits").iterdir():  # every run with the commit as base
        runs = sorted(p.name for p in d.glob("*-*") if p.is_dir())
        assert all(r.endswith("-" + d.name) for r in runs), (d.name, runs)
    store = tmp_path / "store"
    if not (store.exists() and any(store.rglob("*.json"))):
        # an unfit machine's timings are never stored (mlagate.store.entries.decisive)
        done = (tmp_path / "out" / "commits").glob("*/*/results/*.json")
        fit = [json.loads(f.read_text())["health"]["fit"] for f in done]
        assert fit and not any(fit), fit
        return
    again = bisect(repo, shas, tmp_path / "again", store, real_cache)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    redo = json.loads((tmp_path / "again" / "bisect.json").read_text())
    *searched, recheck = redo["tried"]
    assert all(t["reused"] == 1 for t in searched), searched  # from the store
    assert recheck["reused"] == 0 and "measured fresh" in recheck["why"], recheck
