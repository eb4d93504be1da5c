"""mlagate compare: verdict changes between two runs on the fake runtime, figure deltas judged by
their intervals."""

import json

from mlagate.report import compare


def _break_fixed(matrix):
    models = matrix.parent / "fakemla-tree" / "fakemla" / "models"
    (models / "fixed.py").write_text(
        (models / "liar.py").read_text().replace("LiarAttention", "FixedAttention")
    )


def test_a_case_that_got_worse_exits_1_and_the_reverse_exits_0(
    fake_matrix, fake_cache, tmp_path, run_cli
):
    a, b = tmp_path / "a", tmp_path / "b"
    sel = ("--matrix", fake_matrix, "--module", "fake/fixed", "--module", "fake/good")
    assert run_cli("run", *sel, "--out", a, cache=fake_cache).returncode == 0
    _break_fixed(fake_matrix)
    assert run_cli("run", *sel, "--out", b, cache=fake_cache).returncode == 1
    proc = run_cli("compare", a, b)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = (
        "worse    probes::fake/fixed::fake-stock::tiny::float32::cpu: pass (as expected) -> fail ("
    )
    assert line in proc.stdout, proc.stdout
    assert "fake/good" not in proc.stdout.split("problems")[0], "an unchanged case is not listed"
    back = run_cli("compare", b, a, "--format", "json")
    assert back.returncode == 0
    data = json.loads(back.stdout)
    assert data["worse"] == 0 and {v["change"] for v in data["verdicts"]} == {"better"}
    same = run_cli("compare", a, a)
    assert same.returncode == 0 and same.stdout.strip().endswith("no change")


def test_bad_sources_are_one_line_errors(tmp_path, run_cli):
    proc = run_cli("compare", tmp_path / "nothing", tmp_path / "nothing")
    assert (
        proc.returncode == 2
        and proc.stderr.startswith("mlagate: error: ")
        and proc.stderr.count("\n") == 1
    )
    proc = run_cli("compare", "abc", "def", "--history", tmp_path)
    assert proc.returncode == 2 and "no commit 'abc'" in proc.stderr


def _marginal(ms, lo, hi, case="marginal_cost::m::arm::g::float32::cpu"):
    per_t = {"64": {"marginal_s": ms / 1e3, "ci_s": [lo / 1e3, hi / 1e3]}}
    return {
        "case_id": case,
        "suite": "marginal_cost",
        "module": "m",
        "arm": "arm",
        "geometry": {"id": "g"},
        "checkpoint": None,
        "backend": "cpu",
        "verdict": "pass",
        "metrics": {"marginal": {"L=2": {"per_T": per_t}}},
    }


def test_a_figure_is_worse_only_when_the_intervals_are_apart():
    noisy = compare.compare([_marginal(1.0, 0.8, 1.2)], [_marginal(1.1, 0.9, 1.3)])
    assert [f["change"] for f in noisy.figures] == ["within noise"] and noisy.exit_code == 0
    slower = compare.compare([_marginal(1.0, 0.9, 1.1)], [_marginal(2.0, 1.8, 2.2)])
    assert [f["change"] for f in slower.figures] == ["worse"] and slower.exit_code == 1
    assert "[0.9, 1.1] -> 2 [1.8, 2.2] (+1)" in slower.text()
    faster = compare.compare([_marginal(2.0, 1.8, 2.2)], [_marginal(1.0, 0.9, 1.1)])
    assert [f["change"] for f in faster.figures] == ["better"] and faster.exit_code == 0


def _row(verdict, expected=None, control=False, case="probes::m::stock::g::float32::cpu"):
    return {
        "case_id": case,
        "suite": "probes",
        "module": "m",
        "arm": "stock",
        "geometry": {"id": "g"},
        "checkpoint": None,
        "backend": "cpu",
        "verdict": verdict,
        "expected": expected,
        "control": control,
        "metrics": {},
    }


def test_outcomes_judge_not_verdicts():
    lost = compare.compare([_row("fail", "fail", True)], [_row("pass", "fail", True)])
    assert [v["change"] for v in lost.verdicts] == ["worse"] and lost.exit_code == 1
    assert "fail (as expected) -> pass (lost control)" in lost.text()
    fixed = compare.compare([_row("fail", "fail")], [_row("pass", "fail")])
    assert [v["change"] for v in fixed.verdicts] == ["better"] and fixed.exit_code == 0
    gone = compare.compare([_row("pass", "pass")], [])
    assert [v["change"] for v in gone.verdicts] == ["worse"]


def test_two_commits_of_a_history(tmp_path, run_cli):
    from mlagate.report import build as report_build

    from .test_report import write_results

    hist = tmp_path / "history"
    for commit, verdict in (("c1", "pass"), ("c2", "fail")):
        src = write_results(
            tmp_path / commit, [dict(_row(verdict, "pass"), schema="mlagate.result/1")]
        )
        report_build.build([src], tmp_path / f"html-{commit}", history=hist, commit=commit)
    proc = run_cli("compare", "c1", "c2", "--history", hist)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "pass (as expected) -> fail (regression)" in proc.stdout
    assert run_cli("compare", "c2", "c1", "--history", hist).returncode == 0


def test_a_figure_that_vanished_is_worse():
    gone = dict(_marginal(1.0, 0.9, 1.1), metrics={})
    out = compare.compare([_marginal(1.0, 0.9, 1.1)], [gone])
    assert [f["change"] for f in out.figures] == ["worse"] and out.exit_code == 1
    assert "worse    m|marginal_ms|arm|g|cpu: 1 [0.9, 1.1] -> absent" in out.text()
    back = compare.compare([gone], [_marginal(1.0, 0.9, 1.1)])
    assert [f["change"] for f in back.figures] == ["new"] and back.exit_code == 0


def _strict(a_rows, b_rows):
    return compare.compare(a_rows, b_rows, strict=True)


def test_strict_fails_on_any_changed_verdict_or_outcome_and_on_a_missing_case():
    """--strict, the before/after check of a change meant to keep behaviour: a better verdict, a
    changed outcome with the same verdict, a case only one side has: each exits 1 (without
    --strict only the worse ones do); the same cases with the same verdicts and outcomes exit 0."""
    other = "probes::m::stock::g2::float32::cpu"
    before = [_row("fail", "fail", True), _row("pass", "pass", case=other)]
    same = _strict(before, [dict(r) for r in before])
    assert same.exit_code == 0 and same.cases == {"a": 2, "b": 2, "same": 2}
    assert same.text().endswith("strict: every case has the same verdict and outcome in A and B")
    fixed = [_row("fail", "fail", True), _row("pass", "pass", case=other)]
    fixed[0] = _row("pass", "pass")  # fail -> pass, both as expected: better, not worse
    assert compare.compare(before, fixed).exit_code == 0
    changed = _strict(before, fixed)
    assert changed.exit_code == 1 and [v["case"] for v in changed.verdicts] == [
        before[0]["case_id"]
    ]
    assert changed.text().endswith("strict: 1 case differs in verdict, outcome or presence")
    outcome_only = [_row("fail", "fail", False), before[1]]  # the same verdict, fail
    outcome_only[0]["expected"] = "pass"  # now a regression, where it was as expected
    assert _strict(before, outcome_only).exit_code == 1
    missing = _strict(before, before[:1])
    assert missing.exit_code == 1 and missing.cases == {"a": 2, "b": 1, "same": 1}
    assert [(v["case"], v["b"]) for v in missing.verdicts] == [(other, None)]
    new = _strict(before[:1], before)
    assert new.exit_code == 1 and compare.compare(before[:1], before).exit_code == 0
    assert new.to_json()["strict"] is True and new.to_json()["cases"]["same"] == 1


def test_strict_on_the_command_line(tmp_path, capsys):
    from mlagate import cli, documents

    from .test_report import write_results

    rows = [dict(_row("pass", "pass"), schema="mlagate.result/1")]
    a = write_results(tmp_path / "a", rows)
    b = write_results(tmp_path / "b", [dict(rows[0], verdict="fail", expected="fail")])
    assert cli.main(["compare", str(a), str(a), "--strict"]) == 0
    assert "strict: every case" in capsys.readouterr().out
    assert cli.main(["compare", str(a), str(b)]) == 0  # pass -> fail as expected: no worse
    capsys.readouterr()
    assert cli.main(["compare", str(a), str(b), "--strict", "--format", "json"]) == 1
    doc = documents.validate(json.loads(capsys.readouterr().out), "compare", "stdout")
    assert doc["strict"] and doc["cases"] == {"a": 1, "b": 1, "same": 0}
