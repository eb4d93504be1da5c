"""Adding a suite touches only its own file and a matrix: a toy suite declared beside a test's
matrix (`file:`) is planned, run, reported and kept in the history, with no other edit."""

import json
import shutil

from .conftest import FAKE_MATRIX, FIXTURES, cli

TOY = '''"""toy: every path the counters see at the gates' widths is a single path."""

from mlagate import gates, suites
from mlagate.report import plots

GATES = {
    "widths": gates.List(gates.Int(1, 64)),  # query widths stepped
}


def test_toy(mla):
    key, _ = mla.build()
    seen = [mla.step(key, mla.profile.cache_lengths[0], L)["path"] for L in mla.gates["widths"]]
    mla.metric("toy_paths", seen)
    assert all(p in ("absorbed", "materialised") for p in seen), seen


def toy_plots(rows):
    drawn = plots.no_data("toy", "drawn by the toy suite")
    return [
        plots.Plot("toy", plots.slug("toy", r["arm"]), "toy paths", drawn)
        for r in rows
        if r["metrics"]
    ]


ORDER = 5
PLOTS = suites.PlotSection("toy", "Toy paths", "What the toy suite saw.", toy_plots)
KEY_FIGURES = (suites.KeyFigure("toy_absorbed", "absorbed toy steps", "steps",
                                lambda r: r["metrics"]["toy_paths"].count("absorbed")),)
'''


def test_a_toy_suite_appears_in_the_plan_results_report_and_history(tmp_path):
    shutil.copytree(FIXTURES / "fakemla-tree", tmp_path / "fakemla-tree")
    (tmp_path / "test_toy.py").write_text(TOY)
    text = FAKE_MATRIX.read_text()
    head = "\nsuites:  # suites\n"
    assert head in text
    toy = (
        head + "  toy:  # the toy suite, beside this matrix\n    kind: correctness\n    file: "
        "test_toy.py\n    gates: {widths: [1, 2]}\n"
    )
    (tmp_path / "m.yaml").write_text(text.replace(head, toy, 1))
    cache = tmp_path / "cache"

    plan = cli(
        "plan",
        "--matrix",
        tmp_path / "m.yaml",
        "--suite",
        "toy",
        "--module",
        "fake/good",
        "--format",
        "json",
        cache=cache,
    )
    assert plan.returncode == 0, plan.stderr
    assert {c["suite"] for c in json.loads(plan.stdout)} == {"toy"}

    run = cli(
        "run",
        "--matrix",
        tmp_path / "m.yaml",
        "--suite",
        "toy",
        "--module",
        "fake/good",
        "--out",
        tmp_path / "out",
        cache=cache,
    )
    rows = [json.loads(p.read_text()) for p in (tmp_path / "out" / "results").glob("*.json")]
    measured = [r for r in rows if r["evidence"] == "synthetic"]
    assert run.returncode == 0 and {r["suite"] for r in rows} == {"toy"}, (
        run.stdout[-2000:] + run.stderr
    )
    assert measured and all(r["verdict"] == "pass" and r["metrics"]["toy_paths"] for r in measured)

    report = cli(
        "report",
        tmp_path / "out",
        "--out",
        tmp_path / "html",
        "--history",
        tmp_path / "history",
        "--commit",
        "c0ffee",
    )
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "html" / "index.html").read_text()
    assert (
        "<h3>Toy paths</h3>" in page
        and "drawn by the toy suite" in page
        and 'data-plot="toy"' in page
    )
    kept = json.loads(next((tmp_path / "history").glob("c0ffee/merged.json")).read_text())
    assert {r["suite"] for r in kept["results"]} == {"toy"}
    assert kept["suites"]["toy"] == {
        "kind": "correctness",
        "file": str((tmp_path / "test_toy.py").resolve()),
    }
    figures = json.loads((tmp_path / "history" / "c0ffee" / "figures.json").read_text())
    assert any(k.split("|")[1] == "toy_absorbed" for k in figures["figures"])
    assert "absorbed toy steps" in (tmp_path / "history" / "index.html").read_text()
