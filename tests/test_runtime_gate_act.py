"""A runtime repository's pull request runs mlagate's composite action (action.yml) under act.

The fake runtime repository (tests/fakert.py) holds a workflow that checks it out and calls
the action by name; act serves the action from a copy of this checkout. A head that fixes the
guard goes green; a head that puts `L == 1` back goes red.
"""

from __future__ import annotations

import pytest
import yaml

from tests import fakert, gha
from tests.conftest import FIXTURES

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


def test_a_head_that_fixes_the_guard_goes_green(tmp_path):
    repo = caller_repo(tmp_path, "fix")
    run = pull_request(repo, tmp_path)
    assert run.jobs == {"mlagate": "success"}, run.log[-4000:]
    summary = run.summary("mlagate")
    assert (
        "## mlagate: head against its merge base" in summary
        and "3 passed, 0 failed, 0 invalid" in summary
    ), summary


def test_a_head_that_reintroduces_l_equals_1_goes_red(tmp_path):
    repo = caller_repo(tmp_path, "regress")
    run = pull_request(repo, tmp_path)
    assert run.jobs == {"mlagate": "failure"}, run.log[-4000:]
    summary = run.summary("mlagate")
    assert "replay dispatch::fake/good::head::tiny::float32::cpu" in summary, summary
