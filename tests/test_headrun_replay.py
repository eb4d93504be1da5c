"""Every replay command a head run prints runs as printed (from the folder the head run ran
in), and measures the case it names with the verdict the head run had."""

from __future__ import annotations

import json
import shlex
import shutil

from tests.conftest import FIXTURES, cli
from tests.fakert import fake_tree, runtime_repo


def test_every_replay_a_head_run_prints_runs_as_printed(tmp_path, fake_cache):
    where = tmp_path / "m"
    where.mkdir()
    shutil.copy(FIXTURES / "gate" / "matrix.yaml", where / "matrix.yaml")
    shutil.copy(FIXTURES / "fake-fix.patch", where / "fake-fix.patch")
    fake_tree(where / "fakemla-tree")
    repo = runtime_repo(tmp_path / "rt", "regress")
    argv = ["run", "--head", "rt", "--matrix", "m/matrix.yaml", "--suite", "dispatch"]
    proc = cli(*argv, "--out", "out", cwd=tmp_path, cache=fake_cache)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    replays = [ln.split(": ", 1) for ln in proc.stdout.splitlines() if ln.startswith("replay ")]
    assert replays and repo.is_dir()
    for label, command in replays:
        words = shlex.split(command)
        assert words[:2] == ["mlagate", "run"], command
        again = cli(*words[1:], cwd=tmp_path, cache=fake_cache)
        assert again.returncode == 1, again.stdout + again.stderr  # the regression, again
        out = tmp_path / words[words.index("--out") + 1]
        rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
        assert [r["case_id"] for r in rows] == [label.removeprefix("replay ")]
        assert rows[0]["verdict"] == "fail"
