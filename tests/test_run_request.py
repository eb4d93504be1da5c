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
    manifest = {
        "profile": "full",
        "backend": "cpu",
        "runner": "linux-cpu",
        "cases": ["probes::m::a::g::float32::cpu::aa"],
    }
    target = resume.Target(manifest, ["probes::m::a::g::float32::cpu::aa"])
    req = runcmd.request(args, None, target)
    assert vars(args) == before
    assert (req.out, req.profile, req.backend, req.runner) == (tmp_path, "full", "cpu", "linux-cpu")
    assert (
        req.only == ("probes::m::a::g::float32::cpu::aa",)
        and req.aa
        and isinstance(req, RunRequest)
    )


def _writes_to_args(tree) -> list[int]:
    """Lines that assign to an attribute of `args` (the parsed command line) or setattr it."""
    import ast

    lines = []
    for node in ast.walk(tree):
        targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
                if t.value.id == "args":
                    lines.append(node.lineno)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "setattr"
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == "args"
        ):
            lines.append(node.lineno)
    return lines


def test_no_module_changes_the_parsed_arguments():
    import ast

    import mlagate

    src = Path(mlagate.__file__).parent
    found = {
        p.relative_to(src).as_posix(): lines
        for p in sorted(src.rglob("*.py"))
        if (lines := _writes_to_args(ast.parse(p.read_text(encoding="utf-8"))))
    }
    assert found == {}
    for planted in ("args.out = args.resume", "args.profile += 'x'", "setattr(args, 'arm', [])"):
        assert _writes_to_args(ast.parse(planted)) == [1], planted
