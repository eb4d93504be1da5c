"""mlagate calibrate: a performance gate's bound proposed between the fixed arms' interval tops
and the stock arms' interval bottoms measured on one runner, and refused where they overlap."""

import json
import shutil

import pytest

from mlagate.commands import calibrate
from mlagate.errors import UsageError

from .conftest import FIXTURES, cli

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


def _aa_row(cis: list, runner="linux-cpu"):
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
            "l1": {str(256 * 4**i): {"change": sum(ci) / 2, "ci": ci} for i, ci in enumerate(cis)},
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
    assert "tolerance: {cpu: 0.06}  # A/A intervals reach 0.052 over 2 cases" in calibrate.snippet(
        doc
    )


def test_a_runner_whose_aa_floor_is_wider_than_the_widest_tolerance_is_refused():
    rows = [_aa_row([[-0.02, 0.03]]), _aa_row([[-0.17, 0.08]])]  # the planted noisy runner
    (gate,) = calibrate.calibrate(rows, "linux-cpu")["gates"]
    assert gate["bound"] is None and "A/A intervals reach 17.0%" in gate["refused"]
    assert "# tolerance: refused" in calibrate.snippet(calibrate.calibrate(rows, "linux-cpu"))
