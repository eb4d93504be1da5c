"""Discovery that reuses (mlagate.scan.discovery): a class found anywhere in a tree runs as the
registered module it matches; a tree without a runtimes: entry gets one; the worker imports a
module's cache from the module's own runtime package. On the fake runtime, vendored."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from mlagate.matrix import load
from mlagate.scan import discovery
from mlagate.scan.modelargs import Source, tiny_config
from mlagate.worker.stepping import runtime_root
from tests.conftest import FIXTURES
from tests.fakert import FIX, fake_tree, git


def results(out: Path) -> dict:
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    return {(r["suite"], r["module"], r["arm"], r["geometry"]["id"]): r["verdict"] for r in rows}


@pytest.mark.parametrize(
    "module, root",
    [
        ("mlx_lm.models.deepseek_v3", "mlx_lm"),
        ("mlx_vlm.models.deepseek_v3.language", "mlx_vlm"),
        ("pkg._vendor.mlx_lm.models.deepseek_v3", "pkg._vendor.mlx_lm"),
        ("pkg._vendor.mlx_lm.models.deepseek_v3__mlagate_forced", "pkg._vendor.mlx_lm"),
        ("pkg.attention.mla", "pkg"),  # no models segment: the worker's package
    ],
)
def test_a_module_s_runtime_package_is_its_path_up_to_the_last_models_segment(module, root):
    assert runtime_root(module, "pkg") == root


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_args_fields_follow_relative_imports_and_bases_and_give_up_where_unreadable(tmp_path):
    write(tmp_path / "p" / "base.py", "class BaseArgs:\n    shared: int = 1\n")
    write(
        tmp_path / "p" / "conf.py",
        "from dataclasses import dataclass\nfrom .base import BaseArgs\n\n@dataclass\n"
        "class ModelArgs(BaseArgs):\n    model_type: str = 'x'\n    hidden_size: int\n"
        "    rope_theta: float\n    flag: bool = False\n\n"
        "class Own(BaseArgs):\n    @classmethod\n"
        "    def from_dict(cls, d):\n        return cls()\n",
    )
    write(tmp_path / "p" / "m.py", "from .conf import ModelArgs, Own\nfrom os import Outside\n")
    src = Source.of(tmp_path, "p.m")
    assert src.fields("ModelArgs") == {"shared", "model_type", "hidden_size", "rope_theta", "flag"}
    assert src.fields("Own") is None  # its own from_dict reads the config its own way
    assert src.fields("Outside") is None and src.fields("Missing") is None
    config = tiny_config(Source.of(tmp_path, "p.conf"), "ModelArgs", {"hidden_size"}, "m")
    assert config == {"model_type": "x", "rope_theta": 1.0}  # hidden_size: the harness sets it


def vendored_fake(repo: Path, pr: str) -> Path:
    """The fake runtime vendored as vend/_vendor/fakemla (a package no runtimes: entry names);
    main has the L == 1 guards; pr: "fix" applies fake-fix.patch inside the vendored copy."""
    fake_tree(repo / "vend" / "_vendor")
    for folder in (repo / "vend", repo / "vend" / "_vendor"):
        (folder / "__init__.py").write_text("")
    git(repo, "init", "--quiet", "--initial-branch", "main")
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "main")
    git(repo, "checkout", "--quiet", "-b", "pr")
    if pr == "fix":
        git(repo, "apply", "--directory", "vend/_vendor", str(FIX))
    else:
        (repo / "NOTES.md").write_text("unrelated\n")
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", f"pr: {pr}")
    return repo


@pytest.fixture
def gate_matrix(tmp_path):
    where = tmp_path / "m"
    where.mkdir()
    shutil.copy(FIXTURES / "gate" / "matrix.yaml", where / "matrix.yaml")
    shutil.copy(FIXTURES / "fake-fix.patch", where / "fake-fix.patch")
    fake_tree(where / "fakemla-tree")
    return where / "matrix.yaml"


def test_a_vendored_copy_runs_as_the_registered_module_under_a_derived_runtime(
    tmp_path, gate_matrix
):
    repo = vendored_fake(tmp_path / "rt", "fix")
    matrix = load(gate_matrix)
    runtime = discovery.runtime_of(matrix, repo)
    assert (runtime.id, runtime.package, discovery.derived(matrix, runtime)) == (
        "vend",
        "vend",
        True,
    )
    found = discovery.known_modules(matrix, runtime, repo)
    assert list(found) == ["vend/good"]
    f = found["vend/good"]
    assert (f.import_path, f.attention, f.reuses) == (
        "vend._vendor.fakemla.models.good",
        "GoodAttention",
        "fake/good",
    )
    assert f.entry["geometries"] == ["tiny"] and f.entry["runtime"] == "vend"


@pytest.mark.parametrize("pr, verdict", [("fix", "pass"), ("unrelated", "fail")])
def test_run_head_on_a_vendored_copy_needs_no_matrix_edit(
    tmp_path, gate_matrix, run_cli, fake_cache, pr, verdict
):
    """The module's cache comes from vend._vendor.fakemla.models.cache (the fake Model has no
    make_cache): imported from `vend.models.cache`, every case would be invalid."""
    repo = vendored_fake(tmp_path / "rt", pr)
    out = tmp_path / "out"
    proc = run_cli(
        "run", "--head", repo, "--matrix", gate_matrix, "--suite", "dispatch", "-n", "1",
        "--out", out, cache=fake_cache,
    )  # fmt: skip
    assert "(vend): vend/good" in proc.stdout, proc.stdout + proc.stderr
    derived = yaml.safe_load((out / "headbase" / "matrix.yaml").read_text())
    assert derived["runtimes"]["vend"] == {"package": "vend", "distribution": "vend"}
    assert derived["modules"]["vend/good"]["import"] == "vend._vendor.fakemla.models.good"
    found = results(out)
    assert found[("dispatch", "vend/good", "head", "tiny")] == verdict, found
    assert "invalid" not in found.values(), proc.stdout


def test_a_tree_of_two_packages_with_mla_classes_is_one_line_naming_the_entry_to_add(
    tmp_path, gate_matrix, run_cli, fake_cache
):
    repo = vendored_fake(tmp_path / "rt", "fix")
    shutil.copytree(repo / "vend", repo / "other")
    proc = run_cli("discover", repo, "--matrix", gate_matrix, cache=fake_cache)
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stdout + proc.stderr
    assert proc.stderr == (
        f"mlagate: error: discover {repo}: holds none of the runtimes of {gate_matrix} (looked "
        f"for fakemla/) and packages other, vend with MLA classes: add to runtimes: in "
        f"{gate_matrix} the one under test, e.g. `other: {{package: other, distribution: "
        "DISTRIBUTION}`\n"
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["{tmp}/nowhere"], "discover {tmp}/nowhere: no such directory"),
        (["{tmp}", "--write-snippet", "{tmp}"], "--write-snippet: {tmp} is a folder, not a file"),
    ],
)
def test_bad_discover_arguments_are_one_line_errors(tmp_path, gate_matrix, run_cli, argv, message):
    argv = [a.format(tmp=tmp_path) for a in argv]
    proc = run_cli("discover", *argv, "--matrix", gate_matrix)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2,
        "",
        f"mlagate: error: {message.format(tmp=tmp_path)}\n",
    )


def test_two_vendored_copies_of_one_module_run_as_two_modules(tmp_path, gate_matrix):
    repo = vendored_fake(tmp_path / "rt", "fix")
    for name in ("again", "third"):
        shutil.copytree(repo / "vend" / "_vendor", repo / "vend" / name)
    matrix = load(gate_matrix)
    found = discovery.known_modules(matrix, discovery.runtime_of(matrix, repo), repo)
    assert {m: f.import_path for m, f in found.items()} == {
        "vend/good": "vend._vendor.fakemla.models.good",
        "vend/fake/good": "vend.again.fakemla.models.good",
        "vend/fake/good-2": "vend.third.fakemla.models.good",
    }
