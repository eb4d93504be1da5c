"""gate.yml run for real under act (tests/gha.py): plan -> shards -> gate -> publish.

Each case runs the whole workflow in a throwaway copy of this repository whose matrix.yaml is
tests/fixtures/gate/matrix.yaml (the fake runtime, one patched arm, the dispatch and
marginal_cost suites, planned for this machine's Linux runner labels) and whose origin is a
local bare repository. The performance job runs with the repository variable
MLAGATE_PERF_HEALTH=warn: this shared machine is never idle enough for the strict health check.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import gha
from tests.conftest import FIXTURES
from tests.fakert import fake_tree

pytestmark = [
    pytest.mark.workflow,
    pytest.mark.skipif(gha.unavailable() is not None, reason=str(gha.unavailable())),
]

PERF_WARN = {"MLAGATE_PERF_HEALTH": "warn"}
FORK_MESSAGE = "gate not run: pull request from a fork"
# planted defect: the unpatched tree (L == 1 guards) as a patched arm
DEFECT_ARM = """  fake-unfixed:
    runtime: fakemla  # runtime
    path: fakemla-tree  # source tree
    role: patched  # role
"""
DEPLOY = "        uses: actions/deploy-pages@"


@pytest.fixture
def gate_repo(tmp_path) -> gha.Repo:
    repo = gha.Repo(tmp_path)
    gha.copy_project(repo.path)
    shutil.copy(FIXTURES / "gate" / "matrix.yaml", repo.path / "matrix.yaml")
    shutil.copy(FIXTURES / "fake-fix.patch", repo.path / "fake-fix.patch")
    fake_tree(repo.path / "fakemla-tree")
    repo.commit("main")
    repo.git("push", "--quiet", "origin", "main")
    return repo


def pull_request(
    repo: gha.Repo, change=None, head_repo: str = gha.SERVER_REPO, artifacts: Path | None = None
) -> gha.ActRun:
    base = repo.git("rev-parse", "main")
    repo.git("checkout", "--quiet", "-b", "feature")
    if change:
        change(repo.path)
    head = repo.commit("the pull request")
    payload = {
        "pull_request": {
            "number": 7,
            "head": {"ref": "feature", "sha": head, "repo": {"full_name": head_repo}},
            "base": {"ref": "main", "sha": base, "repo": {"full_name": gha.SERVER_REPO}},
        }
    }
    return repo.act(
        "pull_request", payload, artifacts or repo.path.parent / "artifacts", variables=PERF_WARN
    )


def report(run: gha.ActRun, dest: Path) -> dict:
    """The gate's report artifact: merge.json and the commit's merged.json."""
    gate = run.artifact("report", dest)
    merged = next((gate / "site").glob("*/merged.json"))
    return {
        "merge": json.loads((gate / "merged" / "merge.json").read_text()),
        "merged": json.loads(merged.read_text()),
    }


def verdicts(doc: dict) -> dict[str, str]:
    return {r["case_id"]: r["verdict"] for r in doc["merged"]["results"]}


CASE_DISPATCH = "dispatch::fake/good::{arm}::tiny::float32::cpu"
CASE_COST = "marginal_cost::fake/good::{arm}::tiny::float32::cpu"


def test_a_pull_request_on_clean_main_is_green(gate_repo, tmp_path):
    run = pull_request(gate_repo)
    assert run.jobs == {
        "plan": "success",
        "correctness": "success",
        "performance": "success",
        "gate": "success",
    }, run.log[-3000:]
    summary = run.summary("gate")
    assert (
        "## mlagate gate" in summary
        and "**gate green: 2 as expected" in summary
        and "2 passed, 0 failed, 0 invalid" in summary
    ), summary
    doc = report(run, tmp_path / "report")
    assert verdicts(doc) == {
        CASE_DISPATCH.format(arm="fake-patched"): "pass",
        CASE_COST.format(arm="fake-patched"): "pass",
    }
    assert not doc["merge"]["missing"], doc["merge"]
    for job in ("correctness", "performance"):  # the runner tooling ran on this machine's labels
        log = run.job_log(job)
        assert "mlagate health: Linux" in log and "cleanup: done" in log, log[-2000:]


def test_a_pull_request_adding_a_defective_arm_is_red_and_named(gate_repo, tmp_path):
    def add_arm(path: Path):
        text = (path / "matrix.yaml").read_text()
        (path / "matrix.yaml").write_text(
            text.replace("arms:  # arms\n", "arms:  # arms\n" + DEFECT_ARM, 1)
        )

    run = pull_request(gate_repo, add_arm)
    assert run.jobs["plan"] == "success" and run.jobs["gate"] == "failure", run.jobs
    assert run.jobs["correctness"] == "failure", "the shard that ran the failing case fails"
    bad = CASE_DISPATCH.format(arm="fake-unfixed")
    assert re.search(
        r"^regression +fail +dispatch +fake/good +fake-unfixed ", run.summary("gate"), re.M
    ), run.summary("gate")
    found = verdicts(report(run, tmp_path / "report"))
    assert found[bad] == "fail" and found[CASE_DISPATCH.format(arm="fake-patched")] == "pass", found


def fork_case_problems(run: gha.ActRun) -> list[str]:
    """What is wrong with a fork pull request's run (empty when the gate held)."""
    problems = [
        f"self-hosted job {job} ran ({run.jobs[job]})"
        for job in ("correctness", "performance")
        if run.jobs.get(job) not in (None, "skipped")
    ]
    if run.jobs.get("gate") != "failure":
        problems.append(f"gate ended {run.jobs.get('gate')}")
    if FORK_MESSAGE not in run.summary("gate"):
        problems.append("no fork message in the gate's summary")
    return problems


def test_a_fork_pull_request_runs_nothing_self_hosted(gate_repo):
    run = pull_request(gate_repo, head_repo="someone/mlagate-fork")
    assert run.jobs["plan"] == "success", run.jobs
    assert fork_case_problems(run) == [], run.log[-3000:]
    assert not list(run.artifacts.glob("*/report/*.zip")), "a fork's gate publishes no report"


def test_dropping_the_head_repository_check_lets_a_fork_run_self_hosted(gate_repo):
    """The mutation of gate.yml's fork condition that the fork case must catch."""

    def mutate(path: Path):
        wf = path / ".github" / "workflows" / "gate.yml"
        check = " || github.event.pull_request.head.repo.full_name == github.repository)"
        text = wf.read_text()
        assert text.count(check) == 2, (
            "the shard jobs' fork condition changed: update this mutation"
        )
        wf.write_text(text.replace(check, " || true)"))

    run = pull_request(gate_repo, mutate, head_repo="someone/mlagate-fork")
    assert "self-hosted job correctness ran (success)" in fork_case_problems(run), run.jobs


def test_a_shard_job_that_dies_leaves_its_cases_missing(gate_repo, tmp_path):
    def kill_correctness(path: Path):
        script = path / "runners" / "setup-venv.sh"
        text = script.read_text().replace(
            "set -euo pipefail\n",
            'set -euo pipefail\nif [ "${GITHUB_JOB:-}" = correctness ]; then kill -KILL $$; fi\n',
            1,
        )
        script.write_text(text)

    run = pull_request(gate_repo, kill_correctness)
    assert run.jobs["correctness"] == "failure" and run.jobs["performance"] == "success", run.jobs
    assert run.jobs["gate"] == "failure", run.jobs
    lost = CASE_DISPATCH.format(arm="fake-patched")
    assert re.search(rf"^missing +linux-cpu::{re.escape(lost)}", run.summary("gate"), re.M), (
        run.summary("gate")
    )
    doc = report(run, tmp_path / "report")
    assert verdicts(doc) == {CASE_COST.format(arm="fake-patched"): "pass"}
    assert any(lost in str(m) for m in doc["merge"]["missing"]), doc["merge"]


def pages(repo: gha.Repo) -> list[str]:
    """The commit folders on the origin's gh-pages branch."""
    names = repo.git("ls-tree", "--name-only", "gh-pages", cwd=repo.origin).split()
    return sorted(n for n in names if len(n) == 40)


def test_pushes_to_main_publish_and_append_the_history(gate_repo, tmp_path):
    # deploy-pages talks to the Pages API, which cannot run offline: only that step is replaced
    wf = gate_repo.path / ".github" / "workflows" / "gate.yml"
    text = wf.read_text()
    start = text.index(DEPLOY)
    end = text.index("\n", start)
    wf.write_text(
        text[:start] + "        run: echo 'deploy-pages stand-in (offline test)'" + text[end:]
    )
    shas = []
    for n in (1, 2):
        shas.append(gate_repo.commit(f"main {n}"))
        gate_repo.git("push", "--quiet", "origin", "main")
        payload = {
            "ref": "refs/heads/main",
            "after": shas[-1],
            "repository": {"full_name": gha.SERVER_REPO},
        }
        run = gate_repo.act("push", payload, tmp_path / f"artifacts-{n}", variables=PERF_WARN)
        assert run.jobs.get("publish") == "success" and run.jobs["gate"] == "success", (
            run.jobs,
            run.log[-3000:],
        )
        assert pages(gate_repo) == sorted(shas), f"push {n}: gh-pages holds {pages(gate_repo)}"
        # the shard's result store (vars.MLAGATE_STORE): the first push writes it, the second
        # push of the same tree takes the case from it
        taken = "reuse: 1 of 1 cases taken from" if n == 2 else "reuse: 0 of 1 cases taken from"
        assert taken in run.job_log("correctness"), run.job_log("correctness")[-3000:]
    index = gate_repo.git("show", "gh-pages:index.html", cwd=gate_repo.origin)
    assert all(sha[:7] in index for sha in shas), "the history index lists both commits"


# A fleet's git result store (issue 44): two runners, each an act run of its own with its own
# arm cache and act workspaces, sharing one local bare origin as the store.


def results_store(where: Path) -> str:
    bare = where / "results.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    subprocess.run(["git", "-C", str(bare), "config", "uploadpack.allowFilter", "true"], check=True)
    return f"git+file://{bare}"


def store_keys(spec: str) -> list[str]:
    bare = spec.removeprefix("git+file://")
    found = subprocess.run(
        ["git", "--git-dir", bare, "ls-tree", "-r", "--name-only", "mlagate-results", "results/"],
        capture_output=True, text=True,
    )  # fmt: skip
    return sorted(Path(p).stem for p in found.stdout.split())


def store_tip(spec: str) -> str:
    bare = spec.removeprefix("git+file://")
    return subprocess.run(
        ["git", "--git-dir", bare, "rev-parse", "mlagate-results"], capture_output=True, text=True
    ).stdout.strip()


def no_deploy(repo: gha.Repo) -> None:
    """deploy-pages talks to the Pages API, which cannot run offline: that step is replaced."""
    wf = repo.path / ".github" / "workflows" / "gate.yml"
    text = wf.read_text()
    start = text.index(DEPLOY)
    end = text.index("\n", start)
    wf.write_text(text[:start] + "        run: echo 'deploy-pages stand-in'" + text[end:])


def push_main(repo: gha.Repo, store: str, cache: Path, artifacts: Path) -> gha.ActRun:
    sha = repo.commit("main")
    repo.git("push", "--quiet", "origin", "main")
    payload = {"ref": "refs/heads/main", "after": sha, "repository": {"full_name": gha.SERVER_REPO}}
    return repo.act(
        "push", payload, artifacts, env={"MLAGATE_CACHE": str(cache)},
        variables={**PERF_WARN, "MLAGATE_STORE": store},
    )  # fmt: skip


def pr_on(repo: gha.Repo, store: str, cache: Path, artifacts: Path) -> gha.ActRun:
    base = repo.git("rev-parse", "main")
    payload = {
        "pull_request": {
            "number": 8,
            "head": {"ref": "main", "sha": base, "repo": {"full_name": gha.SERVER_REPO}},
            "base": {"ref": "main", "sha": base, "repo": {"full_name": gha.SERVER_REPO}},
        }
    }
    return repo.act(
        "pull_request", payload, artifacts, env={"MLAGATE_CACHE": str(cache)},
        variables={**PERF_WARN, "MLAGATE_STORE": store},
    )  # fmt: skip


def test_a_pull_request_on_runner_b_reuses_what_runner_a_measured(gate_repo, tmp_path):
    store = results_store(tmp_path)
    no_deploy(gate_repo)
    a = push_main(gate_repo, store, tmp_path / "cache-a", tmp_path / "art-a")
    assert a.jobs.get("store") == "success" and a.jobs["gate"] == "success", (a.jobs, a.log[-3000:])
    stored = store_keys(store)
    assert len(stored) == 1, stored  # dispatch's pass; a timing from this unfit machine never
    assert "published 1 entries in one commit" in a.job_log("store"), a.job_log("store")[-2000:]
    tip = store_tip(store)

    b = pr_on(gate_repo, store, tmp_path / "cache-b", tmp_path / "art-b")
    assert b.jobs["gate"] == "success" and b.jobs.get("store") in (None, "skipped"), b.jobs
    log = b.job_log("correctness")
    assert "reuse: 1 of 1 cases taken from git+file://" in log and "0 to measure" in log, log[
        -3000:
    ]
    assert store_tip(store) == tip, "a pull request's run moved the store's ref"

    clone = tmp_path / "tamper"
    subprocess.run(
        ["git", "clone", "-q", "-b", "mlagate-results", store[4:], str(clone)], check=True
    )
    entry = next(clone.glob("results/*/*.json"))
    data = json.loads(entry.read_text())
    data["result"]["verdict"] = "fail"
    entry.write_text(json.dumps(data))
    for args in (["commit", "-qam", "forged"], ["push", "-q", "origin", "mlagate-results"]):
        subprocess.run(["git", "-c", "user.name=x", "-c", "user.email=x@x", *args], cwd=clone,
                       check=True)  # fmt: skip
    c = pr_on(gate_repo, store, tmp_path / "cache-b", tmp_path / "art-c")
    log = c.job_log("correctness")
    assert f"{entry.stem}.json: ignored: its result does not match its sha256" in log, log[-3000:]
    assert "reuse: 0 of 1 cases taken" in log and c.jobs["gate"] == "success", c.jobs


def test_two_runners_publishing_at_once_both_land(tmp_path):
    store = results_store(tmp_path)
    repos = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        repo = gha.Repo(tmp_path / name)
        gha.copy_project(repo.path)
        shutil.copy(FIXTURES / "gate" / "matrix.yaml", repo.path / "matrix.yaml")
        shutil.copy(FIXTURES / "fake-fix.patch", repo.path / "fake-fix.patch")
        fake_tree(repo.path / "fakemla-tree")
        if name == "b":  # another runtime file: other keys, so both runs have entries to add
            model = repo.path / "fakemla-tree" / "fakemla" / "models" / "base.py"  # good imports
            model.write_text(model.read_text() + "\n# runner b's tree\n")
        no_deploy(repo)
        repos.append(repo)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(
            lambda r: push_main(r, store, r.path.parent / "cache", r.path.parent / "art"), repos
        ))  # fmt: skip
    for run in runs:
        assert run.jobs.get("store") == "success", (run.jobs, run.job_log("store")[-2000:])
    assert len(store_keys(store)) == 2, store_keys(store)  # one each, neither lost
