"""mlagate run's request: built once from the command line, frozen, and the parsed arguments
left as they were (flags, --resume and the runner's profile resolved into the request)."""

import copy
import dataclasses
from pathlib import Path

import pytest

from mlagate import cli
from mlagate.commands import run as runcmd
from mlagate.gate import resume
from mlagate.gate.request import ReuseStore, RunRequest, ShardSpec

from .conftest import FAKE_MATRIX


def _args(*argv):
    return cli.parser("run").parse_args(["run", "--matrix", str(FAKE_MATRIX), *argv])


def test_flags_become_a_frozen_request_and_the_arguments_stay(tmp_path):
    args = _args("--suite", "probes", "--shard", "2/3", "--reuse", str(tmp_path / "store"))
    args.reuse_read_only = True
    before = copy.deepcopy(vars(args))
    req = runcmd.request(args, None, None)
    assert vars(args) == before
    assert req.shard == ShardSpec(2, 3) and req.reuse == ReuseStore(tmp_path / "store", True, False)
    assert req.out == Path("reports/latest") and req.profile == "quick" and req.only is None
    assert req.selection.suites == ("probes",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.out = tmp_path  # type: ignore[misc]


def test_a_resume_takes_its_settings_from_the_runs_manifest(tmp_path):
    args = _args("--resume", str(tmp_path))
    before = copy.deepcopy(vars(args))
    manifest = {"profile": "full", "backend": "cpu", "runner": "linux-cpu", "cases": ["a::aa"]}
    target = resume.Target(manifest, ["a::aa"])
    req = runcmd.request(args, None, target)
    assert vars(args) == before
    assert (req.out, req.profile, req.backend, req.runner) == (tmp_path, "full", "cpu", "linux-cpu")
    assert req.only == ("a::aa",) and req.aa and isinstance(req, RunRequest)
