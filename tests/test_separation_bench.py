"""benchmarks/separation.py: the margin between fixed and stock or planted arms is taken only
within one runtime (real runtimes or the fake runtime), never across them."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("separation", ROOT / "benchmarks/separation.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(arm: str, ci: list) -> dict:
    return {
        "suite": "l1_parity",
        "arm": arm,
        "verdict": "pass",
        "geometry": {"id": "g"},
        "metrics": {"l1": {"256": {"change": sum(ci) / 2, "ci": ci}}},
    }


def test_a_real_fixed_arm_is_never_measured_against_the_fake_runtimes_plant():
    sep = _bench()
    rows = [
        _row("mlx-lm-0.32.2-patched", [-0.2, 0.19]),
        _row("fake-patched", [-0.05, 0.07]),
        _row("fake-slow", [6.7, 10.1]),
    ]
    (suite,) = sep.table(rows).values()
    assert "margin" not in suite and suite["margins"] == {"fake runtime": 6.7 - 0.07}
    md = sep.markdown("m", sep.table(rows))
    assert "| within the fake runtime: +6.63 |" in md
    # only real arms: no margin without a stock or planted real arm
    (real,) = sep.table(rows[:1] + rows[2:]).values()
    assert "margin" not in real and "margins" not in real
    # one runtime: the plain margin, as before
    (fake,) = sep.table(rows[1:]).values()
    assert fake["margin"] == 6.7 - 0.07
