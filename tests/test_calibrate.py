"""mlagate calibrate: a performance gate's bound proposed between the fixed arms' interval tops
and the stock arms' interval bottoms measured on one runner, and refused where they overlap."""

import json
import shutil

import pytest

from mlagate.commands import calibrate
from mlagate.errors import UsageError

from .conftest import FIXTURES, cli, uncalibrated_correctness

REAL = FIXTURES / "calibrate"  # two speculative results of the CPU runner (docs/speculative.md)


def _row(arm, control, interval, runner="linux-cpu", suite="speculative"):
    return {
        "case_id": f"{suite}::{arm}",
        "suite": suite,
        "arm": arm,
        "module": "mlx-lm/deepseek_v3",
        "geometry": {"id": "deepseek-v3"},
        "control": control,
        "runner": runner,
        "backend": "cpu",
        "metrics": {"gate": {"verify_growth": sum(interval) / 2, "interval": interval}},
    }


def test_a_bound_is_proposed_between_fixed_tops_and_stock_bottoms():
    rows = [_row("stock", True, [4.0, 8.0]), _row("fixed", False, [1.0, 1.0 + 1.25])]
    doc = calibrate.calibrate(rows, "linux-cpu")
    (gate,) = doc["gates"]
    assert gate["gate"] == "max_verify_growth" and gate["refused"] is None
    assert gate["bound"] == pytest.approx(3.0)  # sqrt(2.25 * 4)
    assert "max_verify_growth: {cpu: 3.0}" in calibrate.snippet(doc)


def test_a_runner_whose_floor_is_wider_than_the_separation_is_refused():
    # the planted runner: its fixed arm's interval reaches above the stock arm's bottom
    rows = [_row("stock", True, [4.0, 8.0]), _row("fixed", False, [1.0, 4.5])]
    (gate,) = calibrate.calibrate(rows, "linux-cpu")["gates"]
    assert gate["bound"] is None and "no bound separates them" in gate["refused"]
    assert "# max_verify_growth: refused" in calibrate.snippet(
        calibrate.calibrate(rows, "linux-cpu")
    )
    only_fixed = calibrate.calibrate([rows[1]], "linux-cpu")["gates"][0]
    assert (
        only_fixed["bound"] is None and only_fixed["refused"] == "no stock (control) arm measured"
    )


def test_a_gate_not_keyed_by_backend_is_proposed_as_a_plain_number():
    rows = [
        _row("stock", True, [3.0, 9.0], suite="marginal_cost"),
        _row("fixed", False, [0.2, 0.75], suite="marginal_cost"),
    ]
    for r in rows:
        g = r["metrics"]["gate"]
        r["metrics"]["gate"] = {"relative_marginal": g["verify_growth"], "ci": g["interval"]}
    doc = calibrate.calibrate(rows, "linux-cpu")
    (gate,) = doc["gates"]
    assert gate["gate"] == "max_relative" and gate["bound"] == pytest.approx(1.5)
    assert "      max_relative: 1.5  #" in calibrate.snippet(doc)


def test_other_runners_results_do_not_count():
    rows = [_row("stock", True, [4.0, 8.0], runner="other")]
    with pytest.raises(UsageError, match="no results of runner linux-cpu"):
        calibrate.calibrate(rows, "linux-cpu")


def test_the_command_on_real_results_proposes_then_refuses_a_planted_floor(tmp_path):
    good = tmp_path / "good" / "results"
    shutil.copytree(REAL, good)
    proc = cli("calibrate", good.parent, "--runner", "linux-cpu", "--out", tmp_path / "cal")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "cal" / "calibration.json").read_text())
    (gate,) = doc["gates"]
    assert gate["fixed_top"] < gate["bound"] < gate["stock_bottom"]
    assert {c["control"] for c in gate["cases"]} == {True, False}
    # plant a runner whose fixed arm is as noisy as the stock arm is slow
    bad = tmp_path / "bad" / "results"
    shutil.copytree(REAL, bad)
    for path in bad.glob("*.json"):
        row = json.loads(path.read_text())
        if not row["control"]:
            row["metrics"]["gate"]["interval"][1] = gate["stock_bottom"] * 1.5
            path.write_text(json.dumps(row))
    proc = cli("calibrate", bad.parent, "--runner", "linux-cpu", "--out", tmp_path / "cal2")
    assert proc.returncode == 1, proc.stderr
    assert "refused: fixed arms' intervals reach" in proc.stdout
    assert "# max_verify_growth: refused" in (tmp_path / "cal2" / "budgets.yaml").read_text()


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    proc = cli("calibrate", tmp_path / "nowhere", "--runner", "linux-cpu")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"mlagate: error: calibrate: {tmp_path / 'nowhere'}: not a folder"
    ]


def test_a_calibrated_gate_may_be_uncalibrated_and_no_other_may():
    from mlagate import matrix
    from mlagate.contract.gates import UNCALIBRATED
    from mlagate.matrix import MatrixError

    from .conftest import ROOT

    shipped = (ROOT / "matrix.yaml").read_text()
    m = matrix.parse(shipped, ROOT / "matrix.yaml")
    assert m.suites["speculative"].gates["max_verify_growth"]["metal"] == UNCALIBRATED
    assert m.suites["l1_parity"].gates["tolerance"]["metal"] == UNCALIBRATED
    line = "      samples_at_formula: 15"
    bad = shipped.replace(line, "      samples_at_formula: uncalibrated", 1)
    with pytest.raises(MatrixError, match="got 'uncalibrated'$"):
        matrix.parse(bad, ROOT / "matrix.yaml")


UNCALIBRATED_RUN = {"stopped": "max_pairs", "process_pairs": 12, "max_pairs": 12, "tolerance": None}


def _aa_row(cis: list, runner="linux-cpu", seq=None, pairs=12):
    """An A/A l1_parity result; by default run uncalibrated to its last look (12 pairs)."""
    seq = UNCALIBRATED_RUN if seq is None else seq
    return {
        "case_id": "l1_parity::patched::aa",
        "suite": "l1_parity",
        "arm": "patched",
        "module": "mlx-lm/deepseek_v3",
        "geometry": {"id": "deepseek-v3"},
        "control": False,
        "runner": runner,
        "backend": "cpu",
        "metrics": {
            "aa": True,
            "l1": {
                str(256 * 4**i): {"T": 256 * 4**i, "change": sum(ci) / 2, "ci": ci, "pairs": pairs}
                for i, ci in enumerate(cis)
            },
            "sequential": seq,
        },
    }


def test_the_l1_tolerance_is_proposed_from_the_aa_floor():
    rows = [
        _aa_row([[-0.021, 0.034], [-0.052, 0.041]]),
        _aa_row([[-0.03, 0.018], [float("-inf"), float("inf")]]),  # under two pairs: unbounded
        {
            **_aa_row([[-0.4, 0.4]]),
            "metrics": {"aa": False, "l1": {"256": {"change": 0.0, "ci": [-0.4, 0.4]}}},
        },
    ]
    doc = calibrate.calibrate(rows, "linux-cpu")
    (gate,) = doc["gates"]
    assert gate["gate"] == "tolerance" and gate["refused"] is None
    assert gate["aa_floor"] == pytest.approx(0.052) and gate["bound"] == pytest.approx(0.06)
    assert len(gate["cases"]) == 2  # the arm-vs-baseline case is no A/A floor
    assert (
        "tolerance: {cpu: 0.06}  # A/A intervals reach 0.052 over 2 cases measured to their"
        " last look" in calibrate.snippet(doc)
    )


def test_aa_runs_that_stopped_when_they_fitted_their_tolerance_are_refused():
    # each cache length decided at the first look: its interval fitted the 10 % it ran with
    early = {"stopped": "decided", "process_pairs": 4, "max_pairs": 12, "tolerance": 0.1}
    rows = [_aa_row([[-0.09, 0.08], [-0.05, 0.095]], seq=early, pairs=4)] * 2
    (gate,) = calibrate.calibrate(rows, "linux-cpu")["gates"]
    assert gate["bound"] is None and "aa_floor" not in gate
    assert gate["refused"].startswith(
        "A/A runs stopped when they fitted the tolerance they ran with (10%): run them uncalibrated"
    )
    assert not any(c["counted"] for c in gate["cases"])
    assert "# tolerance: refused: A/A runs stopped" in calibrate.snippet(
        calibrate.calibrate(rows, "linux-cpu")
    )
    # the same intervals measured to the last look (decided there, or an older record that
    # stopped at the pair limit and has no max_pairs) are a floor
    last = {"stopped": "decided", "process_pairs": 12, "max_pairs": 12, "tolerance": 0.1}
    older = {"stopped": "max_pairs", "process_pairs": 12}
    for seq in (last, older):
        (gate,) = calibrate.calibrate(
            [_aa_row([[-0.09, 0.08], [-0.05, 0.095]], seq=seq)], "linux-cpu"
        )["gates"]
        assert gate["bound"] == pytest.approx(0.1) and gate["aa_floor"] == pytest.approx(0.095)
    # a case with one cache length decided early counts only its others
    mixed = _aa_row([[-0.03, 0.04], [-0.05, 0.095]], seq=last)
    mixed["metrics"]["l1"]["1024"]["pairs"] = 8
    (gate,) = calibrate.calibrate([mixed], "linux-cpu")["gates"]
    assert gate["aa_floor"] == pytest.approx(0.04) and gate["cases"][0]["cache_lengths"] == [256]


def test_a_runner_whose_aa_floor_is_wider_than_the_widest_tolerance_is_refused():
    rows = [_aa_row([[-0.02, 0.03]]), _aa_row([[-0.17, 0.08]])]  # the planted noisy runner
    (gate,) = calibrate.calibrate(rows, "linux-cpu")["gates"]
    assert gate["bound"] is None and "A/A intervals reach 17.0%" in gate["refused"]
    assert "# tolerance: refused" in calibrate.snippet(calibrate.calibrate(rows, "linux-cpu"))


def _eq_row(absorbed_p99, materialised_p99, delta_p99=(1.0, 2.0), worst=30.0, runner="linux-cpu"):
    """An equivalence result with one float32/none table over widths 2 and 8."""
    table = {
        f"float32/none/L={L}": {
            "absorbed": {"p99": absorbed_p99, "max": worst},
            "materialised": {"p99": materialised_p99, "max": worst / 2},
            "delta": {"p99": d, "max": d},
        }
        for L, d in zip((2, 8), delta_p99, strict=True)
    }
    return {
        "case_id": f"equivalence::{absorbed_p99}",
        "suite": "equivalence",
        "arm": "fixed",
        "module": "mlx-lm/deepseek_v3",
        "geometry": {"id": "deepseek-v3"},
        "runner": runner,
        "backend": "cpu",
        "metrics": {"errors_ulps": table},
    }


BUDGETS = {
    "float32": {"cpu": {"absorbed_factor": 4, "growth_factor": 4, "floor_ulps": 4, "max_ulps": 512}}
}


def test_equivalence_budgets_are_proposed_from_the_floor_the_tables_need():
    rows = [_eq_row(10.0, 20.0), _eq_row(85.0, 20.0, worst=100.0)]  # the second needs 85 - 80 = 5
    doc = calibrate.calibrate(rows, "linux-cpu", BUDGETS, "cpu")
    got = {g["gate"]: g for g in doc["gates"]}
    assert got["budgets.float32.floor_ulps"]["bound"] == 16  # 2 x 5, up to a power of two
    assert got["budgets.float32.max_ulps"]["bound"] == 256  # 2 x 100, likewise
    text = calibrate.snippet(doc)
    assert "cpu: {absorbed_factor: 4, growth_factor: 4, floor_ulps: 16, max_ulps: 256}" in text


def test_a_runner_whose_rounding_floor_swamps_the_paths_is_refused():
    # absorbed 200 ULP against materialised 20: the floor it needs (120) exceeds the
    # materialised path's own error, so the factor could no longer tell the paths apart
    rows = [_eq_row(200.0, 20.0), _eq_row(190.0, 20.0)]
    doc = calibrate.calibrate(rows, "linux-cpu", BUDGETS, "cpu")
    for g in doc["gates"]:
        assert g["bound"] is None and "the floor, not the factor 4, would decide" in g["refused"]
    assert "# cpu: refused: the floor float32 needs" in calibrate.snippet(doc)


def test_the_equivalence_growth_rule_counts_too():
    rows = [_eq_row(10.0, 10.0, delta_p99=(1.0, 40.0))]  # 40 - 4 x 1 = 36: floor 128 > 10
    (floor, _) = calibrate.calibrate(rows, "linux-cpu", BUDGETS, "cpu")["gates"]
    assert floor["refused"] and floor["cases"][0]["value"] == 36.0


def test_an_unknown_runner_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "r" / "results").mkdir(parents=True)
    proc = cli("calibrate", tmp_path / "r", "--runner", "no-such-runner")
    assert proc.returncode == 2
    assert "--runner: unknown runner label 'no-such-runner'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_an_uncalibrated_equivalence_budget_measures_then_calibrate_proposes(tmp_path):
    """A runner whose equivalence budget is uncalibrated gets no verdict: its case measures the
    errors, is invalid naming calibrate, and calibrate proposes that runner's budget from it."""
    matrix = uncalibrated_correctness(tmp_path)
    out = tmp_path / "out"
    proc = cli(
        "run", "--matrix", matrix, "--suite", "equivalence", "--module", "fake/fixed",
        "--arm", "fake-stock", "--out", out, cache=tmp_path / "cache",
    )  # fmt: skip
    (row,) = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    assert row["verdict"] == "invalid", row["reason"]
    assert (
        "run mlagate calibrate first" in row["reason"] and "float32/bfloat16.cpu" in row["reason"]
    )
    assert row["metrics"]["errors_ulps"], "the case measured before it said so"
    proc = cli(
        "calibrate", out, "--matrix", matrix, "--runner", "linux-cpu", "--out", tmp_path / "c"
    )
    doc = json.loads((tmp_path / "c" / "calibration.json").read_text())
    got = {g["gate"]: g for g in doc["gates"]}
    assert set(got) == {
        f"budgets.{d}.{k}" for d in ("float32", "bfloat16") for k in ("floor_ulps", "max_ulps")
    }
    assert all(g["cases"] for g in got.values()), proc.stdout
