"""Result reuse (mlagate.gate.reuse): each kind of change re-keys exactly the cases it should,
the store ignores a bad entry with one line, a reused run's verdicts equal a full run's."""

import json
import os
import shutil
from pathlib import Path

import pytest

from mlagate import matrix as matrix_mod
from mlagate.gate import planning
from mlagate.gate.reuse import keys
from mlagate.machine import classes
from mlagate.machine.system import System
from mlagate.plan import Selection
from mlagate.store import folder
from tests.conftest import FIXTURES, ROOT

PROBES = ROOT / "suites" / "correctness"
DISPATCH = "  dispatch:  # dispatch\n    kind: correctness  # kind\n"
DISPATCH += "    gates: {warm_caches: [16, 32], widths: [2, 3, 4, 8]}  # gates\n"
CLASS = "mc-aaaaaaaaaaaa"  # a machine class (mlagate.machine.classes)


@pytest.fixture
def tree(fake_matrix):
    """The fake matrix with a second suite (dispatch), the probes suite beside it (`file:`),
    a second geometry on fake/good, and a helper module only fake/good imports."""
    root = fake_matrix.parent
    for name in ("test_probes.py", "probes.suite.yaml"):
        shutil.copy(PROBES / name, root / name)
    text = fake_matrix.read_text()
    text = text.replace(
        "  probes:  # the probes suite\n    kind: correctness  # kind\n",
        "  probes:  # the probes suite\n    kind: correctness  # kind\n"
        "    file: test_probes.py  # beside the matrix\n",
    )
    text = text.replace("runners:  # runners\n", DISPATCH + "runners:  # runners\n")
    tiny = text[text.index("  tiny:  # small") : text.index("modules:  # modules")]
    text = text.replace("modules:  # modules\n", tiny.replace("tiny:", "tiny2:") + "modules:\n")
    text = text.replace(
        "attention: GoodAttention  # attention class\n    model: Model  # model class\n"
        "    args: ModelArgs  # config class\n    geometries: [tiny]",
        "attention: GoodAttention  # attention class\n    model: Model  # model class\n"
        "    args: ModelArgs  # config class\n    geometries: [tiny, tiny2]",
    )
    fake_matrix.write_text(text)
    models = root / "fakemla-tree" / "fakemla" / "models"
    (models / "helper.py").write_text("SCALE = 1.0\n")
    good = models / "good.py"
    good.write_text("from .helper import SCALE  # noqa: F401\n" + good.read_text())
    return fake_matrix


def derive(path: Path, cache: Path, package: Path = keys.PACKAGE, machine_class=CLASS) -> dict:
    """Every measured case's key: {case id: digest}."""
    m = matrix_mod.load(path)
    out = planning.plan(m, Selection(), "quick", "cpu", "linux-cpu", cache)
    d = keys.Deriver(m, out.installs, "cpu", machine_class, package=package)
    return {c.id: d.key(c).digest for c in out.cases if c.evidence != "argued"}


def changed(before: dict, after: dict) -> set[str]:
    assert set(before) == set(after)
    return {c for c in before if before[c] != after[c]}


def modules_of(ids) -> set[str]:
    return {i.split("::")[1] for i in ids}


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def test_each_change_rekeys_exactly_its_cases(tree, fake_cache):
    root = tree.parent
    models = root / "fakemla-tree" / "fakemla" / "models"
    k0 = derive(tree, fake_cache)
    # 7 modules on two suites, fake/good on two geometries; tiny2 is tiny under another name,
    # and an id names a thing without changing it: those cases share their keys
    assert len(k0) == 16 and len(set(k0.values())) == 14
    assert derive(tree, fake_cache) == k0  # nothing changed: the same keys

    # the module's own file: its cases only
    edit(models / "good.py", "L = x.shape[1]", "L = x.shape[1]  # edited")
    k1 = derive(tree, fake_cache)
    assert modules_of(changed(k0, k1)) == {"fake/good"} and len(changed(k0, k1)) == 4

    # a runtime file the module imports (helper.py: only good.py imports it)
    (models / "helper.py").write_text("SCALE = 2.0\n")
    k2 = derive(tree, fake_cache)
    assert modules_of(changed(k1, k2)) == {"fake/good"}

    # a runtime file every module imports (base.py): every case
    edit(models / "base.py", "import math", "import math  # edited")
    k3 = derive(tree, fake_cache)
    assert changed(k2, k3) == set(k2)

    # unrelated runtime files (a module nobody imports, the package's bare init): nothing
    edit(models / "unstable.py", "import os", "import os  # edited")
    (root / "fakemla-tree" / "fakemla" / "__init__.py").write_text('"""edited"""\n')
    k4 = derive(tree, fake_cache)
    assert changed(k3, k4) == set()

    # the suite file: that suite's cases only
    edit(
        root / "test_probes.py",
        '"""',
        '"""edited: ',
    )
    k5 = derive(tree, fake_cache)
    assert {i.split("::")[0] for i in changed(k4, k5)} == {"probes"}
    assert len(changed(k4, k5)) == 8

    # a gate value: that suite's cases only
    edit(tree, "widths: [2, 3, 4, 8]", "widths: [2, 3, 4]")
    k6 = derive(tree, fake_cache)
    assert {i.split("::")[0] for i in changed(k5, k6)} == {"dispatch"}

    # the geometry: the cases on it only
    edit(
        tree,
        "  tiny2:  # small but r > n + v, as every real checkpoint\n    kv_lora_rank: 64",
        "  tiny2:  # small but r > n + v, as every real checkpoint\n    kv_lora_rank: 128",
    )
    k7 = derive(tree, fake_cache)
    assert {i.split("::")[3] for i in changed(k6, k7)} == {"tiny2"} and len(changed(k6, k7)) == 2
    assert len(set(k7.values())) == 16


def test_harness_files_rekey_every_case_and_other_mlagate_files_none(tree, fake_cache, tmp_path):
    copy = tmp_path / "src" / "mlagate"
    shutil.copytree(keys.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    k0 = derive(tree, fake_cache, package=copy)
    edit(copy / "report" / "summary.py", '"""', '"""edited: ')  # the suites never run it
    assert changed(k0, derive(tree, fake_cache, package=copy)) == set()
    edit(copy / "harness" / "shapes.py", '"""', '"""edited: ')
    k1 = derive(tree, fake_cache, package=copy)
    assert changed(k0, k1) == set(k0)
    edit(copy / "stats.py", '"""', '"""edited: ')  # imported by the harness: every case
    assert changed(k1, derive(tree, fake_cache, package=copy)) == set(k1)


def test_mlx_version_and_blas_rekey_every_case(tree, fake_cache, monkeypatch):
    k0 = derive(tree, fake_cache)
    import importlib.metadata as metadata

    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "0.0.1" if name == "mlx" else real(name))
    k1 = derive(tree, fake_cache)
    assert changed(k0, k1) == set(k0)
    monkeypatch.setenv("LD_PRELOAD", str(FIXTURES / "fake-fix.patch"))  # another library
    assert changed(k1, derive(tree, fake_cache)) == set(k1)


def test_timing_results_are_keyed_by_machine_class_and_never_by_host(tree, fake_cache, monkeypatch):
    path = FIXTURES / "fake-perf.yaml"
    m = matrix_mod.load(path)
    here = derive(path, fake_cache)
    perf = {c for c in here if m.suites[c.split("::")[0]].kind == "performance"}
    other_class = derive(path, fake_cache, machine_class="mc-bbbbbbbbbbbb")
    assert perf and changed(here, other_class) == perf
    correctness = derive(tree, fake_cache)  # no class in a correctness key
    assert derive(tree, fake_cache, machine_class="mc-bbbbbbbbbbbb") == correctness
    # another host of the same class (another name, machine id, runner name): the same keys,
    # so a timing stands there, and a correctness result stands on every class
    monkeypatch.setenv("RUNNER_NAME", "mac-b")
    monkeypatch.setattr(keys.platform, "node", lambda: "another-host")
    assert derive(path, fake_cache) == here
    # unnamed, the class is this machine's own (mlagate.machine.classes)
    mine = classes.of(System(), "cpu").id
    unnamed = derive(path, fake_cache, machine_class=None)
    assert unnamed == derive(path, fake_cache, machine_class=mine)


def test_store_keeps_decisive_results_and_ignores_bad_entries(tmp_path, capsys):
    from mlagate.results import Result
    from tests.test_store import CASE as case

    parts = {p: keys.digest(p) for p in ("runtime", "suite", "harness", "matrix", "mlx")}
    key = keys.Key(keys.combine(parts), parts)
    st = folder.FolderStore(tmp_path / "store")
    invalid = Result(case=case, verdict="invalid", reason="x").to_json()
    assert st.put(key, invalid, "c0") is None  # never an invalid one
    flaky = Result(case=case, verdict="pass").to_json()
    flaky["attempts"] = [{"run_id": "r0", "verdict": "fail", "failure": None, "started": None}]
    assert st.put(key, flaky, "c0") is None  # never a flaky one
    doc = Result(case=case, verdict="pass", reason="all gates held").to_json()
    path = st.put(key, doc, "c0")
    assert st.get(key)["result"]["verdict"] == "pass" and not st.ignored

    entry = json.loads(path.read_text())
    for spoil, why in (
        (lambda e: e["result"].update(verdict="fail"), "does not match its sha256"),
        (lambda e: e["parts"].update(suite="0" * 64), "does not re-derive"),
        (lambda e: e.pop("from"), "missing key 'from'"),
    ):
        bad = json.loads(json.dumps(entry))
        spoil(bad)
        path.write_text(json.dumps(bad))
        assert st.get(key) is None
        assert why in st.ignored[-1] and str(path) in st.ignored[-1]
    path.write_text("{not json")
    assert st.get(key) is None and "not valid JSON" in st.ignored[-1]
    assert len(capsys.readouterr().err.strip().splitlines()) == 4  # one line each


def test_a_reused_result_takes_this_runs_names_and_expectation():
    from mlagate.gate.reuse import apply
    from mlagate.plan import Case
    from mlagate.results import Result

    was = Case("probes", "fake/good", "fake-stock", "tiny", "float32", "cpu", "quick", "l", "s")
    doc = Result(case=was.to_json(), verdict="fail", reason="r").to_json()
    doc["geometry"] = {"id": "tiny", "r": 64}
    entry = {
        "key": "0" * 64,
        "from": {"run_id": "r1", "commit": "c1", "started": "2026-12-01T00:00:00Z"},
        "result": doc,
    }
    now = Case(
        "probes", "fake/good", "head", "tiny2", "float32", "cpu", "quick", "l", "s",
        expected="fail", expectation="a known finding", control=True,
    )  # fmt: skip
    out = apply.reused_document(entry, now, "r2", Path("S"), "replay")
    assert out["case_id"] == now.id and out["arm"] == "head" and out["run_id"] == "r2"
    assert out["geometry"] == {"id": "tiny2", "r": 64} and out["verdict"] == "fail"
    assert (out["expected"], out["expectation"], out["control"]) == (
        "fail",
        "a known finding",
        True,
    )
    assert out["reused"] == {
        "run_id": "r1", "commit": "c1", "started": "2026-12-01T00:00:00Z", "key": "0" * 64,
        "store": "S",
    }  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [
        ["--reuse", ""],
        ["--reuse", "matrix.yaml"],
        ["--reuse", "matrix.yaml/sub"],
        ["--reuse-read-only"],
        ["--reuse", "s", "--reuse-read-only", "--no-reuse"],
    ],
)
def test_bad_store_arguments_are_one_line_exit_2(args, run_cli, tmp_path):
    (tmp_path / "matrix.yaml").write_text("x")
    proc = run_cli("run", *args, "--out", tmp_path / "o", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "--reuse" in proc.stderr, proc.stderr


def _rows(out: Path) -> dict:
    return {
        r["case_id"]: r
        for r in (json.loads(p.read_text()) for p in (out / "results").glob("*.json"))
    }


def test_reused_run_equals_full_run_case_for_case(fake_matrix, fake_cache, tmp_path, run_cli):
    st = tmp_path / "store"
    base = ("run", "--matrix", fake_matrix, "--reuse", st)
    full = run_cli(*base, "--out", tmp_path / "full", cache=fake_cache)
    first = _rows(tmp_path / "full")
    assert not any(r.get("reused") for r in first.values())
    for entry in (st / "results").glob("*/*.json"):
        os.utime(entry, (0, 0))  # a reuse touches its entry, so cleanup.sh keeps what is in use
    again = run_cli(*base, "--out", tmp_path / "again", cache=fake_cache)
    assert all(e.stat().st_mtime > 0 for e in (st / "results").glob("*/*.json"))
    second = _rows(tmp_path / "again")
    assert full.returncode == again.returncode == 1, again.stdout + again.stderr
    assert set(first) == set(second)
    for cid, r in first.items():
        for k in ("verdict", "failure", "expected", "control", "metrics", "counters"):
            assert second[cid][k] == r[k], (cid, k)
    reused = {c for c, r in second.items() if r.get("reused")}
    decisive = {c for c, r in first.items() if r["verdict"] in ("pass", "fail")}
    assert reused == decisive and len(reused) == 6  # never the invalid or the argued case
    one = second[sorted(reused)[0]]
    assert one["reused"]["run_id"] == first[sorted(reused)[0]]["run_id"] != one["run_id"]
    assert "reuse: 6 of 8 cases taken from" in again.stderr
    assert "reused: 6 of 8 results taken from the result store" in again.stdout

    report = run_cli("report", tmp_path / "again", "--out", tmp_path / "html")
    assert report.returncode == 0, report.stderr
    summary = (tmp_path / "html" / "summary.md").read_text()
    assert "reused: 6 of 8 results taken from the result store" in summary, summary
    junit = (tmp_path / "html" / "junit.xml").read_text()
    assert junit.count("reused: from run " + one["reused"]["run_id"]) == 6, junit
    page = (tmp_path / "html" / "index.html").read_text()
    assert "reused: 6 of 8 results" in page
    # each row says who measured it, and a reused one that it came from the store
    host, mc = one["host"], one["machine_class"]["id"]
    assert host == first[sorted(reused)[0]]["host"] and mc.startswith("mc-")
    assert f"measured on: 6 by {host} ({mc}) from the store; 2 by {host} ({mc})" in summary
    red = [line for line in summary.splitlines() if line.startswith("| regression")]
    assert red and all(f"host {host}, class {mc}" in line for line in red), summary
    assert any(f"class {mc}, from the store |" in line for line in red), summary
    assert page.count('<span class="from-store">from the store</span>') >= 6

    plan = run_cli("plan", "--matrix", fake_matrix, "--reuse", st, cache=fake_cache)
    assert "would take 6 of 8 cases from the store and measure 2" in plan.stdout, plan.stdout
    as_json = run_cli(
        "plan", "--matrix", fake_matrix, "--reuse", st, "--format", "json", cache=fake_cache
    )
    assert len(json.loads(as_json.stdout)) == 8  # stdout stays the plan document
    assert "would take 6 of 8 cases" in as_json.stderr, as_json.stderr
    github = run_cli("plan", "--matrix", fake_matrix, "--reuse", st, "--format", "github")
    assert github.returncode == 2 and "--reuse goes with --format table or json" in github.stderr

    # a tampered entry is ignored, one line, and its case measured again
    entry = next((st / "results").glob("*/*.json"))
    data = json.loads(entry.read_text())
    data["result"]["verdict"] = "fail" if data["result"]["verdict"] == "pass" else "pass"
    entry.write_text(json.dumps(data))
    third = run_cli(*base, "--out", tmp_path / "third", cache=fake_cache)
    assert third.stderr.count("ignored: its result does not match its sha256") == 1
    rows = _rows(tmp_path / "third")
    assert sum(bool(r.get("reused")) for r in rows.values()) == 5
    assert {c: r["verdict"] for c, r in rows.items()} == {c: r["verdict"] for c, r in first.items()}
    nothing = run_cli(*base, "--no-reuse", "--out", tmp_path / "full2", cache=fake_cache)
    assert "reuse: 0 of 8" in nothing.stderr
    assert not any(r.get("reused") for r in _rows(tmp_path / "full2").values())


def test_a_head_run_measures_only_the_head_cases_whose_keys_changed(tmp_path, run_cli, fake_cache):
    from tests.fakert import git, runtime_repo
    from tests.test_headbase import verdicts

    where = tmp_path / "m"
    where.mkdir()
    shutil.copy(FIXTURES / "gate" / "matrix.yaml", where / "matrix.yaml")
    shutil.copy(FIXTURES / "fake-fix.patch", where / "fake-fix.patch")
    shutil.copytree(FIXTURES / "fakemla-tree", where / "fakemla-tree")
    repo = runtime_repo(tmp_path / "rt", "fix")
    st = tmp_path / "store"

    def head_run(out, *more):
        return run_cli(
            "run", "--head", repo, "--base", "main", "--matrix", where / "matrix.yaml",
            "--kind", "correctness", "--reuse", st, "--out", out, *more, cache=fake_cache,
        )  # fmt: skip

    git(repo, "checkout", "--quiet", "main")  # main's own gate: head and base are main
    first = head_run(tmp_path / "main")
    assert first.returncode == 0, first.stdout + first.stderr
    main_commit = git(repo, "rev-parse", "main")

    git(repo, "checkout", "--quiet", "pr")  # the pull request changes good.py
    stored = sorted((st / "results").iterdir())
    assert len(stored) == 3
    pr = head_run(tmp_path / "pr", "--reuse-read-only")  # reads main's results, writes none
    assert sorted((st / "results").iterdir()) == stored
    assert pr.returncode == 0, pr.stdout + pr.stderr
    rows = _rows(tmp_path / "pr")
    reused = {(r["suite"], r["arm"]) for r in rows.values() if r.get("reused")}
    assert reused == {("dispatch", "base")}  # base's from the store; head's measured
    base = next(r for r in rows.values() if r["arm"] == "base")
    assert base["reused"]["commit"] == main_commit
    assert verdicts(tmp_path / "pr") == {
        ("dispatch", "head"): "pass",
        ("dispatch", "base"): "fail",
        ("l1_unchanged", "head"): "pass",
    }
    assert "fixes 1, breaks 0" in pr.stdout

    git(repo, "checkout", "--quiet", "-b", "docs", "main")  # touches no file a case runs
    init = repo / "fakemla" / "__init__.py"
    init.write_text('"""The fake runtime (an unrelated edit)."""\n' + init.read_text())
    git(repo, "commit", "--quiet", "-am", "docs")
    docs = head_run(tmp_path / "docs")
    assert docs.returncode == 0, docs.stdout + docs.stderr
    assert all(r.get("reused") for r in _rows(tmp_path / "docs").values())
    assert "reuse: 3 of 3 cases taken from" in docs.stderr


@pytest.mark.arms
def test_a_real_arm_rekeys_a_module_and_what_imports_it_only(tmp_path, real_cache):
    """mlx-lm 0.32.2 as installed: deepseek_v3.py re-keys deepseek_v3 and mistral4 (which
    imports it), on the stock arm and on the patched arm compared with it; llama.py (no
    registered module imports it) re-keys nothing."""
    import dataclasses

    m = matrix_mod.load(ROOT / "matrix.yaml")
    arms = ("mlx-lm-0.32.2", "mlx-lm-0.32.2-patched")
    out = planning.plan(m, Selection((), (), arms), "quick", "cpu", "linux-cpu", real_cache)
    cases = [c for c in out.cases if c.evidence != "argued"]
    stock = out.installs["mlx-lm-0.32.2"]
    copy = tmp_path / "arm"
    shutil.copytree(stock.dir / "site", copy / "site", ignore=shutil.ignore_patterns("*.pyc"))

    def keyed() -> dict:
        installs = {**out.installs, stock.arm.id: dataclasses.replace(stock, dir=copy)}
        d = keys.Deriver(m, installs, "cpu", CLASS)
        return {c.id: d.key(c).digest for c in cases}

    k0 = keyed()
    assert len(k0) > 100 and keyed() == k0
    models = copy / "site" / "mlx_lm" / "models"
    (models / "llama.py").write_text((models / "llama.py").read_text() + "\n# unrelated\n")
    assert changed(k0, keyed()) == set()
    v3 = models / "deepseek_v3.py"
    v3.write_text(v3.read_text() + "\n# a change\n")
    k1 = keyed()
    assert modules_of(changed(k0, k1)) == {"mlx-lm/deepseek_v3", "mlx-lm/mistral4"}
    assert {i.split("::")[2] for i in changed(k0, k1)} == set(arms)
