"""mlagate mutate: operators found with ast, mutant arms through the cache, the kill matrix on the
fake runtime."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from mlagate import matrix
from mlagate.mutate import killmatrix, operators, run

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TREE = FIXTURES / "fakemla-tree"


def _patched_site(tmp_path, patch="fake-fix.patch") -> Path:
    """A copy of the fake tree with a patch applied, as an arm's site/ would hold it."""
    site = tmp_path / "site"
    shutil.copytree(TREE, site)
    subprocess.run(["git", "apply", "-p1", str(FIXTURES / patch)], cwd=site, check=True)
    return site


def _generate(site):
    return operators.generate(
        "fake-patched", site, "fake/good", "fakemla.models.good", "GoodAttention"
    )


def test_operators_find_the_dispatch_by_ast(tmp_path):
    mutants = _generate(_patched_site(tmp_path))
    ops = {m.operator for m in mutants}
    assert ops == {
        "boundary",
        "off_by_one",
        "revert_fold",
        "revert_unfold",
        "wrong_axis",
        "mask_none",  # self.attend(q, k, v, mask): the mask operators (tests/test_causal_suite.py)
        "pad_drop",  # the fake batch cache's padding: tests/test_mutate_serving.py
        "pad_shift",
    }
    ids = {m.id for m in mutants}
    assert "revert_fold: absorbed -> L == 1 @ fakemla/models/good.py::GoodAttention.__call__" in ids
    assert (
        "wrong_axis: L == 1 or use_absorbed(L, self.r, self.n, self.v, lat.shape[-2]) -> "
        "x.shape[0] == 1 or use_absorbed(x.shape[0], self.r, self.n, self.v, lat.shape[-2]) @ "
        "fakemla/models/good.py::GoodAttention.__call__" in ids
    )
    helper = [m for m in mutants if m.file == "fakemla/models/base.py"]
    assert {m.operator for m in helper} == {"boundary", "off_by_one"} and all(
        m.where == "use_absorbed" for m in helper
    )
    # the fake's use_absorbed has no cache-free form: no drop_cache mutant is made
    assert "drop_cache" not in ops


def test_unpatched_module_has_no_decision_to_revert(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(TREE, site)
    mutants = _generate(site)
    assert not any(
        m.operator.startswith("revert_") for m in mutants
    )  # its guards already read L == 1
    assert {m.operator for m in mutants} == {
        "boundary",
        "wrong_axis",
        "mask_none",
        "pad_drop",
        "pad_shift",
    }


def test_ids_do_not_depend_on_line_numbers(tmp_path):
    site = _patched_site(tmp_path)
    first = {m.id for m in _generate(site)}
    good = site / "fakemla" / "models" / "good.py"
    good.write_text("# shifted\n\n\n" + good.read_text())
    assert {m.id for m in _generate(site)} == first


def test_every_mutant_patch_applies_and_changes_one_thing(tmp_path):
    site = _patched_site(tmp_path)
    for i, m in enumerate(_generate(site)):
        copy = tmp_path / f"m{i}"
        shutil.copytree(site, copy)
        patch = tmp_path / f"m{i}.patch"
        patch.write_text(m.patch)
        subprocess.run(["git", "apply", "-p1", str(patch)], cwd=copy, check=True)
        changed = (copy / m.file).read_text()
        assert changed != (site / m.file).read_text()
        compile(changed, m.file, "exec")
        assert (
            sum(1 for ln in m.patch.splitlines() if ln.startswith("-") and not ln.startswith("---"))
            == 1
        )


def test_drop_cache_replaces_the_cache_length_with_none(tmp_path):
    site = tmp_path / "site"
    (site / "rt" / "models").mkdir(parents=True)
    (site / "rt" / "__init__.py").write_text("")
    (site / "rt" / "models" / "__init__.py").write_text("")
    (site / "rt" / "models" / "mla.py").write_text(
        "def max_absorbed_queries(r, n, v, cache_len=None):\n    return 1 if cache_len is None "
        "else 2\n"
    )
    (site / "rt" / "models" / "m.py").write_text(
        "from .mla import max_absorbed_queries\n\n\nclass A:\n    def __call__(self, x, "
        "cache=None):\n        B, L, _ = x.shape\n"
        "        absorbed = L == 1 or L <= max_absorbed_queries(*self.dims, latent(x))\n"
        "        if absorbed:\n            q = self.embed_q(x)\n        else:\n            q = "
        "self.embed_q(x, transpose=False)\n"
        "        if absorbed:\n            q = self.unembed_out(q)\n        return q\n"
    )
    mutants = operators.generate(
        "a", site, "rt/m", "rt.models.m", "A", ["drop_cache", "wrong_axis"]
    )
    assert [m.id for m in mutants] == [
        "wrong_axis: L == 1 or L <= max_absorbed_queries(*self.dims, latent(x)) -> x.shape[0] == "
        "1 or x.shape[0] <= max_absorbed_queries(*self.dims, latent(x)) @ "
        "rt/models/m.py::A.__call__",
        "drop_cache: max_absorbed_queries(*self.dims, latent(x)) -> "
        "max_absorbed_queries(*self.dims, None) @ rt/models/m.py::A.__call__",
    ]


# --- matrix and documents -------------------------------------------------------------------


def _matrix_with(tmp_path, block: str) -> Path:
    shutil.copytree(TREE, tmp_path / "fakemla-tree")
    for p in ("fake-fix.patch", "fake-fragile.patch"):
        shutil.copy(FIXTURES / p, tmp_path / p)
    text = (FIXTURES / "fake-mutate.yaml").read_text()
    text = text[: text.index("mutants:")] + block
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "block, key",
    [
        (
            "mutants:\n  equivalent:\n    - {arm: nope, mutant: x, reason: y}\n",
            "mutants.equivalent[0].arm",
        ),
        (
            "mutants:\n  equivalent:\n    - {arm: fake-patched, mutant: x}\n",
            "mutants.equivalent[0]",
        ),
        (
            "mutants:\n  equivalent:\n    - {arm: fake-patched, mutant: x, reason: '  '}\n",
            "mutants.equivalent[0].reason",
        ),
        ("mutants:\n  survivors: []\n", "mutants"),
        ("mutants:\n  equivalent: {arm: fake-patched}\n", "mutants.equivalent"),
    ],
)
def test_bad_mutants_section_names_the_key(tmp_path, block, key):
    with pytest.raises(matrix.MatrixError) as err:
        matrix.load(_matrix_with(tmp_path, block))
    assert key in str(err.value) and "\n" not in str(err.value)


def test_equivalent_entries_match_by_arm_and_glob(tmp_path):
    m = matrix.load(FIXTURES / "fake-mutate.yaml")
    site = _patched_site(tmp_path)
    eq = [x for x in _generate(site) if run.equivalent_reason(m, x)]
    assert [x.id for x in eq] == [
        "boundary: L == 1 -> L <= 1 @ fakemla/models/good.py::GoodAttention.__call__"
    ]
    other = operators.generate(
        "fake-fragile", site, "fake/good", "fakemla.models.good", "GoodAttention"
    )
    assert not [
        x for x in other if run.equivalent_reason(m, x)
    ]  # the entry names fake-patched only


def test_kill_matrix_loader_rejects_other_documents(tmp_path):
    bad = tmp_path / "k.json"
    bad.write_text(json.dumps({"schema": "mlagate.result/1"}))
    with pytest.raises(killmatrix.KillMatrixError, match="k.json: schema is 'mlagate.result/1'"):
        killmatrix.load(bad)
    bad.write_text("{")
    with pytest.raises(killmatrix.KillMatrixError, match="k.json: not valid JSON"):
        killmatrix.load(bad)
    maybe = {"id": "x", "status": "maybe"}
    bad.write_text(json.dumps({"schema": killmatrix.SCHEMA, "mutants": [maybe]}))
    with pytest.raises(killmatrix.KillMatrixError, match=r"k.json: mutants\.0\.status: 'maybe'"):
        killmatrix.load(bad)


def test_bad_arguments_are_one_line_exit_2(tmp_path, run_cli):
    m = FIXTURES / "fake-mutate.yaml"
    for args, text in (
        (("--arm", "fake-stock"), "--arm fake-stock: role stock"),
        (("--arm", "nope"), "nope"),
        (("--suite", "nope"), "nope"),
        (("--operator", "nope"), "invalid choice"),
        (("--mutant", "no such mutant"), "--mutant: no mutant id matches no such mutant"),
        (("--costs", "/nonexistent/costs.json"), "/nonexistent/costs.json: cannot read"),
    ):
        proc = run_cli(
            "mutate", "--matrix", m, "--out", tmp_path / "o", *args, cache=tmp_path / "c"
        )
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert (
            text in proc.stderr
            and "Traceback" not in proc.stderr
            and len(proc.stderr.strip().splitlines()) == 1
        )
    proc = run_cli(
        "report", tmp_path, "--mutation", tmp_path / "none.json", "--out", tmp_path / "h"
    )
    assert proc.returncode == 2 and "none.json" in proc.stderr and "Traceback" not in proc.stderr


def test_classify_counts_only_cases_that_pass_on_the_parent():
    class Inst:
        key = "k"

    parents = [type("C", (), {"arm": "p", "id": f"s::m::p::{g}"})() for g in ("a", "b", "c")]
    mine = [type("C", (), {"arm": "x", "id": f"s::m::x::{g}"})() for g in ("a", "b", "c")]
    exp = run._Expected(Path("/nonexistent/expected.json"))
    exp.put("k", "s::m::p::a", "pass")
    exp.put("k", "s::m::p::b", "fail")  # fails on the parent: a failure here kills nothing
    exp.put("k", "s::m::p::c", "pass")
    e = run._Entry(None, "x", Path("p"))
    rows = {
        "s::m::x::a": {"verdict": "pass"},
        "s::m::x::b": {"verdict": "fail"},
        "s::m::x::c": {"verdict": "invalid"},
    }
    run._classify(e, "s", parents, mine, rows, exp, {"p": Inst()})
    assert (e.killed_by, e.invalid_in, e.controls) == ([], ["s"], 2)
    assert killmatrix._status(e) == "only invalid"
    rows["s::m::x::a"] = {"verdict": "fail"}
    run._classify(e, "s", parents, mine, rows, exp, {"p": Inst()})
    assert e.killed_by == ["s"] and killmatrix._status(e) == "killed"


# --- the whole verb on the fake runtime -----------------------------------------------------


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory):
    """One mutate run over the fake matrix (boundary operator, both patched arms, two suites)."""
    base = tmp_path_factory.mktemp("mutate")
    out, cache = base / "out", base / "cache"
    proc = execute_cli(
        "mutate",
        "--matrix",
        FIXTURES / "fake-mutate.yaml",
        "--operator",
        "boundary",
        "--out",
        out,
        "-n",
        "2",
        cache=cache,
    )
    return proc, out, cache


def execute_cli(*args, cache):
    from tests.conftest import cli

    return cli(*args, cache=cache)


def _by(doc):
    return {(m["arm"], m["before"], m["after"]): m for m in doc["mutants"]}


EXACT = "L * (r * d + (2 * r - d) * T) < r * d * T"


@pytest.mark.mutate
def test_fake_kill_matrix_has_every_status(fake_run):
    proc, out, _ = fake_run
    assert proc.returncode == 1, proc.stdout + proc.stderr  # survivors and only-invalid mutants
    doc = killmatrix.load(out / "kill-matrix.json")
    assert doc["complete"] and doc["suites"] == ["l1_unchanged", "dispatch"]
    by = _by(doc)
    # argued equivalent in the fixture matrix, never run
    eq = by[("fake-patched", "L == 1", "L <= 1")]
    assert eq["status"] == "equivalent" and "L >= 1" in eq["reason"] and "mutant_arm" not in eq
    # killed: always absorbed, so cold caches do not materialise; l1_unchanged (cheaper) runs first
    # and passes
    assert by[("fake-patched", "L == 1", "L >= 1")]["killed_by"] == ["dispatch"]
    assert by[("fake-patched", EXACT, EXACT.replace("<", "=="))]["status"] == "killed"
    # survived: < to <= differs only at exact ties, which neither suite here reaches
    survivor = by[("fake-patched", EXACT, EXACT.replace("<", "<="))]
    assert survivor["status"] == "survived" and survivor["controls"] > 0
    assert (
        survivor["patch"].startswith("--- a/fakemla/models/base.py")
        and "--mutant" in survivor["replay"]
    )
    # only invalid: on the fragile arm the same mutant makes the process die, which is not a kill
    fragile = by[("fake-fragile", EXACT, EXACT.replace("<", "=="))]
    assert (
        fragile["status"] == "only invalid"
        and fragile["invalid_in"] == ["dispatch"]
        and not fragile["killed_by"]
    )
    # not argued for fake-fragile (the entry names fake-patched): it runs and survives
    assert by[("fake-fragile", "L == 1", "L <= 1")]["status"] == "survived"
    assert doc["counts"] == {
        "killed": 3,
        "survived": 3,
        "only invalid": 1,
        "no control": 0,
        "equivalent": 1,
        "total": 8,
    }
    assert "SURVIVED: boundary: " in proc.stdout and "ONLY INVALID: boundary: " in proc.stdout


@pytest.mark.mutate
def test_fake_kill_matrix_page_and_report_section(fake_run, tmp_path, run_cli):
    _, out, cache = fake_run
    html = (out / "kill-matrix.html").read_text()
    assert (
        "Mutation kill matrix" in html
        and "&lt;=" in html
        and " <= " not in html.split("<pre>")[0].split("<table")[1]
    )
    results = next((out / "rounds").glob("*/results")).parent
    proc = run_cli(
        "report", results, "--mutation", out / "kill-matrix.json", "--out", tmp_path / "h"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = (tmp_path / "h" / "index.html").read_text()
    assert (
        'id="s-mutation"' in page and "ONLY INVALID" in page and "argued equivalent" in page.lower()
    )
    md = killmatrix.markdown(killmatrix.load(out / "kill-matrix.json"))
    assert (
        "| fake-fragile fake/good | EQUIVALENT" not in md
        and "| fake-fragile fake/good | ONLY INVALID, SURVIVED x2, dispatch |" in md
    )
    assert "| boundary | 3 | 3 | 1 | 0 | 1 |" in md and "| dispatch | 3 |" in md


@pytest.mark.mutate
def test_rerun_reuses_the_parent_verdicts_and_mutant_arms(fake_run, tmp_path):
    _, out, cache = fake_run
    keys = sorted(
        p.name for p in (cache / "arms").iterdir() if p.is_dir() and not p.name.startswith(".")
    )
    expected = json.loads((out / "expected.json").read_text())
    proc = execute_cli(
        "mutate",
        "--matrix",
        FIXTURES / "fake-mutate.yaml",
        "--operator",
        "boundary",
        "--out",
        out,
        "--mutant",
        "boundary: L == 1 -> L >= 1 @ *",
        "--arm",
        "fake-patched",
        cache=cache,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = killmatrix.load(out / "kill-matrix.json")
    assert [m["status"] for m in doc["mutants"]] == ["killed"]
    assert all(
        r["parent_cases"] == 0 for r in doc["rounds"]
    )  # the parent's verdicts came from expected.json
    assert json.loads((out / "expected.json").read_text()) == expected
    assert (
        sorted(
            p.name for p in (cache / "arms").iterdir() if p.is_dir() and not p.name.startswith(".")
        )
        == keys
    )
    earlier = killmatrix.load(
        next((out / "previous").glob("*/kill-matrix.json"))
    )  # the whole matrix is set aside, not lost
    assert earlier["counts"]["total"] == 8


def test_partial_kill_matrix_says_so():
    doc = {
        "schema": killmatrix.SCHEMA,
        "complete": False,
        "rounds": [{"suite": "probes"}],
        "mutants": [],
        "profile": "quick",
        "backend": "cpu",
        "counts": {s: 0 for s in killmatrix.STATUSES} | {"total": 0},
        "seconds": 1.0,
        "suites": ["probes", "dispatch"],
        "all": False,
    }
    assert "PARTIAL: rounds run so far: probes" in killmatrix.text(doc)
    assert "<strong>Partial:</strong> only the rounds probes have run" in killmatrix.section(doc)
    doc["complete"] = True
    assert "PARTIAL" not in killmatrix.text(doc) and "Partial" not in killmatrix.section(doc)


def test_a_bad_kill_matrix_is_a_one_line_usage_error(tmp_path):
    from .conftest import cli

    bad = tmp_path / "kill.json"
    bad.write_text("{}")
    proc = cli("report", FIXTURES / "fake-matrix.yaml", "--mutation", bad, "--out", tmp_path / "r")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "kill.json" in proc.stderr, (
        proc.stderr
    )


def test_topk_widen_only_touches_a_single_query_gather_of_a_selection(tmp_path):
    site = tmp_path / "site"
    (site / "rt" / "models").mkdir(parents=True)
    (site / "rt" / "__init__.py").write_text("")
    (site / "rt" / "models" / "__init__.py").write_text("")
    body = (
        "class A:\n    def __call__(self, x, cache=None):\n        B, L, _ = x.shape\n"
        "        topk_indices = self.indexer(x)\n"
        "        if L == 1:\n            idx = topk_indices[:, :, 0]\n"
        "        if L == 1:\n            other = 3\n"
        "        if L == 1:\n            q = self.embed_q(x)\n        else:\n            q = "
        "self.embed_q(x, transpose=False)\n"
        "        if L == 1:\n            q = self.unembed_out(q)\n        return q\n"
    )
    (site / "rt" / "models" / "m.py").write_text(body)
    mutants = operators.generate("a", site, "rt/m", "rt.models.m", "A", ["topk_widen"])
    assert [m.id for m in mutants] == [
        "topk_widen: L == 1 -> L <= topk_indices.shape[-1] @ rt/models/m.py::A.__call__"
    ]
    assert (
        "-        if L == 1:\n+        if L <= topk_indices.shape[-1]:\n             idx = "
        "topk_indices" in mutants[0].patch
    )
    (site / "rt" / "models" / "m.py").write_text(body.replace("topk_indices", "chosen"))
    assert (
        operators.generate("a", site, "rt/m", "rt.models.m", "A", ["topk_widen"]) == []
    )  # no top-k selection: nothing to widen


def test_derived_matrix_adds_one_arm_per_mutant_without_yaml_aliases(tmp_path):
    m = matrix.load(FIXTURES / "fake-mutate.yaml")
    patch = tmp_path / "x.patch"
    patch.write_text("")
    mutant = operators.Mutant(
        "id", "boundary", "fake-patched", "fake/good", "f.py", "w", "a", "b", ""
    )
    path = run.write_matrix(
        m,
        [run._Entry(mutant, "fake-patched.mut-0123456789", patch)],
        tmp_path / "d" / "matrix.yaml",
    )
    text = path.read_text()
    assert "&id" not in text and "*id" not in text
    derived = matrix.load(path)
    arm = derived.arms["fake-patched.mut-0123456789"]
    assert (
        arm.patches == (*m.arms["fake-patched"].patches, patch.resolve())
        and arm.baseline == "fake-stock"
        and arm.role == "patched"
    )
    assert "fake-patched.mut-0123456789" in derived.modules["fake/good"].arms


def test_suite_order_follows_the_cost_table():
    from mlagate.gate import shard

    m = matrix.load(FIXTURES / "fake-mutate.yaml")
    opts = run.Options()
    bundled = run.suite_order(m, opts, shard.load_costs())
    assert bundled == ["l1_unchanged", "dispatch"]  # 0.7 s and 4 s a case in the shipped table
    flipped = shard.Costs({"dispatch": {"default": 0.1}, "l1_unchanged": {"default": 9.0}})
    assert run.suite_order(m, opts, flipped) == ["dispatch", "l1_unchanged"]
    assert run.suite_order(m, run.Options(suites=("dispatch",)), flipped) == ["dispatch"]


# --- the pool operators: a sparse indexer's pool-length guard and its rollback ----------------

POOLS = FIXTURES / "fakepool-tree"
POOL_MATRIX = FIXTURES / "fake-pool-mutate.yaml"
POOL_IDS = [
    "pool_guard_drop: min(self.topk // self.kpool, P) -> self.topk // self.kpool"
    " @ fakepool/models/pooled.py::PooledIndexer.__call__",
    "pool_no_trim: self.caches -> self.caches[:1] @ fakepool/models/cache.py::CacheList.trim",
    "pool_no_trim: self.offset -= n -> pass @ fakepool/models/cache.py::PoolCache.trim",
    "pool_no_trim: self.keys = self.keys[:, : self.offset] -> pass"
    " @ fakepool/models/cache.py::PoolCache.trim",
    "pool_no_trim: self.pooled = self.pooled[:, : self.offset // self.kpool] -> pass"
    " @ fakepool/models/cache.py::PoolCache.trim",
]


def _pool_mutants(site, ops=operators.POOL_OPERATORS):
    return operators.generate(
        "fakepool-patched", site, "fake/pooled", "fakepool.models.pooled", "PooledAttention", ops
    )


def test_pool_operators_find_the_guard_and_the_rollback_by_ast(tmp_path):
    """The indexer's `min(top-k, pools)`; the pool's class (PoolCache, not the latent's KVCache,
    found through make_cache's parameter defaults) and the CacheList that trims both."""
    site = tmp_path / "site"
    shutil.copytree(POOLS, site)
    mutants = _pool_mutants(site)
    assert [m.id for m in mutants] == POOL_IDS
    assert {m.module for m in mutants} == {"fake/pooled"}
    models = site / "fakepool" / "models"
    for name in ("pooled.py", "cache.py"):  # lines move: the ids stay
        (models / name).write_text("# shifted\n\n\n" + (models / name).read_text())
    assert [m.id for m in _pool_mutants(site)] == POOL_IDS
    for i, m in enumerate(_pool_mutants(site)):
        copy = tmp_path / f"m{i}"
        shutil.copytree(site, copy)
        (tmp_path / f"m{i}.patch").write_text(m.patch)
        subprocess.run(["git", "apply", "-p1", str(tmp_path / f"m{i}.patch")], cwd=copy, check=True)
        compile((copy / m.file).read_text(), m.file, "exec")
        removed = [ln for ln in m.patch.splitlines() if ln.startswith("-") and ln[:3] != "---"]
        assert len(removed) == 1
    assert [m.operator for m in _pool_mutants(site, ["pool_guard_drop"])] == ["pool_guard_drop"]


def _write_tree(site: Path, files: dict[str, str]) -> None:
    for rel, body in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)


SHARED_CACHE = """
class KVCache:
    def trim(self, n):
        self.offset -= n
        return n


class CacheList:
    def __init__(self, *caches):
        self.caches = caches

    def trim(self, n):
        for c in self.caches:
            c.trim(n)
        return n
"""
BASE_ATTENTION = """
class Indexer:
    def __call__(self, x, cache=None):
        k = cache.update_and_fetch(x)
        if k.shape[2] <= self.index_topk:
            return None
        if self.index_topk > 4:
            self.note = 1
        return k.argpartition(kth=-self.index_topk)


class BaseAttention:
    def __init__(self, args):
        self.indexer = Indexer(args)

    def __call__(self, x, cache=None):
        index_cache = cache[1]
        return self.indexer(x, cache=index_cache)
"""


def test_pool_operators_follow_imports_and_skip_what_is_not_there(tmp_path):
    """The indexer set in a base class of another file; a pool sharing the latent's class rolls
    back only through the container; a shared file is mutated once, with the first module."""
    site = tmp_path / "site"
    _write_tree(
        site,
        {
            "rt/__init__.py": "",
            "rt/models/__init__.py": "",
            "rt/models/cache.py": SHARED_CACHE,
            "rt/models/base.py": BASE_ATTENTION,
            "rt/models/a.py": "from .base import BaseAttention\nfrom .cache import CacheList, "
            "KVCache\n\n\nclass A(BaseAttention):\n    pass\n\n\nclass Model:\n"
            "    def make_cache(self):\n        return [CacheList(KVCache(), KVCache())]\n",
            "rt/models/b.py": "from .a import A as B\n",  # the same classes again
            "rt/models/dense.py": "class D:\n    def __init__(self):\n        self.indexer = None"
            "\n\n    def __call__(self, x, cache=None):\n        return x\n",
        },
    )
    mods = [("rt/a", "rt.models.a", "A"), ("rt/dense", "rt.models.dense", "D")]
    mutants = operators.generate_many("a", site, mods, operators.POOL_OPERATORS)
    assert [(m.module, m.id) for m in mutants] == [
        (
            "rt/a",
            "pool_guard_drop: k.shape[2] <= self.index_topk -> False"
            " @ rt/models/base.py::Indexer.__call__",
        ),
        (
            "rt/a",
            "pool_no_trim: self.caches -> self.caches[:1] @ rt/models/cache.py::CacheList.trim",
        ),
    ]  # KVCache.trim is the latent's too: no pool_no_trim there; `> 4` sets, it returns nothing
    assert "-        if k.shape[2] <= self.index_topk:\n+        if False:" in mutants[0].patch
    twice = [("rt/a", "rt.models.a", "A"), ("rt/a2", "rt.models.a", "A")]
    again = operators.generate_many("a", site, twice, operators.POOL_OPERATORS)
    assert [m.module for m in again] == ["rt/a", "rt/a"]  # made once, run with the first module
    assert operators.generate("a", site, "rt/a", "rt.models.a", "A", ["boundary"]) == []


def test_pool_equivalence_argument_matches_the_fixture():
    m = matrix.load(POOL_MATRIX)
    mutants = _pool_mutants(POOLS)
    assert [x.id for x in mutants if run.equivalent_reason(m, x)] == POOL_IDS[:1]


@pytest.mark.mutate
def test_pool_no_trim_mutants_are_killed_by_trim_after_rejection(tmp_path):
    """Every pool_no_trim mutant of the fake pooled runtime fails trim_after_rejection (a stale
    pool, stale index keys, a cursor that never moves back, or a CacheList that trims only the
    latent); the pool_guard_drop mutant is argued equivalent in the fixture matrix."""
    out = tmp_path / "out"
    proc = execute_cli(
        "mutate", "--matrix", POOL_MATRIX, "--out", out, "-n", "2",
        "--operator", "pool_guard_drop", "--operator", "pool_no_trim", cache=tmp_path / "cache",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = killmatrix.load(out / "kill-matrix.json")
    status = {m["id"]: (m["status"], m.get("killed_by")) for m in doc["mutants"]}
    assert status[POOL_IDS[0]][0] == "equivalent"
    for mid in POOL_IDS[1:]:
        assert status[mid] == ("killed", ["trim_after_rejection"]), mid
    assert doc["counts"]["killed"] == 4 and doc["counts"]["total"] == 5


def test_a_parent_failing_with_known_kinds_is_a_control_for_new_kinds():
    """A case the parent fails with known kinds (serving_batched's expected not_expressible)
    kills a mutant that fails it with a kind the parent's fail does not name; the same kinds
    kill nothing (the gate's changed failure, not its as-before fail)."""

    class Inst:
        key = "k"

    parents = [type("C", (), {"arm": "p", "id": f"s::m::p::{g}"})() for g in ("a", "b")]
    mine = [type("C", (), {"arm": "x", "id": f"s::m::x::{g}"})() for g in ("a", "b")]
    exp = run._Expected(Path("/nonexistent/expected.json"))
    fail = {"verdict": "fail", "failure": {"kinds": ["not_expressible"]}}
    exp.put("k", "s::m::p::a", run._outcome(fail))
    exp.put("k", "s::m::p::b", run._outcome(fail))
    assert exp.get("k", "s::m::p::a") == "fail:not_expressible"
    e = run._Entry(None, "x", Path("p"))
    rows = {"s::m::x::a": fail, "s::m::x::b": {"verdict": "pass"}}
    run._classify(e, "s", parents, mine, rows, exp, {"p": Inst()})
    assert (e.killed_by, e.controls) == ([], 2)
    rows["s::m::x::a"] = {"verdict": "fail", "failure": {"kinds": ["batch_row_mismatch"]}}
    run._classify(e, "s", parents, mine, rows, exp, {"p": Inst()})
    assert e.killed_by == ["s"]
