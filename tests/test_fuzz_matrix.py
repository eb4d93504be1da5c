"""Fuzzing the matrix reader: seeded variants of the shipped matrix.yaml in-process, a sample
through the CLI, and property-based inputs (Hypothesis). Each must be a one-line error (exit 2
through the CLI), never a traceback, a hang or an internal repr; a broken matrix is never
accepted."""

import collections
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlagate import matrix, yamlread

from . import matrix_fuzz as mf


@pytest.fixture
def folder(tmp_path) -> Path:
    os.symlink(mf.ROOT / "patches", tmp_path / "patches")
    return tmp_path


def test_seeded_variants_are_refused_in_one_line(folder):
    seen: collections.Counter = collections.Counter()
    problems = []
    for v in mf.variants(400, seed=19):
        seen[v.category] += 1
        problems += [
            f"{v.category} / {v.name}: {p}" for p in mf.judge(v, matrix.load, folder / "m.yaml")
        ]
    assert problems == []
    assert min(seen.values()) == 50 and len(seen) == 8


def test_the_judge_can_fail(folder):
    """A loader that accepts everything, crashes or prints a repr is caught."""
    v = next(mf.variants(1))

    def crash(path):
        raise RecursionError

    def leaky(path):
        raise matrix.MatrixError(str(path), 1, "x", f"got {object()!r}")

    assert mf.judge(v, lambda p: None, folder / "m.yaml") == ["accepted"]
    assert mf.judge(v, crash, folder / "m.yaml") == ["crash: RecursionError"]
    assert mf.judge(v, leaky, folder / "m.yaml")[0].startswith("internal repr")
    assert mf.judge(v, lambda p: time.sleep(0.2), folder / "m.yaml", max_s=0.1)[-1].startswith(
        "took"
    )


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _plan(path: Path, cache: Path):
    env = {**os.environ, "MLAGATE_CACHE": str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "mlagate", "plan", "--matrix", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        preexec_fn=_limit_memory,
    )


def test_a_sample_through_the_cli_is_one_line_and_exit_2(folder):
    sample = [v for i, v in enumerate(mf.variants(64, seed=7)) if v.must_refuse and i % 4 == 0]
    special = mf.special_files(folder / "special")
    paths = []
    for i, v in enumerate(sample):
        (folder / f"v{i}.yaml").write_bytes(v.data)
        paths.append((f"{v.category} / {v.name}", folder / f"v{i}.yaml"))
    for name, path in paths + special:
        proc = _plan(path, folder / "cache")
        assert proc.returncode == 2, (name, proc.stderr[-500:])
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("mlagate: error: "), (
            name,
            proc.stderr[-500:],
        )
        assert not mf.REPR.search(proc.stderr), name
    assert not (folder / "cache").exists(), "nothing was installed for a refused matrix"


@settings(
    max_examples=300,
    derandomize=True,
    database=None,
    deadline=10000,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=400) | st.sampled_from(mf.TAGS))
def test_any_text_is_nodes_or_one_read_error(text):
    try:
        yamlread.compose(text)
    except yamlread.ReadError as exc:
        assert "\n" not in str(exc) and not mf.REPR.search(str(exc))


@settings(
    max_examples=200,
    derandomize=True,
    database=None,
    deadline=10000,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.binary(max_size=300))
def test_any_bytes_as_a_matrix_is_one_matrix_error(folder, data):
    path = folder / "b.yaml"
    path.write_bytes(data)
    try:
        matrix.load(path)
    except matrix.MatrixError as exc:
        assert "\n" not in str(exc) and not mf.REPR.search(str(exc))


@pytest.mark.parametrize(
    "key, value, why",
    [
        ("num_attention_heads", "1", "at least 2 heads"),
        ("kv_lora_rank", "128", r"must exceed qk_nope_head_dim \+ v_head_dim"),
        ("timeout_s", ".inf", "finite"),
        ("timeout_s", "1000000.0", "at most 86400"),
        ("samples", "1000001", "at most 1001"),
        ("size_gb", "-1", "not negative"),
    ],
)
def test_values_out_of_range_are_refused(folder, key, value, why):
    text = mf.SHIPPED.read_text()
    (line,) = mf._lines(text, key)[:1]
    (folder / "m.yaml").write_text(mf._set_value(text, line, value))
    with pytest.raises(matrix.MatrixError, match=why):
        matrix.load(folder / "m.yaml")
