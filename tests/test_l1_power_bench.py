"""benchmarks/l1_power.py plants by the measured step at each cache length: on a machine where
a wait costs more (or less) than its length, the next wait of a size is sized by what the
earlier ones realised, and the table prints the realised change beside the nominal size. The
case lines here are synthetic (a machine model); the benchmark's matrix is read by the real
matrix reader."""

import importlib.util
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
STEPS = {256: 0.001, 4096: 0.008}


def _bench():
    spec = importlib.util.spec_from_file_location("l1_power", ROOT / "benchmarks/l1_power.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _case(bench, size: float, wait: dict, unplanted: float, cost: dict) -> dict:
    """A case on a machine where waiting w at cache length T slows the step by cost[T] * w."""
    l1 = [
        {"T": T, "change": unplanted + cost[T] * wait.get(T, 0.0) / step}
        for T, step in STEPS.items()
    ]
    line = {"size": size, "l1": l1, "wait_s": {str(t): w for t, w in wait.items()}}
    line["realised"] = bench.realised(line)
    return line


def test_a_wait_the_machine_amplifies_is_resized_until_it_realises_the_nominal_size():
    """The size is against stock, the gate's baseline: the activation alone is 3 % faster, so
    +5 % waits 8 % of the step; the realised change is the change against stock."""
    bench = _bench()
    cost = {256: 2.6, 4096: 1.0}  # a short step pays 2.6 times its wait, a long one its wait
    lines = [_case(bench, 0, {}, -0.03, cost)]  # the activation alone: 3 % faster
    assert lines[0]["realised"] == {"256": -0.03, "4096": -0.03}
    first = bench.waits(5, STEPS, lines)
    assert {T: round(w, 9) for T, w in first.items()} == {256: 0.08 * 0.001, 4096: 0.08 * 0.008}
    lines.append(_case(bench, 5, first, -0.03, cost))
    assert round(lines[-1]["realised"]["256"], 6) == 0.178  # realised beside nominal: 17.8 %
    assert round(lines[-1]["realised"]["4096"], 6) == 0.05
    again = bench.waits(5, STEPS, lines)
    assert again[256] < first[256] / 2 and round(again[4096] / first[4096], 6) == 1
    lines.append(_case(bench, 5, again, -0.03, cost))
    assert {T: round(v, 6) for T, v in lines[-1]["realised"].items()} == {"256": 0.05, "4096": 0.05}
    md = bench.markdown({"machine": _machine(), "gates": _gates(), "table": _table(bench, lines)})
    assert "| +5 % | +11.4% at T=256, +5.0% at T=4096 |" in md  # the median of the two cases


def _table(bench, lines):
    for c in lines:
        c.update(verdict="fail", case_s=10.0, pairs=4, load=0.5)
    return bench.summary(lines, [0, 5])


def _machine():
    return {"machine": "m", "cpus": 2, "system": "Linux", "mlx": "0", "date": "d"}


def _gates():
    return {
        "tolerance": {"cpu": 0.032},
        "max_pairs": 56,
        "samples": 11,
        "budget_s": {"quick": 180},
        "geometry": "deepseek-v3",
        "mode": "busy",
        "run_args": [],
    }


def test_the_benchmarks_matrix_with_its_waits_is_read_by_the_matrix_reader(tmp_path):
    from mlagate.matrix import load

    bench = _bench()
    bench._stage(tmp_path)
    args = SimpleNamespace(mode="busy", geometry="deepseek-v3", gate=["max_pairs=24"])
    m = load(bench._matrix(tmp_path, {5.0: {256: 0.0001}}, args))
    arm = m.arms["l1plant-5"]
    assert arm.baseline == "mlx-lm-0.32.2" and m.suites["l1_parity"].gates["max_pairs"] == 24
    assert '"256": 0.0001' in str(arm.activate)


def test_a_continued_benchmark_finishes_the_run_that_was_cut_short():
    bench = _bench()
    assert bench.planned([], [0, 5], 2) == [(0, 0), (0, 5), (1, 0), (1, 5)]
    kept = [{"run": 0, "size": 0}, {"run": 0, "size": 5}, {"run": 1, "size": 0}]
    assert bench.planned(kept, [0, 5], 2) == [(1, 5), (2, 0), (2, 5)]
    assert bench.planned(kept[:2], [0, 5], 1) == [(1, 0), (1, 5)]
