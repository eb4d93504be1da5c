"""A runtime repository's pull request runs mlagate's composite action (action.yml) under act.

The README's caller workflow, copied into a repository of mlx-lm 0.32.2's own files
(tests/realrt.py) with mlagate's shipped matrix: the threshold patch is green and says what it
fixes, an unrelated change is green and says what still fails as on main, `L == 1` put back
into one module of a fixed main is red and names that module's cases. A fake runtime
repository (tests/fakert.py) with a matrix of its own covers the `matrix` input. act serves
the action from a copy of this checkout.
"""

from __future__ import annotations

import re

import pytest
import yaml

from tests import fakert, gha
from tests.conftest import FIXTURES, ROOT
from tests.realrt import mlx_lm_repo

pytestmark = [
    pytest.mark.workflow,
    pytest.mark.skipif(gha.unavailable() is not None, reason=str(gha.unavailable())),
]

# a caller pins a commit; act maps this name to a copy of the checkout
ACTION = "mlagate-test/mlagate@v1"
CALLER = f"""name: mlagate
on: pull_request
permissions: {{}}
jobs:
  mlagate:
    runs-on: [self-hosted, Linux, X64, mlagate]
    permissions:
      contents: read
    steps:
      - uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683  # v4.2.2
        with:
          fetch-depth: 0  # the merge base must be in the clone
          persist-credentials: false
      - uses: actions/setup-python@a26af69be951a213d495a4c3e4e4022e16d87065  # v5.6.0
        with:
          python-version: "3.11"
      - uses: {ACTION}
        with:
          matrix: mlagate.yaml
"""


def readme_caller() -> str:
    """The caller workflow of README.md's "Gate a runtime repository's pull requests", with the
    action named as act serves it and a small run (the dispatch suite, one worker)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Gate a runtime repository's pull requests") :]
    workflow = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    assert "OWNER/mlagate@COMMIT" in workflow and "\n          args: " in workflow
    workflow = workflow.replace("OWNER/mlagate@COMMIT", ACTION)
    return re.sub(r"\n          args: [^\n]*", "\n          args: --suite dispatch -n 1", workflow)


def job_summary(run: gha.ActRun) -> str:
    """The job summary the action wrote (act logs it more than once: the first copy)."""
    text = run.summary("mlagate")
    second = text.find("## mlagate:", 1)
    return text if second < 0 else text[:second]


def mlx_lm_caller(where, change: str, cache) -> gha.Repo:
    repo = gha.Repo(where, "mlx-test/mlx-lm")
    mlx_lm_repo(repo.path, change, cache, repo.env)
    repo.git("checkout", "--quiet", "main")
    (repo.path / ".github" / "workflows").mkdir(parents=True)
    (repo.path / ".github" / "workflows" / "mlagate.yml").write_text(readme_caller())
    repo.commit("the mlagate gate")
    repo.git("push", "--quiet", "origin", "main")
    repo.git("checkout", "--quiet", "pr")
    repo.git("rebase", "--quiet", "main")
    return repo


def caller_repo(where, head: str) -> gha.Repo:
    repo = gha.Repo(where, "mlx-test/fakert")
    matrix = yaml.safe_load((FIXTURES / "gate" / "matrix.yaml").read_text())
    matrix["arms"] = {
        "fakert": {"runtime": "fakemla", "path": ".", "role": "stock"}
    }  # this checkout
    fakert.runtime_repo(repo.path, head, repo.env)
    repo.git("checkout", "--quiet", "main")
    (repo.path / "mlagate.yaml").write_text(yaml.safe_dump(matrix, sort_keys=False))
    (repo.path / ".github" / "workflows").mkdir(parents=True)
    (repo.path / ".github" / "workflows" / "mlagate.yml").write_text(CALLER)
    repo.commit("the mlagate gate")
    repo.git("push", "--quiet", "origin", "main")
    repo.git("checkout", "--quiet", "pr")
    repo.git("rebase", "--quiet", "main")
    return repo


def pull_request(repo: gha.Repo, tmp_path) -> gha.ActRun:
    action = tmp_path / "mlagate-action"
    gha.copy_project(action)
    payload = {
        "pull_request": {
            "number": 3,
            "head": {
                "ref": "pr",
                "sha": repo.git("rev-parse", "HEAD"),
                "repo": {"full_name": repo.name},
            },
            "base": {
                "ref": "main",
                "sha": repo.git("rev-parse", "main"),
                "repo": {"full_name": repo.name},
            },
        }
    }
    return repo.act(
        "pull_request",
        payload,
        tmp_path / "artifacts",
        ".github/workflows/mlagate.yml",
        extra_repos={ACTION: action},
    )


@pytest.mark.arms
def test_the_threshold_patch_goes_green_and_says_what_it_fixes(tmp_path, real_cache):
    run = pull_request(mlx_lm_caller(tmp_path, "fix", real_cache), tmp_path)
    assert run.jobs == {"mlagate": "success"}, run.log[-4000:]
    summary = job_summary(run)
    assert "**gate green: this change fixes 10, breaks 0, leaves 0 failing as on main**" in summary
    assert summary.count("| fixed by this change | pass | fail | dispatch |") == 10, summary


@pytest.mark.arms
def test_an_unrelated_change_goes_green_and_says_what_still_fails_as_on_main(tmp_path, real_cache):
    run = pull_request(mlx_lm_caller(tmp_path, "unrelated", real_cache), tmp_path)
    assert run.jobs == {"mlagate": "success"}, run.log[-4000:]
    summary = job_summary(run)
    assert "**gate green: this change fixes 0, breaks 0, leaves 10 failing as on main**" in summary
    assert summary.count("| still failing as on base | fail | fail | dispatch |") == 10, summary


@pytest.mark.arms
def test_l_equals_1_put_back_into_one_module_goes_red_naming_its_cases(tmp_path, real_cache):
    run = pull_request(mlx_lm_caller(tmp_path, "regress", real_cache), tmp_path)
    assert run.jobs == {"mlagate": "failure"}, run.log[-4000:]
    summary = job_summary(run)
    assert "**gate red: this change fixes 0, breaks 2, leaves 0 failing as on main**" in summary
    red = re.findall(r"\| regression \| fail \| pass \| dispatch \| ([^|]+) \|", summary)
    assert red == ["mlx-lm/deepseek_v3", "mlx-lm/deepseek_v3"], summary


def test_a_matrix_of_the_runtime_s_own_puts_l_equals_1_back_and_goes_red(tmp_path):
    repo = caller_repo(tmp_path, "regress")
    run = pull_request(repo, tmp_path)
    assert run.jobs == {"mlagate": "failure"}, run.log[-4000:]
    summary = job_summary(run)
    # dispatch breaks; marginal_cost breaks too, or is invalid on a machine unfit for timings
    assert re.search(r"\*\*gate red: this change fixes 0, breaks [12], leaves 0 failing", summary)
    assert "| regression | fail | pass | dispatch | fake/good |" in summary, summary
