"""Performance bisection's comparisons (mlagate.bisect.timing) over a fake history, nothing run:
which pairs are formed and in which direction under l1_parity's one-sided rule, how a midpoint
is decided, that a suite with its own bound is measured once per commit as its own base, and
that re-checks are measured fresh (mlagate.bisect.measure: the store not read)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mlagate.bisect import history, measure, timing
from mlagate.bisect.request import BisectRequest
from mlagate.bisect.search import BAD, GOOD, SKIPPED
from mlagate.gate.request import ReuseStore
from tests.conftest import cli
from tests.test_bisect import one_line, repo

L1 = "l1_parity::mlx-lm/deepseek_v3::head::deepseek-v3::float32::cpu"
MC = "marginal_cost::mlx-lm/deepseek_v3::head::deepseek-v3::float32::cpu"
TOL = 0.05
SHAS = [f"{i:040x}" for i in range(9)]  # SHAS[0] the good end, SHAS[8] the bad end


def request(tmp_path, suite: str, baseline: bool) -> BisectRequest:
    matrix = SimpleNamespace(suites={suite: SimpleNamespace(kind="performance", baseline=baseline)})
    return BisectRequest(
        tmp_path / "rt", SHAS[0], SHAS[-1], matrix, (suite,), ("mlx-lm/deepseek_v3",), (),
        "quick", "cpu", "linux-cpu", tmp_path / "out", ReuseStore(tmp_path / "store"),
    )  # fmt: skip


def l1_row(verdict: str) -> dict:
    return {
        "verdict": verdict,
        "metrics": {
            "l1": {"256": {"ci": [0.01, 0.02]}},
            "sequential": {"process_pairs": 4},
        },
    }


class World:
    """A history of step times (1.0 at the good end): l1_parity fails head against base when
    head is slower beyond TOL (one-sided: a faster head passes); `undecided`: commits, or
    (head, base) pairs, whose comparisons are invalid; `flaky`: what a fresh measurement gives
    instead."""

    def __init__(self, steps, undecided=(), flaky=None):
        self.steps, self.undecided, self.flaky = steps, set(undecided), flaky
        self.calls: list[tuple[int, int, bool]] = []

    def commit(self, req, sha, base_sha, ids, fresh=False):
        head, base = SHAS.index(sha), SHAS.index(base_sha)
        self.calls.append((head, base, fresh))
        slower = self.steps[head] > self.steps[base] * (1 + TOL)
        verdict = "fail" if slower else "pass"
        if {head, base, (head, base)} & self.undecided:
            verdict = "invalid"
        if fresh and self.flaky:
            verdict = self.flaky
        return measure.Measured(sha, {ids[0]: l1_row(verdict)}, files={"m": "f.py"})


@pytest.fixture
def fake_history(monkeypatch):
    commits = [history.Commit(s, f"commit {i}") for i, s in enumerate(SHAS) if i]
    monkeypatch.setattr(history, "between", lambda tree, good, bad: commits)
    monkeypatch.setattr(measure, "planned", lambda req, sha, base: [ids(req)])

    def use(world):
        monkeypatch.setattr(measure, "commit", world.commit)
        return world

    return use


def ids(req) -> str:
    return L1 if req.suites[0] == "l1_parity" else MC


# a 4 % speed-up at commit 2, a 10 % slowdown at 5: 0.96 * 1.10 is still beyond 5 % of good
STEPS = [1.0, 1.0, 0.96, 0.96, 0.96, 1.056, 1.056, 1.056, 1.056]


def test_the_later_commit_is_always_head_and_the_planted_slowdown_is_found(tmp_path, fake_history):
    w = fake_history(World(STEPS))
    out = timing.run(request(tmp_path, "l1_parity", True))
    assert out.status == "found" and out.culprits == [SHAS[5]], out.message
    assert all(head > base for head, base, _ in w.calls), w.calls
    assert w.calls == [
        (8, 0, False),  # the ends: bad against good
        (4, 0, False), (8, 4, False),  # midpoint 4: it against good, bad against it: good
        (6, 4, False), (8, 6, False),  # midpoint 6: bad
        (5, 4, False), (6, 5, False),  # midpoint 5: bad
        (5, 4, True),  # the culprit against its parent, fresh
    ], w.calls  # fmt: skip
    verdicts = [(SHAS.index(t.sha), t.verdict) for t in out.tried]
    assert verdicts == [(8, "end"), (4, GOOD), (6, BAD), (5, BAD), (5, BAD)], verdicts
    assert out.pairs == 4 * len(w.calls)


def test_a_midpoint_combines_its_comparison_with_good_and_with_bad():
    S, D, U = timing.SAME_, timing.DIFFERS, timing.UNDECIDED
    assert timing.midpoint(S, D) == GOOD  # not slower than good, bad slower than it
    assert timing.midpoint(D, S) == BAD  # slower than good, bad not slower than it
    assert timing.midpoint(D, D) == timing.BOTH  # two slowdowns, one on each side
    assert timing.midpoint(D, U) == BAD  # slower than good: a culprit at or before it
    assert timing.midpoint(U, D) == GOOD  # bad slower than it: a culprit after it
    for pair in ((S, S), (U, U), (S, U), (U, S)):
        assert timing.midpoint(*pair) == SKIPPED, pair


def test_one_decisive_comparison_decides_a_midpoint_whose_other_is_undecided(
    tmp_path, fake_history
):
    """The CI run of 7 December on a loaded machine: 5 against 4 failed, 6 against 5 (both
    slow) stayed undecided; 5 was skipped and the range (5, 6) left undecided. 5 is bad."""
    w = fake_history(World(STEPS, undecided={(6, 5)}))
    out = timing.run(request(tmp_path, "l1_parity", True))
    assert out.status == "found" and out.culprits == [SHAS[5]], out.message
    five = [t for t in out.tried if SHAS.index(t.sha) == 5]
    assert five[0].verdict == BAD and "undecided side is not searched" in five[0].why, five
    assert w.calls[-1] == (5, 4, True)


def test_an_undecided_midpoint_is_skipped_and_gone_around(tmp_path, fake_history):
    w = fake_history(World(STEPS, undecided={6}))
    out = timing.run(request(tmp_path, "l1_parity", True))
    assert out.status == "found" and out.culprits == [SHAS[5]], out.message
    skipped = [t for t in out.tried if t.verdict == SKIPPED]
    assert [SHAS.index(t.sha) for t in skipped] == [6], out.tried
    assert "undecided" in skipped[0].why
    assert all(head > base for head, base, _ in w.calls), w.calls


def test_a_skipped_midpoint_is_tried_again_against_the_new_ends_of_a_narrower_range(
    tmp_path, fake_history
):
    """Undecided against the ends (a loaded machine), decided against its neighbours."""
    w = fake_history(World(STEPS, undecided={(4, 0), (8, 4)}))
    out = timing.run(request(tmp_path, "l1_parity", True))
    assert out.status == "found" and out.culprits == [SHAS[5]], out.message
    verdicts = [(SHAS.index(t.sha), t.verdict) for t in out.tried]
    assert verdicts == [(8, "end"), (4, SKIPPED), (3, GOOD), (5, BAD), (4, GOOD), (5, BAD)]
    assert (4, 3, False) in w.calls and (5, 4, False) in w.calls, w.calls
    w = fake_history(World(STEPS, undecided={4}))  # undecided against any commit
    out = timing.run(request(tmp_path, "l1_parity", True))
    assert out.status == "range left" and out.left == [SHAS[4], SHAS[5]], out.message


def test_two_slowdowns_give_two_culprits(tmp_path, fake_history):
    steps = [1.0, 1.0, 1.0, 1.1, 1.1, 1.1, 1.21, 1.21, 1.21]
    fake_history(World(steps))
    out = timing.run(request(tmp_path, "l1_parity", True))
    assert out.status == "found" and out.culprits == [SHAS[3], SHAS[6]], out.message


def test_a_culprit_that_no_longer_differs_when_measured_fresh_is_not_confirmed(
    tmp_path, fake_history
):
    w = fake_history(World(STEPS, flaky="pass"))
    out = timing.run(request(tmp_path, "l1_parity", True))
    assert out.status == "range left" and out.exit_code == 3 and not out.culprits
    assert "not confirmed" in out.message and w.calls[-1] == (5, 4, True)
    assert [c for c in w.calls if c[2]] == [(5, 4, True)]  # a same re-check is final


def test_an_undecided_recheck_is_measured_once_more(tmp_path, fake_history):
    w = fake_history(World(STEPS, flaky="invalid"))
    out = timing.run(request(tmp_path, "l1_parity", True))
    assert out.status == "range left" and "not confirmed" in out.message, out.message
    assert [c for c in w.calls if c[2]] == [(5, 4, True), (5, 4, True)], w.calls
    assert "the second time" in out.tried[-1].why

    class Settles(World):  # undecided the first time, decided the second
        def commit(self, req, sha, base_sha, ids, fresh=False):
            self.flaky = "invalid" if fresh and not any(c[2] for c in self.calls) else None
            return super().commit(req, sha, base_sha, ids, fresh)

    w = fake_history(Settles(STEPS))
    out = timing.run(request(tmp_path, "l1_parity", True))
    assert out.status == "found" and out.culprits == [SHAS[5]], out.message
    assert [c for c in w.calls if c[2]] == [(5, 4, True), (5, 4, True)], w.calls


def test_a_suite_with_its_own_bound_is_measured_once_per_commit_as_its_own_base(
    tmp_path, fake_history
):
    """marginal_cost against its bound: a commit's own verdict, no pairs; the culprit and its
    parent measured fresh."""

    class Own(World):
        def commit(self, req, sha, base_sha, ids, fresh=False):
            i = SHAS.index(sha)
            self.calls.append((i, SHAS.index(base_sha), fresh))
            over = i >= 5 and not (fresh and self.flaky)
            row = {"verdict": "fail", "failure": {"kinds": ["too_slow"]}}
            row = row if over else {"verdict": "pass"}
            return measure.Measured(sha, {ids[0]: row}, files={"m": "f.py"})

    w = fake_history(Own(STEPS))
    out = timing.run(request(tmp_path, "marginal_cost", False))
    assert out.status == "found" and out.culprits == [SHAS[5]], out.message
    assert all(head == base for head, base, _ in w.calls), w.calls
    once = [head for head, _, fresh in w.calls if not fresh]
    assert sorted(once) == sorted(set(once)), w.calls  # each commit measured once
    assert [(h, f) for h, _, f in w.calls if f] == [(5, True), (4, True)], w.calls
    assert out.tried[-1].verdict == BAD and "measured fresh" in out.tried[-1].why
    w = fake_history(Own(STEPS, flaky="pass"))
    out = timing.run(request(tmp_path, "marginal_cost", False))
    assert out.status == "range left" and not out.culprits and out.exit_code == 3


def test_a_recheck_does_not_read_the_store(tmp_path, monkeypatch):
    got = []
    monkeypatch.setattr(measure, "derived", lambda req, sha, base: (None, {}))
    monkeypatch.setattr(
        measure.execute,
        "run",
        lambda run: got.append(run) or SimpleNamespace(summary=SimpleNamespace(rows=[])),
    )
    req = request(tmp_path, "l1_parity", True)
    measure.commit(req, SHAS[5], SHAS[4], [L1])
    measure.commit(req, SHAS[5], SHAS[4], [L1], fresh=True)
    first, fresh = got
    assert first.reuse == req.reuse and first.reuse.read
    assert not fresh.reuse.read and fresh.reuse.write and fresh.reuse.path == req.reuse.path
    assert fresh.out != first.out  # its own run folder


def test_paired_and_own_bound_suites_are_bisected_apart(tmp_path):
    r = repo(tmp_path)
    proc = cli("bisect", "--head", r, "--good", "main~1", "--bad", "main", "--suite",
               "l1_parity", "--suite", "marginal_cost", "--out", tmp_path / "out")  # fmt: skip
    one_line(proc, "their own bound")
    assert not (tmp_path / "out").exists()
