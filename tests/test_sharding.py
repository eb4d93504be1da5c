"""Sharding: N shards run as separate processes and merged give the unsharded run's verdicts, each
case once."""

import json
import shutil
from pathlib import Path

import pytest

from mlagate.gate import shard
from mlagate.plan import Case
from tests.conftest import FIXTURES, cli

PERF_SUITE = """  marginal_cost:  # marginal cost
    kind: performance  # kind
    modules: [fake/fixed, fake/good]  # two modules keep it quick
    # far from both sides (about 0.6 fixed, 9.7 stock here), so noise cannot flip a verdict
    gates: {widths: [1, 2], max_relative: 4, samples: 9, max_samples: 21, confidence: 0.95,
            budget_s: {quick: 120}}
runners:  # runners
"""


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """The fake correctness matrix plus one performance suite, its unsharded run, and its arm
    cache."""
    root = tmp_path_factory.mktemp("sharding")
    for name in ("fakemla-tree", "fake-fix.patch", "fake-nudge.patch"):
        src = FIXTURES / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / name)
    matrix = root / "matrix.yaml"
    matrix.write_text(
        (FIXTURES / "fake-correctness.yaml")
        .read_text()
        .replace("runners:  # runners\n", PERF_SUITE)
    )
    cache = root / "cache"
    proc = cli("run", "--matrix", matrix, "--out", root / "whole", cache=cache)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the fake runtime has planted defects
    return root, matrix, cache


def _verdicts(out):
    rows = [json.loads(p.read_text()) for p in sorted((out / "results").glob("*.json"))]
    ids = [r["case_id"] for r in rows]
    assert len(ids) == len(set(ids)), "a case has two result files"
    return {r["case_id"]: r["verdict"] for r in rows}


def _same_verdicts(got, want):
    """Equal maps, except that a timed (performance) case may be invalid in one run and decided in
    the other.

    Timing verdicts on this shared 2-core machine are noisy: two unsharded runs disagree as
    often (an inconclusive interval makes a case invalid). A decided pass in one run and a
    decided fail in the other is still a mismatch, and so is any correctness difference.
    """
    assert set(got) == set(want)
    for cid in want:
        if got[cid] != want[cid]:
            timed = cid.startswith("marginal_cost::") and "invalid" in (got[cid], want[cid])
            assert timed, f"{cid}: {got[cid]} sharded, {want[cid]} unsharded"


def _manifest(out):
    return json.loads((out / "manifest.json").read_text())


def test_n_shards_merged_give_the_unsharded_verdicts_each_case_once(both):
    root, matrix, cache = both
    whole = _verdicts(root / "whole")
    kinds = {c.split("::")[0] for c in whole}
    assert (
        "marginal_cost" in kinds
        and "equivalence" in kinds
        and len(whole) == len(_manifest(root / "whole")["cases"])
    )
    dirs = []
    for i in (1, 2, 3):
        out = root / f"shard{i}"
        proc = cli("run", "--matrix", matrix, "--shard", f"{i}/3", "--out", out, cache=cache)
        assert proc.returncode in (0, 1, 3), proc.stdout + proc.stderr
        dirs.append(out)
    assigned = [cid for d in dirs for cid in _manifest(d)["cases"]]
    assert sorted(assigned) == sorted(whole), "the shards do not partition the plan"
    assert len({_manifest(d)["plan"] for d in dirs}) == 1
    perf_shards = {
        i
        for i, d in enumerate(dirs)
        if any(c.startswith("marginal_cost::") for c in _manifest(d)["cases"])
    }
    assert len(perf_shards) == 1, "performance cases were split across shards"
    for d in dirs:
        assert set(_verdicts(d)) == set(_manifest(d)["cases"]), (
            f"{d.name} ran other cases than it was assigned"
        )

    proc = cli("merge", *dirs, "--out", root / "merged")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # planted defects fail
    _same_verdicts(_verdicts(root / "merged"), whole)
    merged = json.loads((root / "merged" / "merge.json").read_text())
    assert merged["missing"] == [] and merged["missing_shards"] == [] and merged["unplanned"] == []


def test_the_gate_jobs_of_the_plan_merged_give_the_unsharded_verdicts(both):
    root, matrix, cache = both
    proc = cli(
        "plan",
        "--matrix",
        matrix,
        "--format",
        "github",
        "--shards",
        "2",
        "--runner",
        "linux-cpu",
        "--manifest",
        root / "plan.json",
        cache=cache,
    )
    assert proc.returncode == 0, proc.stderr
    outputs = dict(line.split("=", 1) for line in proc.stdout.splitlines())
    correctness, performance = (
        json.loads(outputs["correctness"])["include"],
        json.loads(outputs["performance"])["include"],
    )
    assert [j["shard"] for j in correctness] == ["1/2", "2/2"] and [
        j["shard"] for j in performance
    ] == ["1/1"]
    assert outputs["correctness_jobs"] == "2" and outputs["performance_jobs"] == "1"
    assert (
        int(outputs["cases"])
        == sum(j["cases"] for j in correctness + performance)
        == len(_verdicts(root / "whole"))
    )
    plan = json.loads((root / "plan.json").read_text())
    dirs = []
    for job in correctness + performance:
        out = root / job["artifact"]
        proc = cli(
            "run",
            "--matrix",
            matrix,
            "--runner",
            job["runner"],
            "--profile",
            job["profile"],
            "--backend",
            job["backend"],
            "--kind",
            job["kind"],
            "--shard",
            job["shard"],
            "--out",
            out,
            cache=cache,
        )
        assert proc.returncode in (0, 1, 3), proc.stdout + proc.stderr
        planned = next(j["case_ids"] for j in plan["jobs"] if j["artifact"] == job["artifact"])
        assert _manifest(out)["cases"] == planned, "a job ran other cases than the plan gave it"
        dirs.append(out)
    proc = cli("merge", *dirs, "--out", root / "gate-merged", "--plan", root / "plan.json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    _same_verdicts(_verdicts(root / "gate-merged"), _verdicts(root / "whole"))


def test_merge_refuses_a_duplicate_and_reports_a_missing_shard(fake_matrix, fake_cache, tmp_path):
    dirs = []
    for i in (1, 2):
        out = tmp_path / f"s{i}"
        proc = cli(
            "run", "--matrix", fake_matrix, "--shard", f"{i}/2", "--out", out, cache=fake_cache
        )
        assert proc.returncode in (0, 1, 3), proc.stdout + proc.stderr
        dirs.append(out)
    first = sorted((dirs[0] / "results").glob("*.json"))[0]
    copy = tmp_path / "copy"
    (copy / "results").mkdir(parents=True)
    shutil.copy(first, copy / "results" / "again.json")
    proc = cli("merge", dirs[0], dirs[1], copy, "--out", tmp_path / "m")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert str(first) in proc.stderr and str(copy / "results" / "again.json") in proc.stderr
    assert not (tmp_path / "m").exists(), "a refused merge wrote something"

    proc = cli("merge", dirs[0], dirs[1], "--out", dirs[1])
    assert proc.returncode == 2 and "is not empty: merge into a new directory" in proc.stderr

    proc = cli("merge", dirs[0], "--out", tmp_path / "half")
    assert proc.returncode in (1, 3), proc.stdout + proc.stderr
    assert "missing shard 2/2 of runner linux-cpu" in proc.stdout
    plan_ids = json.loads((dirs[1] / "manifest.json").read_text())["cases"]
    half = json.loads((tmp_path / "half" / "merge.json").read_text())
    assert half["missing_shards"] and set(plan_ids).isdisjoint(
        r.split("::", 1)[1] for r in half["missing"]
    )

    whole = cli(
        "plan",
        "--matrix",
        fake_matrix,
        "--format",
        "github",
        "--shards",
        "2",
        "--runner",
        "linux-cpu",
        "--manifest",
        tmp_path / "plan.json",
        cache=fake_cache,
    )
    assert whole.returncode == 0, whole.stderr
    proc = cli("merge", dirs[0], "--out", tmp_path / "planned", "--plan", tmp_path / "plan.json")
    missing = json.loads((tmp_path / "planned" / "merge.json").read_text())["missing"]
    assert sorted(m.split("::", 1)[1] for m in missing) == sorted(plan_ids)
    for cid in plan_ids:
        assert f"missing {'':17}linux-cpu::{cid}" in proc.stdout

    crashed = (
        tmp_path / "crashed"
    )  # a shard that died before its first result: a manifest, no results/
    crashed.mkdir()
    shutil.copy(dirs[1] / "manifest.json", crashed / "manifest.json")
    proc = cli("merge", dirs[0], crashed, "--out", tmp_path / "with-crashed")
    assert proc.returncode in (1, 3) and not proc.stderr, proc.stdout + proc.stderr
    assert set(json.loads((tmp_path / "with-crashed" / "merge.json").read_text())["missing"]) == {
        f"linux-cpu::{cid}" for cid in plan_ids
    }


@pytest.mark.parametrize("spec", ["3/2", "0/2", "x", "1/0", "2"])
def test_a_bad_shard_spec_is_a_one_line_usage_error(fake_matrix, fake_cache, tmp_path, spec):
    proc = cli(
        "run", "--matrix", fake_matrix, "--shard", spec, "--out", tmp_path / "o", cache=fake_cache
    )
    assert (
        proc.returncode == 2
        and proc.stderr.startswith("mlagate: error: --shard: expected I/N")
        and proc.stderr.count("\n") == 1
    )


def _case(suite, module, i=0, evidence="synthetic"):
    return Case(suite, module, "arm", f"g{i}", "float32", "cpu", "quick", "linux-cpu", evidence)


def test_assignment_is_deterministic_balanced_and_a_partition():
    costs = shard.Costs(
        {
            "slow": {"default": 10.0, "modules": {"m/big": 40.0}},
            "fast": {"default": 1.0},
            "perf": {"default": 5.0},
        }
    )
    kinds = {"slow": "correctness", "fast": "correctness", "perf": "performance"}
    cases = (
        [_case("slow", "m/big")]
        + [_case("slow", "m/x", i) for i in range(6)]
        + [_case("fast", "m/x", i) for i in range(10)]
    )
    cases += [_case("perf", "m/x", i) for i in range(3)] + [_case("slow", "m/x", 99, "argued")]
    parts = shard.assign(cases, 3, kinds, costs)
    assert parts == shard.assign(list(cases), 3, kinds, costs)
    assert sorted(c.id for p in parts for c in p) == sorted(c.id for c in cases)
    loads = [sum(costs.of(c) for c in p) for p in parts]
    assert max(loads) - min(loads) <= 10.0, (
        loads
    )  # LPT: within one ordinary unit of each other (the 40 s case sits alone)
    assert sum(any(c.suite == "perf" for c in p) for p in parts) == 1
    assert costs.of(cases[-1]) == 0.0 and costs.of(_case("new", "m/x")) == shard.UNKNOWN_COST_S
    assert [len(p) for p in shard.assign(cases[:2], 4, kinds, costs)].count(0) == 2


def test_costs_are_derived_from_results_on_disk(tmp_path, run_cli):
    rows = [
        {
            "suite": "s",
            "module": m,
            "verdict": v,
            "duration_s": d,
            "runner": "linux-cpu",
            "profile": "quick",
        }
        for m, v, d in (
            ("a", "pass", 1.0),
            ("a", "fail", 3.0),
            ("b", "pass", 10.0),
            ("b", "argued", 0.0),
        )
    ]
    table = shard.derive_costs(rows)
    assert table["suites"]["s"] == {"default": 3.0, "modules": {"a": 2.0, "b": 10.0}}
    bundled = shard.load_costs()
    assert {
        "probes",
        "threshold",
        "dispatch",
        "l1_unchanged",
        "equivalence",
        "marginal_cost",
        "crossover",
        "l1_parity",
        "serving_batched",
        "serving_quantized",
        "serving_prompt_reuse",
    } <= set(bundled.suites)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(shard.ShardError, match="bad.json"):
        shard.load_costs(tmp_path / "bad.json")


@pytest.mark.arms
def test_the_shipped_gate_plans_the_macos_runner(real_cache, tmp_path):
    proc = cli(
        "plan",
        "--format",
        "github",
        "--shards",
        "4",
        "--manifest",
        tmp_path / "plan.json",
        cache=real_cache,
    )
    assert proc.returncode == 0, proc.stderr
    outputs = dict(line.split("=", 1) for line in proc.stdout.splitlines())
    correctness, performance = (
        json.loads(outputs["correctness"])["include"],
        json.loads(outputs["performance"])["include"],
    )
    assert len(correctness) == 4 and len(performance) == 1
    assert all(
        j["runner"] == "macos-metal" and j["profile"] == "full" and j["backend"] == "metal"
        for j in correctness + performance
    )
    assert correctness[0]["runs_on"] == ["self-hosted", "macOS", "ARM64", "mlagate"]
    assert performance[0]["runs_on"] == ["self-hosted", "macOS", "ARM64", "mlagate-perf"]
    listed = cli(
        "plan",
        "--runner",
        "macos-metal",
        "--profile",
        "full",
        "--backend",
        "metal",
        "--format",
        "json",
        cache=real_cache,
    )
    assert int(outputs["cases"]) == len(json.loads(listed.stdout))
    costs = [j["cost_s"] for j in correctness]
    assert max(costs) - min(costs) <= max(costs) * 0.2, costs


def test_the_gate_plan_refuses_an_unregistered_module_and_bad_options(fake_matrix, fake_cache):
    text = fake_matrix.read_text()
    start, end = text.index("  fake/opaque:"), text.index("checkpoints:")
    fake_matrix.write_text(text[:start] + text[end:])
    proc = cli(
        "plan",
        "--matrix",
        fake_matrix,
        "--format",
        "github",
        "--runner",
        "linux-cpu",
        cache=fake_cache,
    )
    assert (
        proc.returncode == 2
        and "fakemla.models.opaque:OpaqueAttention" in proc.stderr
        and proc.stderr.count("\n") == 1
    )
    proc = cli("plan", "--matrix", fake_matrix, "--format", "github", cache=fake_cache)
    assert proc.returncode == 2 and "no runner has gate: true" in proc.stderr
    proc = cli("plan", "--matrix", fake_matrix, "--shards", "2", cache=fake_cache)
    assert proc.returncode == 2 and "--shards and --manifest go with --format github" in proc.stderr


def test_a_shard_the_plan_left_empty_is_not_missing(tmp_path):
    from mlagate import results
    from mlagate.gate import merge

    def shard_dir(i: int, case_id: str) -> Path:
        d = tmp_path / f"s{i}"
        (d / "results").mkdir(parents=True)
        (d / "manifest.json").write_text(
            json.dumps(
                {
                    "schema": "mlagate.manifest/1",
                    "runner": "linux-cpu",
                    "profile": "quick",
                    "backend": "cpu",
                    "shard": f"{i}/3",
                    "plan": "p",
                    "cases": [case_id],
                }
            )
        )
        suite, module, arm, geometry, dtype, backend = case_id.split("::")
        r = results.Result(
            case={
                "id": case_id,
                "suite": suite,
                "module": module,
                "arm": arm,
                "geometry": geometry,
                "dtype": dtype,
                "backend": backend,
                "profile": "quick",
                "runner": "linux-cpu",
            },
            verdict="pass",
            reason="ok",
            evidence="synthetic",
        )
        (d / "results" / "r.json").write_text(json.dumps(r.to_json()))
        return d

    ids = ["probes::m/a::arm::g::float32::cpu", "probes::m/b::arm::g::float32::cpu"]
    dirs = [shard_dir(1, ids[0]), shard_dir(2, ids[1])]
    jobs = [
        {"runner": "linux-cpu", "shard": f"{i}/3", "case_ids": cids}
        for i, cids in ((1, [ids[0]]), (2, [ids[1]]), (3, []))
    ]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"schema": "mlagate.plan/1", "jobs": jobs}))
    planned = merge.merge(dirs, tmp_path / "m1", plan)
    assert planned.missing_shards == [] and planned.exit_code == 0, planned.text()
    unplanned = merge.merge(dirs, tmp_path / "m2")
    assert unplanned.missing_shards and "3/3 of runner linux-cpu" in unplanned.missing_shards[0], (
        "without the plan an absent shard is reported"
    )


def test_a_malformed_manifest_or_plan_is_one_line_naming_the_key(tmp_path):
    from mlagate.gate import merge

    shard = tmp_path / "s1"
    (shard / "results").mkdir(parents=True)
    (shard / "manifest.json").write_text(
        json.dumps({"schema": "mlagate.manifest/1", "runner": "x"})
    )
    with pytest.raises(merge.MergeError, match=r"manifest\.json: <root>: missing key 'profile'"):
        merge.merge([shard], tmp_path / "o1")
    (shard / "manifest.json").write_text(
        json.dumps(
            {
                "schema": "mlagate.manifest/1",
                "runner": "x",
                "profile": "q",
                "shard": "1/1",
                "plan": "p",
                "cases": [],
            }
        )
    )
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"schema": "mlagate.plan/1", "jobs": [{"runner": "x"}]}))
    with pytest.raises(merge.MergeError, match=r"plan\.json: jobs\.0: missing key 'shard'"):
        merge.merge([shard], tmp_path / "o2", plan)


def test_costsplice_puts_fresh_suites_onto_the_shipped_scale():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "tools" / "costsplice.py"
    spec = importlib.util.spec_from_file_location("costsplice", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)

    def table(source, suites):
        return {
            "schema": "mlagate.costs/1",
            "source": source,
            "runners": [],
            "suites": {s: {"default": d, "modules": m} for s, (d, m) in suites.items()},
        }

    shipped = table("quiet", {"a": (1.0, {"x": 1.0, "y": 2.0}), "old": (5.0, {"x": 5.0})})
    fresh = table(
        "loaded",
        {"a": (3.0, {"x": 3.0, "y": 6.0}), "new": (9.0, {"x": 9.0}), "old": (30.0, {"x": 30.0})},
    )
    out, factor, count = tool.splice(shipped, fresh, ["new", "old"])
    assert (round(factor, 6), count) == (round(1 / 3, 6), 2)  # from suite a only
    assert out["suites"]["new"] == {"default": 3.0, "modules": {"x": 3.0}}
    assert out["suites"]["old"] == {"default": 10.0, "modules": {"x": 10.0}}
    assert out["suites"]["a"] == shipped["suites"]["a"]
    assert out["source"].startswith("quiet; new, old from loaded, times 0.33")
    with pytest.raises(ValueError, match="no suite gone"):
        tool.splice(shipped, fresh, ["gone"])
    with pytest.raises(ValueError, match="share no"):
        tool.splice(shipped, fresh, ["a", "new", "old"])


def test_every_shipped_suite_has_a_cost_entry():
    """A suite missing from the shipped cost table counts UNKNOWN_COST_S a case, whatever it
    costs: the shard estimates and balance go wrong without a word (serving_rotating did)."""
    from mlagate import matrix
    from tests.conftest import ROOT

    shipped = matrix.load(ROOT / "matrix.yaml")
    missing = sorted(set(shipped.suites) - set(shard.load_costs().suites))
    assert not missing, f"no cost entry in src/mlagate/gate/costs.json: {missing}"
