"""l1_parity on real arms of both runtimes (the shipped matrix): each arm's caches are prefilled
once a case, saved, and loaded by every process pair's workers, whose loaded state must hash as
the primed one did (mlx-lm 0.32.2's KVCache state is its whole buffers and the offset,
mlx-vlm's the filled part: tests/test_primed_state.py has both forms)."""

import json
import shutil

import pytest

from .conftest import ROOT, cli

pytestmark = pytest.mark.arms


@pytest.mark.parametrize(
    "module, arm",
    [
        ("mlx-lm/glm4_moe_lite", "mlx-lm-0.32.2-patched"),
        ("mlx-vlm/glm4_moe_lite", "mlx-vlm-0.7.10"),
    ],
)
def test_every_round_loads_the_caches_primed_once(module, arm, real_cache, tmp_path):
    out = tmp_path / "out"
    proc = cli(
        "run", "--matrix", _loose_matrix(tmp_path), "--suite", "l1_parity", "--module", module,
        "--arm", arm, "--out", out, "--allow-unfit", cwd=ROOT, cache=real_cache,
    )  # fmt: skip
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    measured = [r for r in rows if r["evidence"] != "argued"]
    assert len(measured) == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    r = measured[0]
    assert r["verdict"] != "fail" and "not the one primed" not in (r["reason"] or ""), r["reason"]
    m = r["metrics"]
    assert m["primed_once"]["loaded"] is True
    assert m["sequential"]["process_pairs"] >= 4
    rounds = [p["seconds"] for p in m["pairs"] if "seconds" in p]
    assert len(rounds) == m["sequential"]["process_pairs"]
    assert {row["estimator"] for row in m["l1"].values()} <= {"mean", "trimmed"}


def _loose_matrix(tmp_path):
    """The shipped matrix with l1_parity's tolerance and pairs of a loaded test machine (this
    test checks the loading of primed caches, not the gate; under tox's parallel tests the
    shipped 3.2 % is not decidable)."""
    text = (ROOT / "matrix.yaml").read_text()
    for shipped, loose in (("tolerance: {cpu: 0.032,", "tolerance: {cpu: 0.10,"),
                           ("max_pairs: 56 ", "max_pairs: 12 ")):  # fmt: skip
        assert text.count(shipped) == 1, shipped
        text = text.replace(shipped, loose)
    shutil.copytree(ROOT / "patches", tmp_path / "patches")
    path = tmp_path / "matrix.yaml"
    path.write_text(text)
    return path
