"""Gate outcomes and the failure policy (issue 14), shown on the fake runtime:

- a defective arm added through the matrix is a *regression*; a control arm that is fixed is
  *lost control*; a known finding that passes is *fixed*; the gate is red on each;
- a runtime whose absorbed branch raises at L >= 2 is a *fail* in every suite that steps it,
  with the exception and the runtime file and line, never invalid;
- a runner that declares a backend the worker does not run on makes its cases invalid;
- the skewed module's measured errors fail the CPU and Metal budgets and pass CUDA's TF32 one;
- a typo or an out-of-bounds value in `gates` is a one-line error, exit 2.
"""

import importlib.util
import json
import shutil

import pytest

from mlagate import matrix
from mlagate.verdict import outcomes

from .conftest import FIXTURES, ROOT, cli

BASE = (FIXTURES / "fake-correctness.yaml").read_text()
EXTRA_ARMS = """  fake-raising:  # planted: the fix, but the absorbed branch raises at L >= 2
    runtime: fakemla  # runtime
    path: fakemla-tree  # source tree
    patches: [fake-raise.patch]  # patch
    role: patched  # role
  fake-fixed-control:  # a stock arm that already carries the fix: the control has lost its power
    runtime: fakemla  # runtime
    path: fakemla-tree  # source tree
    patches: [fake-fix.patch]  # patch
    role: stock  # role
"""
EXPECTATIONS = """expectations:  # known findings
  # a finding that got fixed
  - {suite: threshold, module: fake/fixed, arm: fake-stock, verdict: fail, kind: boundary_off,
     reason: "planted: said to fail, but passes"}
"""


def _matrix(tmp_path, text: str):
    for name in ("fakemla-tree",):
        shutil.copytree(FIXTURES / name, tmp_path / name)
    for patch in ("fake-fix.patch", "fake-nudge.patch", "fake-raise.patch"):
        shutil.copy(FIXTURES / patch, tmp_path / patch)
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return path


def _gate_matrix(tmp_path):
    text = BASE.replace(
        "geometries:  # geometries\n", EXTRA_ARMS + "geometries:  # geometries\n", 1
    )
    text = text.replace(
        """    geometries: [tiny]  # geometries
    arms: [fake-stock]  # only the unpatched tree
  fake/offbyone:""",
        """    geometries: [tiny]  # geometries
    arms: [fake-stock, fake-raising]  # the correct module, and the planted raise
  fake/offbyone:""",
        1,
    )
    text = text.replace(
        "suites:  # the issue-3 suites with the shipped gates\n",
        "suites:  # suites\n  probes:  # probes\n"
        "    kind: correctness  # kind\n    gates: {widths: [1, 2, 4], forced_width: 2}  # gates\n",
        1,
    )
    text = text.replace(
        "runners:  # runners\n",
        EXPECTATIONS
        + "runners:  # runners\n  mac:  # declares Metal\n    backend: metal  # not this "
        "machine's\n",
        1,
    )
    assert text.count("fake-raising") >= 2 and "expectations:" in text
    return _matrix(tmp_path, text)


@pytest.fixture(scope="module")
def gate_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gate")
    m = _gate_matrix(tmp)
    out = tmp / "out"
    args = [
        "run",
        "--matrix",
        m,
        "--out",
        out,
        "-n",
        "2",
        "--module",
        "fake/fixed",
        "--module",
        "fake/good",
        "--module",
        "fake/skewed",
    ]
    for suite in ("threshold", "dispatch", "equivalence", "probes"):
        args += ["--suite", suite]
    proc = cli(*args, cache=tmp / "cache")
    rows = {
        (r["suite"], r["module"], r["arm"]): r
        for r in (json.loads(p.read_text()) for p in (out / "results").glob("*.json"))
    }
    return proc, rows, m, tmp


def test_each_outcome_and_the_red_gate(gate_run):
    proc, rows, _, _ = gate_run
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = {k: outcomes.outcome(r) for k, r in rows.items()}
    assert out[("threshold", "fake/fixed", "fake-raising")] == "regression"
    assert out[("threshold", "fake/good", "fake-fixed-control")] == "lost control"
    assert rows[("threshold", "fake/good", "fake-fixed-control")]["control"] is True
    assert out[("threshold", "fake/fixed", "fake-stock")] == "fixed"
    assert (
        out[("threshold", "fake/good", "fake-stock")] == "as expected"
    )  # the control fails, as it must
    assert rows[("threshold", "fake/good", "fake-stock")]["verdict"] == "fail"
    assert out[("threshold", "fake/good", "fake-patched")] == "as expected"
    assert (
        "gate: red:" in proc.stdout
        and "regression" in proc.stdout
        and "lost control" in proc.stdout
    )
    assert "controls: " in proc.stdout


@pytest.mark.parametrize("suite", ["threshold", "dispatch", "equivalence", "probes"])
def test_a_runtime_that_raises_is_a_fail_with_its_location(gate_run, suite):
    _, rows, _, _ = gate_run
    r = rows[(suite, "fake/fixed", "fake-raising")]
    assert r["verdict"] == "fail", r["reason"]
    assert "ValueError: mask of shape" in r["reason"], r["reason"]
    assert "fakemla/models/fixed.py:13 in __call__" in r["reason"], r["reason"]
    if suite != "probes":  # probes collects the raise as one of its problems
        assert r["metrics"]["exception"]["at"] == "fakemla/models/fixed.py:13 in __call__"
        assert "raise ValueError" in r["metrics"]["exception"]["traceback"]


def _equivalence_budget_problems():
    spec = importlib.util.spec_from_file_location(
        "equivalence_suite", ROOT / "suites" / "correctness" / "test_equivalence.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.budget_problems


def test_skewed_fails_the_cpu_and_metal_budgets_and_passes_cudas(gate_run):
    _, rows, m, _ = gate_run
    r = rows[("equivalence", "fake/skewed", "fake-stock")]
    assert r["verdict"] == "fail" and r["backend"] == "cpu"
    budgets = matrix.load(m).suites["equivalence"].gates["budgets"]
    judge = _equivalence_budget_problems()
    table = r["metrics"]["errors_ulps"]
    for backend, fails in (("cpu", True), ("metal", True), ("cuda", False)):
        found = []
        for dq in ("float32/none", "float32/q4g64"):
            per_l = {
                int(k.rsplit("=", 1)[1]): v for k, v in table.items() if k.startswith(dq + "/")
            }
            found += judge(dq, per_l, budgets["float32"][backend])
        assert bool(found) == fails, (backend, found)


def test_a_declared_backend_the_worker_does_not_run_is_invalid(gate_run, tmp_path):
    _, _, m, tmp = gate_run
    proc = cli(
        "run",
        "--matrix",
        m,
        "--runner",
        "mac",
        "--suite",
        "probes",
        "--module",
        "fake/fixed",
        "--arm",
        "fake-stock",
        "--out",
        tmp_path / "out",
        cache=tmp / "cache",
    )
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    row = json.loads(next((tmp_path / "out" / "results").glob("*.json")).read_text())
    assert row["verdict"] == "invalid" and row["backend"] == "metal"
    assert "declares backend metal, but MLX runs on cpu" in row["reason"]


def test_backend_and_runner_must_agree(gate_run, tmp_path):
    _, _, m, _ = gate_run
    proc = cli("plan", "--matrix", m, "--runner", "mac", "--backend", "cuda")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "--backend cuda: runner mac declares backend metal" in proc.stderr


@pytest.mark.parametrize(
    "edit, message",
    [
        ("sampels: 11", "suites.l1_parity.gates.sampels: unknown key"),
        ("samples: 1", "suites.l1_parity.gates.samples: expected an odd integer >= 9"),
        ("samples: 20", "suites.l1_parity.gates.samples: expected an odd integer >= 9"),
        (
            "tolerance: {cpu: -0.1, metal: 0.02, cuda: 0.08}",
            "suites.l1_parity.gates.tolerance.cpu: expected a number > 0",
        ),
    ],
)
def test_a_bad_gate_is_a_one_line_error(tmp_path, edit, message):
    shipped = (ROOT / "matrix.yaml").read_text()
    key = edit.split(":")[0]
    line = next(
        ln
        for ln in shipped.splitlines()
        if ln.strip().startswith(("samples: 11", "tolerance: {cpu: 0.032"))
        and (key in ln or key == "sampels" and "samples: 11" in ln)
    )
    bad = tmp_path / "matrix.yaml"
    bad.write_text(shipped.replace(line, "      " + edit + "  # planted", 1))
    shutil.copytree(ROOT / "patches", tmp_path / "patches")
    proc = cli("plan", "--matrix", bad)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip()
    assert "\n" not in err and "Traceback" not in err
    assert f"{bad}:" in err and message in err, err


def test_outcome_of_each_verdict_and_expectation():
    def row(verdict, expected, control=False):
        return {"verdict": verdict, "expected": expected, "control": control}

    assert outcomes.outcome(row("pass", "pass")) == "as expected"
    assert outcomes.outcome(row("fail", "fail", True)) == "as expected"
    assert outcomes.outcome(row("fail", "pass")) == "regression"
    assert outcomes.outcome(row("pass", "fail", True)) == "lost control"
    assert outcomes.outcome(row("pass", "fail")) == "fixed"
    assert outcomes.outcome(row("invalid", "pass")) == "invalid"
    assert outcomes.outcome(row("argued", "argued")) == "as expected"
    assert (
        outcomes.exit_code(outcomes.counts([row("pass", "pass"), row("fail", "fail", True)])) == 0
    )
    assert outcomes.exit_code(outcomes.counts([row("pass", "fail")])) == 1
    assert outcomes.exit_code(outcomes.counts([row("invalid", "pass")])) == 3
    assert outcomes.exit_code(outcomes.counts([], missing=1)) == 3


@pytest.mark.parametrize(
    "suite, old, new, message",
    [
        (
            "pool_equivalence",
            "beyond_topk: [16, 19, 48, 50]",
            "beyond_topk: [16, 48]",
            "suites.pool_equivalence.gates: beyond_topk gives cache lengths [32, 64]: both "
            "aligned and misaligned ones are needed for kpool 4",
        ),
        (
            "trim_after_rejection",
            "beyond_topk: [16, 19]",
            "beyond_topk: [16]",
            "suites.trim_after_rejection.gates: the grid (beyond_topk, widths) holds only "
            "window-crossing rejections for kpool 4",
        ),
    ],
)
def test_a_grid_that_cannot_cover_the_pools_is_refused_at_plan_time(suite, old, new, message):
    shipped = (ROOT / "matrix.yaml").read_text()
    assert old in shipped
    with pytest.raises(matrix.MatrixError) as err:
        matrix.parse(shipped.replace(old, new, 1), ROOT / "matrix.yaml")
    assert message in str(err.value) and "geometry glm-5.3-flash" in str(err.value), str(err.value)


def test_an_unknown_runner_is_a_one_line_error():
    proc = cli("plan", "--runner", "nope")
    assert (
        proc.returncode == 2
        and "--runner: unknown runner label 'nope'" in proc.stderr
        and proc.stderr.count("\n") == 1
    )


BROKEN_SUITE = '''"""A suite whose own code raises: a harness fault, never the runtime's."""


def test_broken(mla):
    key, _ = mla.build()
    {}["missing"]
'''


def test_an_exception_in_suite_code_is_invalid_not_a_fail(tmp_path):
    shutil.copytree(FIXTURES / "fakemla-tree", tmp_path / "fakemla-tree")
    (tmp_path / "test_broken.py").write_text(BROKEN_SUITE)
    (tmp_path / "broken.suite.yaml").write_text(
        "schema: mlagate.suite/1\nkind: correctness\ngates: {}\n"
        "metrics: {version: 1, schema: {type: object}}\n"
    )
    head = "\nsuites:  # suites\n"
    text = (FIXTURES / "fake-matrix.yaml").read_text()
    assert head in text
    (tmp_path / "m.yaml").write_text(
        text.replace(
            head,
            head + "  broken:  # planted\n    kind: correctness\n    file: test_broken.py\n",
            1,
        )
    )
    proc = cli(
        "run",
        "--matrix",
        tmp_path / "m.yaml",
        "--suite",
        "broken",
        "--module",
        "fake/good",
        "--out",
        tmp_path / "out",
        cache=tmp_path / "cache",
    )
    rows = [json.loads(p.read_text()) for p in (tmp_path / "out" / "results").glob("*.json")]
    measured = [r for r in rows if r["evidence"] == "synthetic"]
    assert proc.returncode == 3 and measured, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert all(
        r["verdict"] == "invalid"
        and "harness error (mlagate or the suite, not the runtime): KeyError" in r["reason"]
        and "test_broken.py:" in r["reason"]
        for r in measured
    ), [r["reason"] for r in measured]
