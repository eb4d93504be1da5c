import json
import os
import signal
import time

import pytest

from mlagate import matrix
from mlagate.arm import arms
from mlagate.harness.supervisor import WorkerError, WorkerPool, pinned_cpu

CONFIG = {
    "vocab_size": 64,
    "hidden_size": 64,
    "num_attention_heads": 2,
    "kv_lora_rank": 64,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
}


@pytest.fixture
def pool(fake_matrix, fake_cache, tmp_path):
    m = matrix.load(fake_matrix)
    inst = arms.materialise(m.arms["fake-stock"], m.runtimes["fakemla"], fake_cache)
    p = WorkerPool({"fake-stock": inst}, log_dir=tmp_path / "logs")
    yield p
    p.close()


def _build(worker, module="unstable", cls="UnstableAttention"):
    return worker.call(
        "build",
        60,
        key=module,
        **{"import": f"fakemla.models.{module}"},
        model="Model",
        args="ModelArgs",
        attention=cls,
        config=CONFIG,
        dtype="float32",
        seed=0,
        forced=False,
        geometry={"heads": 2, "r": 64, "n": 16, "v": 16},
    )


def test_worker_reports_its_arm_and_environment(pool):
    fp = pool.get("fake-stock").fingerprint
    assert fp["arm"] == "fake-stock" and fp["backend"] == "cpu" and fp["mlx"]
    assert fp["arm_dir"].endswith("/site")


def test_a_crash_becomes_an_error_with_the_output_and_the_pool_recovers(pool):
    w = pool.get("fake-stock")
    _build(w)
    print_marker = w.call("step", 60, key="unstable", T=4, L=2, seed=0)
    assert print_marker["path"] == "materialised"
    with pytest.raises(WorkerError, match=r"crashed in step \(exit 9\)"):
        w.call("step", 60, key="unstable", T=4, L=3, seed=0)
    again = pool.get("fake-stock")
    assert again is not w and again.alive()


def test_a_hang_is_killed_with_its_whole_process_group(pool):
    w = pool.get("fake-stock")
    _build(w)
    pid = w.proc.pid
    t0 = time.monotonic()
    with pytest.raises(WorkerError, match="timed out after 2 s in step; killed"):
        w.call("step", 2, key="unstable", T=4, L=5, seed=0)
    assert time.monotonic() - t0 < 30
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def test_an_error_inside_the_arm_comes_back_on_the_channel(pool):
    w = pool.get("fake-stock")
    with pytest.raises(
        WorkerError,
        match=r"build failed in fake-stock: ModuleNotFoundError: No module named "
        r"'fakemla.models.nothing'",
    ):
        _build(w, "nothing", "X")
    assert w.alive()


def test_geometry_that_the_config_ignores_is_caught(pool):
    w = pool.get("fake-stock")
    with pytest.raises(
        WorkerError, match=r"geometry not applied: embed_q \(2, 64, 16\) \(want \(2, 64, 32\)\)"
    ):
        w.call(
            "build",
            60,
            key="g",
            **{"import": "fakemla.models.good"},
            model="Model",
            args="ModelArgs",
            attention="GoodAttention",
            config=CONFIG,
            dtype="float32",
            seed=0,
            forced=False,
            geometry={"heads": 2, "r": 64, "n": 32, "v": 16},
        )


def test_pinned_cpu_choices():
    allowed = os.sched_getaffinity(0)
    assert pinned_cpu("none", under_xdist=False) is None
    assert pinned_cpu("auto", under_xdist=False) == max(allowed)
    assert pinned_cpu("auto", under_xdist=True) is None, "xdist runs workers side by side"
    assert pinned_cpu(str(min(allowed)), under_xdist=True) == min(allowed)
    with pytest.raises(ValueError, match=r"^--cpu 4096: not a CPU this process may run on"):
        pinned_cpu("4096", under_xdist=False)
    with pytest.raises(ValueError, match=r"^--cpu: 'fast' is not auto, none or a CPU number"):
        pinned_cpu("fast", under_xdist=False)


def test_a_pinned_worker_runs_on_its_cpu_only(fake_matrix, fake_cache, tmp_path):
    m = matrix.load(fake_matrix)
    inst = arms.materialise(m.arms["fake-stock"], m.runtimes["fakemla"], fake_cache)
    cpu = min(os.sched_getaffinity(0))
    pinned, free = (
        WorkerPool({"fake-stock": inst}, log_dir=tmp_path, cpu=cpu),
        WorkerPool({"fake-stock": inst}, log_dir=tmp_path),
    )
    try:
        assert pinned.get("fake-stock").fingerprint["cpus"] == str(cpu)
        assert os.sched_getaffinity(pinned.get("fake-stock").proc.pid) == {cpu}
        assert free.get("fake-stock").fingerprint["cpus"] == ",".join(
            map(str, sorted(os.sched_getaffinity(0)))
        )
    finally:
        pinned.close()
        free.close()


def test_a_module_imported_from_outside_the_arm_is_refused(pool):
    w = pool.get("fake-stock")
    with pytest.raises(WorkerError, match=r"json was imported from .*, outside the arm "):
        w.call(
            "build",
            60,
            key="outside",
            **{"import": "json"},
            model="Model",
            args="ModelArgs",
            attention="X",
            config=CONFIG,
            dtype="float32",
            seed=0,
            forced=False,
            geometry={"heads": 2, "r": 64, "n": 16, "v": 16},
        )


def test_release_drops_the_models_of_a_used_worker_and_skips_an_idle_one(pool):
    w = pool.get("fake-stock")
    ops = []
    real_call = w.call

    def spy(op, timeout, **req):
        ops.append(op)
        return real_call(op, timeout, **req)

    w.call = spy
    pool.release()  # only hello so far: nothing to drop, no call
    assert ops == []
    _build(w)
    pool.release()
    assert ops == ["build", "release"]
    with pytest.raises(WorkerError, match="unstable"):
        w.call("step", 60, key="unstable", T=4, L=2, seed=0)  # the model was dropped
    pool.release()  # the failed step may have left state: released again
    assert ops[-1] == "release"


def test_a_worker_logs_each_ops_cpu_seconds_where_asked(fake_matrix, fake_cache, tmp_path):
    m = matrix.load(fake_matrix)
    inst = arms.materialise(m.arms["fake-stock"], m.runtimes["fakemla"], fake_cache)
    logs = tmp_path / "ops"
    logs.mkdir()
    pool = WorkerPool({"fake-stock": inst}, env={"MLAGATE_OP_LOG": str(logs)}, log_dir=tmp_path)
    try:
        w = pool.get("fake-stock")
        _build(w)
        pool.release()
    finally:
        pool.close()
    rows = [json.loads(x) for f in logs.glob("ops-*.jsonl") for x in f.read_text().splitlines()]
    assert [r["op"] for r in rows] == ["hello", "build", "release", "exit"]
    build = rows[1]
    assert build["key"] == "unstable" and 0 < build["cpu_s"] and 0 < build["wall_s"]


def test_holding_lasts_until_a_release_succeeds(pool):
    w = pool.get("fake-stock")
    assert not w.holding
    _build(w)
    w.hello()  # a hello after a build drops nothing
    assert w.holding
    pool.release()
    assert not w.holding
    _build(w)
    w.kill()
    with pytest.raises(WorkerError, match="not running"):
        w.call("release", 60)  # a release that failed dropped nothing either
    assert w.holding
