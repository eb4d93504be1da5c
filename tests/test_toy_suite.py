"""Adding a suite touches only its own files and a matrix: a toy suite (its test body and its
contract, toy.suite.yaml, beside a test's matrix: `file:`) is planned, run, reported and kept in
the history, with no other edit."""

import json
import shutil

from .conftest import FAKE_MATRIX, FIXTURES, cli

TOY = '''"""toy: every path the counters see at the gates' widths is a single path."""


def test_toy(mla):
    key, _ = mla.build()
    seen = [mla.step(key, mla.profile.cache_lengths[0], L)["path"] for L in mla.gates["widths"]]
    mla.metric("toy_paths", seen)
    assert all(p in ("absorbed", "materialised") for p in seen), seen
'''

CONTRACT = """\
schema: mlagate.suite/1
kind: correctness
order: 5
failure_kinds: [wrong_path]
gates:
  widths: {type: list, of: {type: int, low: 1, high: 64}, meaning: query widths stepped}
metrics:
  version: 1
  schema:
    type: object
    required: [toy_paths]
    properties:
      toy_paths: {type: array, items: {enum: [absorbed, materialised]}}
key_figures:
  - id: toy_absorbed
    label: absorbed toy steps
    unit: steps
    value: length(toy_paths[?@ == 'absorbed'])
plots:
  id: toy
  heading: Toy paths
  blurb: What the toy suite saw, drawn by the report from its key figures.
  draw: figures
"""


def test_a_toy_suite_appears_in_the_plan_results_report_and_history(tmp_path):
    shutil.copytree(FIXTURES / "fakemla-tree", tmp_path / "fakemla-tree")
    (tmp_path / "test_toy.py").write_text(TOY)
    (tmp_path / "toy.suite.yaml").write_text(CONTRACT)
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
        and "drawn by the report from its key figures" in page
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
