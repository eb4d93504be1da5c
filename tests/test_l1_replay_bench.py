"""benchmarks/l1_replay.py on the H100's recorded cases of issue 46 (the patched arm about 3 %
faster than stock at L = 1, undecided 8 of 8 under the two-sided rule): replayed through the
suite's own loop, the unplanted cases pass under the one-sided rule and the planted +5 % ones
still fail; a pass of a slowdown beyond the tolerance, and a fail of one that is not, count as
false verdicts."""

import importlib.util
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
H100 = [ROOT / "docs/reference/h100" / f"l1-power-{n}.jsonl" for n in ("h100", "h100b")]
SETTING = {"name": "shipped", "tol": 0.032, "min": 4, "max": 56, "budget": 180}


def _bench():
    spec = importlib.util.spec_from_file_location("l1_replay", ROOT / "benchmarks/l1_replay.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_h100s_recorded_faster_control_passes_and_its_planted_slowdown_fails():
    bench = _bench()
    source, round_s, normal = bench.recorded(H100)
    assert normal and {s: len(c) for s, c in source.items()} == {0.0: 8, 5.0: 10}
    suite, rng = bench._suite(), random.Random(0)
    for size, verdict in ((0.0, "pass"), (5.0, "fail")):
        got = [
            bench.replay(suite, *bench._draw(rng, size, source, True), SETTING, round_s)
            for _ in range(3)
        ]
        assert {g["verdict"] for g in got} == {verdict}, got
        row = bench._row("here", SETTING, size, got, True)
        assert row["false"] == 0 and row["decided"] == 3
    wrong = [{"verdict": "fail", "pairs": 4, "seconds": 1.0}]
    assert bench._row("here", SETTING, 0.0, wrong, True)["false"] == 1
    assert bench._row("here", SETTING, 2.0, wrong, True)["false"] is None  # realised unknown
    assert bench._row("here", SETTING, 2.0, wrong, False)["false"] == 1
