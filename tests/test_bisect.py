"""`mlagate bisect`'s bad input (one line, exit 2, nothing measured) and its search over
verdicts (mlagate.bisect.search: skipped commits gone around, limits)."""

from __future__ import annotations

import time

from mlagate.bisect.search import BAD, GOOD, SKIPPED, Tried, bisect
from tests.conftest import cli
from tests.fakert import git

CASE = "dispatch::mlx-lm/deepseek_v3::head::deepseek-v3::float32::cpu"


def repo(tmp_path):
    r = tmp_path / "rt"
    r.mkdir()
    (r / "a.txt").write_text("a\n")
    git(r, "init", "--quiet", "--initial-branch", "main")
    git(r, "add", "--all")
    git(r, "commit", "--quiet", "-m", "one")
    (r / "a.txt").write_text("b\n")
    git(r, "commit", "--quiet", "-am", "two")
    git(r, "checkout", "--quiet", "--orphan", "other")
    git(r, "commit", "--quiet", "-m", "unrelated")
    git(r, "checkout", "--quiet", "main")
    return r


def one_line(proc, *words):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert all(w in lines[0] for w in words), lines[0]


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    r = repo(tmp_path)
    base = ["bisect", "--head", r, "--out", tmp_path / "out"]
    one_line(cli(*base, "--good", "nope", "--bad", "main", "--case", CASE), "--good nope")
    one_line(cli(*base, "--good", "other", "--bad", "main", "--case", CASE), "not an ancestor")
    one_line(cli(*base, "--good", "main~1", "--bad", "main"), "name the cases")
    one_line(cli(*base, "--good", "main~1", "--bad", "main", "--suite", "nosuch"), "--suite")
    one_line(cli(*base, "--good", "main~1", "--bad", "main", "--case", "x::y"), "case id")
    assert not (tmp_path / "out").exists()


def _judge(first_bad: int, skip=()):
    def judge(sha: str) -> Tried:
        i = int(sha)
        verdict = SKIPPED if i in skip else BAD if i >= first_bad else GOOD
        return Tried(sha, verdict, 0.0)

    return judge


def _quiet(s, t):
    pass


def test_the_search_finds_the_first_bad_going_around_skipped_commits():
    commits = [str(i) for i in range(40)]
    for first in (0, 1, 17, 39):
        s, tried = bisect(commits, _judge(first), None, None, 2, time.monotonic(), _quiet)
        assert s.range_left() == [str(first)] and len(tried) <= 6
    s, tried = bisect(commits, _judge(17, {16, 17}), None, None, 2, time.monotonic(), _quiet)
    assert s.range_left() == ["16", "17", "18"], s.range_left()  # 16, 17 skipped: one of three
    s, tried = bisect(commits, _judge(17, {20}), None, None, 2, time.monotonic(), _quiet)
    assert s.range_left() == ["17"]


def test_the_limits_stop_the_search_with_the_range_left():
    commits = [str(i) for i in range(40)]
    s, tried = bisect(commits, _judge(17), 4, None, 2, time.monotonic(), _quiet)
    assert len(tried) == 2 and s.stopped == "--max-commits 4 reached" and "17" in s.range_left()
    s, tried = bisect(commits, _judge(17), None, 1, 2, time.monotonic() - 5, _quiet)
    assert not tried and s.stopped == "--budget-s 1 spent" and len(s.range_left()) == 40
