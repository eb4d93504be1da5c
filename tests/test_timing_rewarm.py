"""Which interleaved measurements rewarm before each sample (mlagate.harness.timing._Run): series
spread over two or more workers do, since a sample that follows another process's would pay for
that process's use of the caches; series of one worker follow each other on one primed cache and
do not. The worker below records the requests the harness sends; the worker's own handling of
`rewarm` is op `sample` (mlagate.worker.stepping)."""

from types import SimpleNamespace

from mlagate.harness.timing import _Run


class Worker:
    def __init__(self, calls: list, slot: tuple):
        self.calls, self.slot = calls, slot

    def call(self, op, timeout_s, **req):
        self.calls.append((self.slot, op, req))
        return {"seconds": 0.01, "path": req.get("force") or "absorbed"}


class Case:
    def __init__(self):
        self.calls: list = []
        self.case = SimpleNamespace(arm="patched")
        self.profile = SimpleNamespace(warmup=1, sample_min_s=0, timeout_s=10)
        self.result = SimpleNamespace(observations=[])

    def _worker(self, arm, replica):
        return Worker(self.calls, (arm, replica))


def _rewarms(series: list[dict]) -> set:
    case = Case()
    run = _Run(case, series, None)
    run.take(3)
    assert {op for _, op, _ in case.calls} == {"sample"}
    return {req["rewarm"] for _, _, req in case.calls}


def test_series_of_one_worker_do_not_rewarm():
    series = [{"label": f"L={L}", "key": "k", "L": L} for L in (1, 2, 4)]
    assert _rewarms(series) == {False}


def test_forced_paths_in_one_worker_do_not_rewarm():
    series = [
        {"label": p, "key": "k", "L": 8, "force": p, "arm": "patched"}
        for p in ("absorbed", "materialised")
    ]
    assert _rewarms(series) == {False}


def test_an_arm_against_its_baseline_rewarms_every_sample():
    series = [
        {"label": "arm", "key": "a", "L": 1, "arm": "patched", "replica": 0},
        {"label": "baseline", "key": "b", "L": 1, "arm": "stock", "replica": 0},
    ]
    assert _rewarms(series) == {True}


def test_two_workers_of_one_arm_rewarm_every_sample():
    series = [
        {"label": "arm", "key": "a", "L": 1, "arm": "patched", "replica": 0},
        {"label": "baseline", "key": "b", "L": 1, "arm": "patched", "replica": 1},
    ]
    assert _rewarms(series) == {True}
