"""mlagate run --head PATH [--base REF]: a runtime checkout against its merge base."""

from __future__ import annotations

import json
import shutil
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from tests.conftest import FIXTURES, ROOT
from tests.fakert import fake_tree, git, runtime_repo


@pytest.fixture
def head_matrix(tmp_path):
    """The gate fixture matrix, with the tree and patch its own arm names (replaced by --head)."""
    where = tmp_path / "m"
    where.mkdir()
    shutil.copy(FIXTURES / "gate" / "matrix.yaml", where / "matrix.yaml")
    shutil.copy(FIXTURES / "fake-fix.patch", where / "fake-fix.patch")
    fake_tree(where / "fakemla-tree")
    return where / "matrix.yaml"


def verdicts(out):
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    return {(r["suite"], r["arm"]): r["verdict"] for r in rows}


def head_run(run_cli, repo, matrix, cache, *more, out=None, cwd=None):
    argv = ["run", "--head", repo, "--matrix", matrix, "--suite", "dispatch", *more]
    return run_cli(*argv, *(["--out", out] if out else []), cache=cache, cwd=cwd)


def outcome_lines(stdout: str) -> list[str]:
    """The head run's table rows: outcome, head's verdict, base's verdict, suite, module,
    geometry."""
    found = []
    for ln in stdout.splitlines():
        for o in ("fixed by this change", "regression", "still failing as on base", "as expected"):
            if ln.startswith(o + " "):
                found.append(" ".join([o, *ln[len(o) :].split()[:5]]))
    return found


def test_a_head_that_fixes_the_guard_is_fixed_by_this_change(
    tmp_path, head_matrix, run_cli, fake_cache
):
    repo = runtime_repo(tmp_path / "rt", "fix")
    out = tmp_path / "out"
    # the correctness suites (a timing's verdict depends on this shared machine's fitness)
    proc = run_cli(
        "run", "--head", repo, "--base", "main", "--matrix", head_matrix, "--out", out,
        "--kind", "correctness", cache=fake_cache,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"against base {git(repo, 'rev-parse', 'main')[:12]} (fakemla): fake/good" in proc.stdout
    # every case head runs also ran on base (l1_unchanged compares head with base itself)
    assert verdicts(out) == {
        ("dispatch", "head"): "pass",
        ("dispatch", "base"): "fail",
        ("l1_unchanged", "head"): "pass",
    }
    assert outcome_lines(proc.stdout)[:1] == [
        "fixed by this change pass fail dispatch fake/good tiny",
    ], proc.stdout
    assert (
        "gate: green: this change fixes 1, breaks 0, leaves 0 failing as on main (1 new case, "
        "judged by expectations)" in proc.stdout
    ), proc.stdout
    record = json.loads((out / "headbase" / "head-run.json").read_text())
    assert record["head"]["commit"] == git(repo, "rev-parse", "HEAD")
    assert record["base"] == {
        "ref": "main", "commit": git(repo, "rev-parse", "main"), "label": "main"
    }  # fmt: skip


def test_a_head_that_reintroduces_l_equals_1_is_a_regression(
    tmp_path, head_matrix, run_cli, fake_cache
):
    repo = runtime_repo(tmp_path / "rt", "regress")
    out = tmp_path / "out"
    proc = head_run(run_cli, repo, head_matrix, fake_cache, out=out)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert outcome_lines(proc.stdout) == ["regression fail pass dispatch fake/good tiny"]
    assert "gate: red: this change fixes 0, breaks 1, leaves 0 failing as on main" in proc.stdout
    assert "replay dispatch::fake/good::head::tiny::float32::cpu" in proc.stdout
    # the report of the run's folder: the job summary and JUnit tell the same outcome
    report = run_cli("report", out, "--out", tmp_path / "html", "--commit", "c1")
    assert report.returncode == 0, report.stdout + report.stderr
    summary = (tmp_path / "html" / "summary.md").read_text()
    assert "**gate red: this change fixes 0, breaks 1, leaves 0 failing as on main**" in summary
    assert "| regression | fail | pass | dispatch | fake/good |" in summary, summary
    page = (tmp_path / "html" / "index.html").read_text()
    assert "<strong>gate red</strong>" in page
    assert "<strong>this change fixes 0, breaks 1, leaves 0 failing as on main</strong>" in page
    junit = ET.parse(tmp_path / "html" / "junit.xml").getroot()
    cases = junit.findall(".//testcase")
    assert [c.get("name") for c in cases] == ["head/tiny/float32/cpu"]  # head's cases only
    failure = cases[0].find("failure")
    assert failure.get("type") == "regression" and "base: pass at " in failure.text


def test_an_unrelated_head_leaves_the_guard_failing_as_on_base_green_unless_strict(
    tmp_path, head_matrix, run_cli, fake_cache
):
    repo = runtime_repo(tmp_path / "rt", "unrelated")
    proc = head_run(run_cli, repo, head_matrix, fake_cache, out=tmp_path / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert outcome_lines(proc.stdout) == [
        "still failing as on base fail fail dispatch fake/good tiny"
    ]
    assert "gate: green: this change fixes 0, breaks 0, leaves 1 failing as on main" in proc.stdout
    strict = head_run(run_cli, repo, head_matrix, fake_cache, "--strict", out=tmp_path / "o2")
    assert strict.returncode == 1, strict.stdout + strict.stderr
    assert (
        "gate: red: this change fixes 0, breaks 0, leaves 1 failing as on main (--strict: still "
        "failing is red)" in strict.stdout
    )


def test_out_defaults_to_reports_head_and_never_lies_inside_head(
    tmp_path, head_matrix, run_cli, fake_cache
):
    repo = runtime_repo(tmp_path / "rt", "fix")
    (tmp_path / "here").mkdir()
    proc = head_run(run_cli, repo, head_matrix, fake_cache, cwd=tmp_path / "here")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "here" / "reports" / "head" / "results").is_dir()
    # from inside the checkout (--head .): a folder of the system's temporary one
    proc = head_run(run_cli, ".", head_matrix, fake_cache, "--base", "main", cwd=repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    there = Path(tempfile.gettempdir()) / "mlagate-head-rt"
    assert f"results: {there / 'results'} " in proc.stdout and not (repo / "reports").exists()
    shutil.rmtree(there)
    inside = head_run(run_cli, repo, head_matrix, fake_cache, out=repo / "o")
    assert (inside.returncode, inside.stderr) == (
        2,
        f"mlagate: error: --out {repo / 'o'}: lies inside --head {repo}; choose a folder "
        "outside the checkout (base's tree written there would be read as part of head)\n",
    )


def test_committed_links_in_base(tmp_path, head_matrix, run_cli, fake_cache):
    """A link inside the tree is kept; one pointing outside it is left out with a warning, or
    refused in one line when it lies in the runtime's package."""
    repo = runtime_repo(tmp_path / "rt", "fix")
    git(repo, "checkout", "--quiet", "main")
    (repo / "docs").mkdir()
    (repo / "docs" / "init.py").symlink_to("../fakemla/__init__.py")
    (repo / "docs" / "etc").symlink_to("/etc/hostname")
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "links")
    git(repo, "checkout", "--quiet", "pr")
    git(repo, "rebase", "--quiet", "main")
    out = tmp_path / "out"
    proc = head_run(run_cli, repo, head_matrix, fake_cache, out=out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        "mlagate: warning: base's tree leaves out 1 link(s) pointing outside the checkout: "
        "docs/etc\n" in proc.stderr
    )
    assert (out / "headbase" / "base" / "docs" / "init.py").is_symlink()
    git(repo, "checkout", "--quiet", "main")
    (repo / "fakemla" / "etc").symlink_to("/etc/hostname")
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "a link in the package")
    git(repo, "checkout", "--quiet", "pr")
    git(repo, "rebase", "--quiet", "main")
    refused = head_run(run_cli, repo, head_matrix, fake_cache, out=tmp_path / "o2")
    commit = git(repo, "rev-parse", "main")[:12]
    assert (refused.returncode, refused.stderr) == (
        2,
        f"mlagate: error: --head {repo}: commit {commit}: fakemla/etc links outside the "
        "checkout, inside the runtime's package fakemla/ (base could not be imported as "
        "committed)\n",
    )


def test_an_unregistered_mla_module_in_head_is_one_line_naming_what_to_add(
    tmp_path, head_matrix, run_cli, fake_cache
):
    repo = runtime_repo(tmp_path / "rt", "fix")
    novel = (
        (repo / "fakemla" / "models" / "good.py")
        .read_text()
        .replace("class GoodAttention", "class NovelAttention")
    )
    (repo / "fakemla" / "models" / "novel.py").write_text(novel)
    proc = run_cli(
        "run",
        "--head",
        repo,
        "--base",
        "main",
        "--matrix",
        head_matrix,
        "--out",
        tmp_path / "out",
        cache=fake_cache,
    )
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert proc.stderr == (
        f"mlagate: error: --head {repo}: 1 MLA class is not in {head_matrix}: NovelAttention "
        f"(fakemla.models.novel); `mlagate discover {repo} --matrix {head_matrix} "
        "--write-snippet FILE` writes their entries\n"
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--head", "{tmp}/nowhere"], "--head {tmp}/nowhere: no such directory"),
        (["--base", "main"], "--base goes with --head"),
        (
            ["--head", "{repo}", "--base", "no-such-branch"],
            "--head {repo}: git merge-base HEAD no-such-branch: fatal: Not a valid object name "
            "no-such-branch",
        ),
        (
            ["--head", "{repo}", "--shard", "1/2"],
            "--head: does not go with --shard (a case runs on head and base in one run)",
        ),
        (
            ["--head", "{repo}", "--arm", "x"],
            "--head chooses the arm and the modules: --arm and --module do not apply",
        ),
        (
            ["--head", "{tmp}"],
            "--head {tmp}: holds none of the runtimes of {matrix} (looked for fakemla/) and no "
            "top-level package with MLA classes: add to runtimes: in {matrix} `PACKAGE: {{package: "
            "PACKAGE, distribution: DISTRIBUTION}}`",
        ),
    ],
)
def test_bad_head_arguments_are_one_line_errors(
    tmp_path, head_matrix, run_cli, fake_cache, argv, message
):
    repo = runtime_repo(tmp_path / "rt", "fix")
    fill = {"tmp": tmp_path, "repo": repo, "matrix": head_matrix}
    argv = [a.format(**fill) for a in argv]
    proc = run_cli(
        "run", *argv, "--matrix", head_matrix, "--out", tmp_path / "out", cache=fake_cache
    )
    assert (proc.returncode, proc.stderr) == (2, f"mlagate: error: {message.format(**fill)}\n"), (
        proc.stdout + proc.stderr
    )


def shipped_trees(tmp_path):
    """Head and base trees holding every mlx-lm module of the shipped matrix (one class each)."""
    from mlagate import matrix

    shipped = matrix.load(ROOT / "matrix.yaml")
    modules = {m.id: m for m in shipped.modules.values() if m.runtime == "mlx-lm"}
    for side in ("head", "base"):
        for m in modules.values():
            path = (tmp_path / side).joinpath(*m.import_path.split(".")).with_suffix(".py")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"class {m.attention}:\n    pass\n")
    from mlagate.scan.discovery import Found

    return shipped, {mid: Found(m.import_path, m.attention, mid, mid) for mid, m in modules.items()}


def test_the_derived_shipped_matrix_keeps_only_what_its_modules_and_arms_need(tmp_path):
    """The shipped matrix derived for an mlx-lm head: it parses (on main 8dd4a35 it did not:
    its expectations named mlx-vlm modules); findings of the stock arm go to base with their
    failure kinds (a skip also to head), no mutants, checkpoints and suite module lists of the
    kept modules only."""
    from mlagate import matrix
    from mlagate.gate import headbase

    shipped, found = shipped_trees(tmp_path)
    runtime = shipped.runtimes["mlx-lm"]
    doc = headbase.derive(shipped, runtime, tmp_path / "head", tmp_path / "base", found)
    derived = matrix.parse(yaml.safe_dump(doc), tmp_path / "derived.yaml")
    assert set(derived.arms) == {"head", "base"} and set(derived.modules) == set(found)
    assert "mutants" not in doc
    stock = {
        (e.suite, e.module, e.verdict, e.kinds)
        for e in shipped.expectations
        if e.arm == "mlx-lm-0.32.2"
    }
    on_base = {
        (e.suite, e.module, e.verdict, e.kinds) for e in derived.expectations if e.arm == "base"
    }
    assert on_base == stock
    assert {(e.suite, e.module) for e in derived.expectations if e.arm == "head"} == {
        (s, m) for s, m, v, _ in stock if v == "skip"
    }
    assert {c.module for c in derived.checkpoints.values()} <= set(found)
    assert all(set(s.modules or ()) <= set(found) for s in derived.suites.values())


def test_a_module_base_does_not_define_runs_on_head_only(tmp_path):
    from mlagate.gate import headbase

    shipped, found = shipped_trees(tmp_path)
    (tmp_path / "base" / "mlx_lm" / "models" / "kimi_k3.py").write_text("class Other:\n    pass\n")
    runtime = shipped.runtimes["mlx-lm"]
    doc = headbase.derive(shipped, runtime, tmp_path / "head", tmp_path / "base", found)
    assert doc["modules"]["mlx-lm/kimi_k3"]["arms"] == ["head"]
    assert doc["modules"]["mlx-lm/deepseek_v3"]["arms"] == ["head", "base"]


@pytest.mark.parametrize(
    "head, base, outcome",
    [
        ("pass", "fail", "fixed by this change"),
        ("fail", "pass", "regression"),
        ("fail", "fail", "still failing as on base"),
        ("pass", "pass", "as expected"),
        ("fail", None, "regression"),  # no counterpart: head's own expectation (pass)
        ("pass", None, "as expected"),
        ("invalid", "fail", "invalid"),
        ("fail", "invalid", "regression"),  # base not measured: head's own outcome
        ("argued", "argued", "as expected"),
    ],
)
def test_relative_outcomes(head, base, outcome):
    from mlagate.verdict import outcomes

    row = {"verdict": head, "expected": "argued" if head == "argued" else "pass"}
    other = None if base is None else {"verdict": base}
    assert outcomes.relative(row, other) == outcome
    assert outcomes.is_red(outcome) == (outcome == "regression")
    assert outcomes.is_red(outcome, strict=True) == (
        outcome in ("regression", "still failing as on base")
    )


def test_both_failing_of_other_kinds_is_a_changed_failure():
    """Fail on both sides: still failing when the failure kinds agree (or a side names none),
    a changed failure (red) when they differ."""
    from mlagate.verdict import outcomes

    def fail(*kinds):
        return {"verdict": "fail", "expected": "pass", "failure": {"kinds": list(kinds)}}

    assert outcomes.relative(fail("wrong path"), fail("wrong path")) == "still failing as on base"
    assert outcomes.relative(fail("wrong path"), {"verdict": "fail"}) == "still failing as on base"
    assert outcomes.relative(fail("runtime raised"), fail("wrong path")) == "changed failure"
    assert outcomes.is_red("changed failure")


def test_an_error_about_the_derived_matrix_names_the_users(tmp_path):
    from mlagate.gate import headbase

    hb = headbase.HeadBase(
        tmp_path / "o" / "headbase" / "matrix.yaml", (), "fakemla", "c", tmp_path / "m.yaml"
    )
    text = f"{hb.matrix}:12: modules.fake/good.attention: no class X"
    assert headbase.user_message(text, hb) == (
        f"{tmp_path / 'm.yaml'} (as derived for --head): modules.fake/good.attention: no class X"
    )


def test_an_error_of_the_run_names_the_users_matrix_not_the_derived_one(
    tmp_path, head_matrix, run_cli, fake_cache
):
    text = head_matrix.read_text()
    start, end = text.index("  marginal_cost:"), text.index("runners:")
    head_matrix.write_text(text[:start] + text[end:])  # no performance suite
    repo = runtime_repo(tmp_path / "rt", "fix")
    proc = run_cli(
        "run", "--head", repo, "--matrix", head_matrix, "--kind", "performance",
        "--out", tmp_path / "out", cache=fake_cache,
    )  # fmt: skip
    assert (proc.returncode, proc.stderr) == (
        2,
        f"mlagate: error: --kind: {head_matrix} (as derived for --head) has no performance "
        "suites\n",
    ), proc.stderr
