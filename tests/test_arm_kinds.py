"""Arms for the ways runtimes ship a fix: one that activates code in its worker (a runtime that
replaces mlx-lm's attention `__call__` at import, behind an environment variable), one that
overlays files on another arm's install, and one whose Requires-Python excludes this
interpreter."""

import json
import shutil
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from mlagate import matrix
from mlagate.arm import arms
from mlagate.matrix import MatrixError
from mlagate.worker.activation import worker_env

from .conftest import ROOT

SHIPPED = ROOT / "matrix.yaml"
STOCK_SITE_FILE = "mlx_lm/models/deepseek_v3.py"

# A runtime that fixes mlx-lm 0.32.2's deepseek_v3 at import when FIXRT_MLA=1: its own
# __call__ (the stock one with a cache-aware decision) replaces DeepseekV3Attention's.
FIXRT_INIT = """\
import os

if os.environ.get("FIXRT_MLA") == "1":
    from fixrt import mla

    mla.install()
"""
FIXRT_MLA = '''\
import os

import mlx.core as mx
from mlx_lm.models import deepseek_v3
from mlx_lm.models.base import scaled_dot_product_attention


FLOOR = int(os.environ.get("FIXRT_FLOOR", "0"))  # verify steps on shorter caches materialise


def fixrt_absorbs(L, r, d, T):
    """The exact cache-aware rule: absorbed while L * (r*d + (2r - d) T) < r d T (and, with a
    floor, only on caches of at least FLOOR tokens before the step)."""
    if L > 1 and T - L < FLOOR:
        return False
    return L == 1 or 2 * r <= d or L * (r * d + (2 * r - d) * T) < r * d * T


def fixed_call(self, x, mask=None, cache=None):
    B, L, D = x.shape
    if self.q_lora_rank is None:
        q = self.q_proj(x)
    else:
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
    q = q.reshape(B, L, self.num_heads, self.q_head_dim).transpose(0, 2, 1, 3)
    q_nope, q_pe = mx.split(q, [self.qk_nope_head_dim], axis=-1)
    compressed_kv = self.kv_a_proj_with_mqa(x)
    compressed_kv, k_pe = mx.split(compressed_kv, [self.kv_lora_rank], axis=-1)
    k_pe = k_pe.reshape(B, L, 1, self.qk_rope_head_dim).transpose(0, 2, 1, 3)
    kv_latent = self.kv_a_layernorm(compressed_kv)
    offset = cache.offset if cache is not None else 0
    q_pe = self.rope(q_pe, offset)
    k_pe = self.rope(k_pe, offset)
    kv_latent = mx.expand_dims(kv_latent, axis=1)
    if cache is not None:
        kv_latent, k_pe = cache.update_and_fetch(kv_latent, k_pe)
    d = self.qk_nope_head_dim + self.v_head_dim
    use_latent = fixrt_absorbs(L, self.kv_lora_rank, d, kv_latent.shape[-2])
    pe_scores = (q_pe * self.scale) @ k_pe.swapaxes(-1, -2)
    if mask is not None:
        pe_scores = mx.where(
            mask, pe_scores, mx.array(mx.finfo(pe_scores.dtype).min, pe_scores.dtype)
        )
    if use_latent:
        q_nope = self.embed_q(q_nope)
        k = v = kv_latent
    else:
        k = self.embed_q(kv_latent, transpose=False)
        v = self.unembed_out(kv_latent)
    output = scaled_dot_product_attention(
        q_nope, k, v, cache=cache, scale=self.scale, mask=pe_scores
    )
    if use_latent:
        output = self.unembed_out(output)
    output = output.transpose(0, 2, 1, 3).reshape(B, L, -1)
    return self.o_proj(output)


def install():
    deepseek_v3.DeepseekV3Attention.__call__ = fixed_call
'''


def _fixrt(folder: Path) -> Path:
    pkg = folder / "fixrt"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FIXRT_INIT)
    (pkg / "mla.py").write_text(FIXRT_MLA)
    return pkg


def _matrix(folder: Path, arms_text: str) -> Path:
    """The shipped matrix with more arms (the shipped patch files beside it)."""
    shutil.copytree(ROOT / "patches", folder / "patches", dirs_exist_ok=True)
    text = SHIPPED.read_text()
    head, sep, rest = text.partition("\narms:")
    line_end = rest.index("\n")
    text = head + sep + rest[:line_end] + "\n" + textwrap.indent(arms_text, "  ") + rest[line_end:]
    path = folder / "matrix.yaml"
    path.write_text(text)
    return path


FIXRT_ARMS = """\
fixrt-off:  # the runtime installed, its variable unset: stock behaviour
  runtime: mlx-lm
  pypi: mlx-lm==0.32.2
  role: patched
  activate: {module: fixrt, env: {FIXRT_MLA: null}, install: [fixrt]}
fixrt-on:
  runtime: mlx-lm
  pypi: mlx-lm==0.32.2
  role: patched
  activate: {module: fixrt, env: {FIXRT_MLA: "1"}, install: [fixrt]}
fixrt-floor:  # the fix with a cache-length floor: verify steps on caches under 1024 materialise
  runtime: mlx-lm
  pypi: mlx-lm==0.32.2
  role: patched
  activate: {module: fixrt, env: {FIXRT_MLA: "1", FIXRT_FLOOR: "1024"}, install: [fixrt]}
overlaid:  # the patched deepseek_v3.py (and the mla.py it imports) over the stock install
  runtime: mlx-lm
  role: patched
  overlay:
    on: mlx-lm-0.32.2
    files:
      mlx_lm/models/deepseek_v3.py: fix/deepseek_v3.py
      mlx_lm/models/mla.py: fix/mla.py
"""


def _fixture_matrix(folder: Path, cache: Path) -> Path:
    _fixrt(folder)
    shipped = matrix.load(SHIPPED)
    patched = arms.materialise(
        shipped.arms["mlx-lm-0.32.2-patched"], shipped.runtimes["mlx-lm"], cache
    )
    (folder / "fix").mkdir()
    for name in ("deepseek_v3.py", "mla.py"):
        shutil.copy(patched.site / "mlx_lm" / "models" / name, folder / "fix" / name)
    return _matrix(folder, FIXRT_ARMS)


# --- the matrix: validated at the edge --------------------------------------------------


def test_activating_and_overlay_arms_are_read(tmp_path):
    (tmp_path / "fix").mkdir()
    for name in ("deepseek_v3.py", "mla.py"):
        (tmp_path / "fix" / name).write_text("# a file\n")
    _fixrt(tmp_path)
    m = matrix.load(_matrix(tmp_path, FIXRT_ARMS))
    on, off, over = m.arms["fixrt-on"], m.arms["fixrt-off"], m.arms["overlaid"]
    assert on.activate.module == "fixrt" and dict(on.activate.env) == {"FIXRT_MLA": "1"}
    assert dict(off.activate.env) == {"FIXRT_MLA": None}
    assert on.activate.install == (str(tmp_path / "fixrt"),)
    assert over.overlay.on == m.arms["mlx-lm-0.32.2"] and over.source == over.overlay.on.source
    assert [f.dest for f in over.overlay.files] == [STOCK_SITE_FILE, "mlx_lm/models/mla.py"]
    assert matrix.from_json(json.loads(json.dumps(matrix.to_json(m)))).arms == m.arms
    # env and function are the worker's, not the install's: on and off share one install
    assert arms.arm_key(on) == arms.arm_key(off) != arms.arm_key(m.arms["mlx-lm-0.32.2"])
    assert arms.arm_key(over) != arms.arm_key(m.arms["mlx-lm-0.32.2"])
    before = arms.arm_key(over)
    (tmp_path / "fix" / "mla.py").write_text("# changed\n")
    assert arms.arm_key(matrix.load(tmp_path / "matrix.yaml").arms["overlaid"]) != before


def test_worker_env_sets_unsets_and_names_the_activation():
    act = matrix.Activation("fixrt", "enable", {"ON": "1", "OFF": None})
    arm = matrix.Arm("a", "mlx-lm", matrix.ArmSource("pypi", "x"), "patched", activate=act)
    env = worker_env({"OFF": "1", "KEEP": "k", "MLAGATE_ACTIVATE": "stale"}, arm.activate)
    assert env["ON"] == "1" and "OFF" not in env and env["KEEP"] == "k"
    assert json.loads(env["MLAGATE_ACTIVATE"])["function"] == "enable"
    plain = matrix.Arm("b", "mlx-lm", matrix.ArmSource("pypi", "x"), "stock")
    assert worker_env({"MLAGATE_ACTIVATE": "stale"}, plain.activate) == {}


BAD = [
    ("activate: {function: f}", "arms.bad.activate.module: required key is missing"),
    ("activate: {module: 'a b'}", "arms.bad.activate.module: expected a dotted import path"),
    ("activate: {module: m, function: 'x.y'}", "activate.function: expected a function name"),
    ("activate: {module: m, env: {X: 1}}", "arms.bad.activate.env.X: expected a string"),
    ("activate: {module: m, env: {MLAGATE_X: a}}", "MLAGATE_ variables belong to mlagate"),
    ("activate: {module: m, env: [X]}", "arms.bad.activate.env: expected a mapping"),
    ("activate: {module: m, install: [./nowhere]}", "activate.install[0]: no such path"),
    ("activate: {module: m, when: x}", "arms.bad.activate.when: unknown key"),
]
BAD_OVERLAY = [
    ("overlay: {on: ghost, files: {a.py: f.py}}", "arms.bad.overlay.on: unknown arm 'ghost'"),
    ("overlay: {on: mlx-vlm-0.6.17, files: {a.py: f.py}}", "is of runtime mlx-vlm, not mlx-lm"),
    ("overlay: {on: mlx-lm-0.32.2, files: {../a.py: f.py}}", "inside the arm's site/ (no '..')"),
    ("overlay: {on: mlx-lm-0.32.2, files: {/a.py: f.py}}", "inside the arm's site/ (no '..')"),
    ("overlay: {on: mlx-lm-0.32.2, files: {a.py: missing.py}}", "no such file: missing.py"),
    ("overlay: {on: mlx-lm-0.32.2, files: {}}", "overlay.files: expected a mapping"),
    ("overlay: {on: mlx-lm-0.32.2}", "arms.bad.overlay.files: required key is missing"),
    ("overlay: {on: other, files: {a.py: f.py}}", "'other' is an overlay itself"),
    ("pypi: x\n  overlay: {on: mlx-lm-0.32.2, files: {a.py: f.py}}", "arms.bad.pypi: an overlay"),
]


@pytest.mark.parametrize(("entry", "message"), BAD + BAD_OVERLAY)
def test_a_bad_arm_kind_is_one_line_naming_the_key(tmp_path, entry, message):
    (tmp_path / "f.py").write_text("# f\n")
    source = "" if "overlay" in entry else "pypi: mlx-lm==0.32.2\n  "
    other = "other:\n  runtime: mlx-lm\n  role: stock\n"
    other += "  overlay: {on: mlx-lm-0.32.2, files: {a.py: f.py}}\n"
    text = f"bad:\n  runtime: mlx-lm\n  role: patched\n  {source}{entry}\n{other}"
    path = _matrix(tmp_path, text)
    with pytest.raises(MatrixError) as err:
        matrix.load(path)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith(f"{path}:")


# --- installs ---------------------------------------------------------------------------


def _wheel(folder: Path, requires_python: str) -> Path:
    """A wheel of mlx-lm 0.0.1 holding one module, whose Requires-Python is requires_python."""
    wheel = folder / "mlx_lm-0.0.1-py3-none-any.whl"
    info = "mlx_lm-0.0.1.dist-info"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("mlx_lm/__init__.py", "")
        z.writestr("mlx_lm/models/__init__.py", "")
        z.writestr("mlx_lm/models/tiny.py", "X = 1\n")
        z.writestr(
            f"{info}/METADATA",
            "Metadata-Version: 2.1\nName: mlx-lm\nVersion: 0.0.1\n"
            f"Requires-Python: {requires_python}\n",
        )
        z.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        z.writestr(f"{info}/RECORD", "")
    return wheel


def test_a_runtime_whose_requires_python_excludes_this_one_installs_with_a_note(tmp_path):
    wheel = _wheel(tmp_path, ">=3.99")
    rt = matrix.Runtime("mlx-lm", "mlx_lm", "mlx-lm")
    arm = matrix.Arm("future", "mlx-lm", matrix.ArmSource("pypi", str(wheel)), "stock")
    inst = arms.materialise(arm, rt, tmp_path / "cache")
    assert inst.version == "0.0.1" and (inst.site / "mlx_lm" / "models" / "tiny.py").is_file()
    (note,) = inst.notes
    assert "requires a different Python" in note and ">=3.99" in note
    assert "--ignore-requires-python" in note and "\n" not in note
    assert json.loads((inst.dir / "arm.json").read_text())["notes"] == [note]


def test_a_pinned_release_pip_finds_only_for_a_newer_python_installs_with_a_note(
    tmp_path, monkeypatch
):
    """An index that says Requires-Python (as registries do): pip skips the release, the
    retry installs it."""
    _wheel(tmp_path, ">=3.99")
    page = tmp_path / "simple" / "mlx-lm" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(
        '<a href="../../mlx_lm-0.0.1-py3-none-any.whl" data-requires-python="&gt;=3.99">'
        "mlx_lm-0.0.1-py3-none-any.whl</a>"
    )
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "simple").as_uri())
    for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS"):  # this index alone
        monkeypatch.setenv(name, "")
    rt = matrix.Runtime("mlx-lm", "mlx_lm", "mlx-lm")
    arm = matrix.Arm("future", "mlx-lm", matrix.ArmSource("pypi", "mlx-lm==0.0.1"), "stock")
    inst = arms.materialise(arm, rt, tmp_path / "cache")
    assert inst.version == "0.0.1"
    (note,) = inst.notes
    assert "require a different python version" in note and "Requires-Python >=3.99" in note


def test_a_runtime_this_python_satisfies_gets_no_note(tmp_path):
    wheel = _wheel(tmp_path, f">={sys.version_info.major}.{sys.version_info.minor}")
    rt = matrix.Runtime("mlx-lm", "mlx_lm", "mlx-lm")
    arm = matrix.Arm("now", "mlx-lm", matrix.ArmSource("pypi", str(wheel)), "stock")
    assert arms.materialise(arm, rt, tmp_path / "cache").notes == ()


def test_an_activation_module_missing_from_the_install_is_one_line(tmp_path):
    wheel = _wheel(tmp_path, ">=3")
    rt = matrix.Runtime("mlx-lm", "mlx_lm", "mlx-lm")
    act = matrix.Activation("fixrt.nowhere", install=(str(_fixrt(tmp_path / "src")),))
    arm = matrix.Arm("a", "mlx-lm", matrix.ArmSource("pypi", str(wheel)), "patched", activate=act)
    with pytest.raises(arms.ArmError, match=r"^arm a: activate.module fixrt.nowhere is not in"):
        arms.materialise(arm, rt, tmp_path / "cache")


def test_an_overlay_replaces_files_of_its_base_and_leaves_the_base_alone(tmp_path):
    wheel = _wheel(tmp_path, ">=3")
    rt = matrix.Runtime("mlx-lm", "mlx_lm", "mlx-lm")
    base = matrix.Arm("base", "mlx-lm", matrix.ArmSource("pypi", str(wheel)), "stock")
    (tmp_path / "tiny.py").write_text("X = 2\n")
    files = (matrix.OverlayFile("mlx_lm/models/tiny.py", tmp_path / "tiny.py"),)
    over = matrix.Arm("over", "mlx-lm", base.source, "patched", overlay=matrix.Overlay(base, files))
    inst = arms.materialise(over, rt, tmp_path / "cache")
    base_inst = arms.materialise(base, rt, tmp_path / "cache")
    assert (inst.site / "mlx_lm/models/tiny.py").read_text() == "X = 2\n"
    assert (base_inst.site / "mlx_lm/models/tiny.py").read_text() == "X = 1\n"
    manifest = json.loads((inst.dir / "arm.json").read_text())
    assert manifest["overlay"]["on_key"] == base_inst.key
    assert manifest["overlay"]["files"]["mlx_lm/models/tiny.py"]["replaced"] is True
    arms.verify_all({"over": inst, "base": base_inst})


# --- real runs: mlx-lm 0.32.2 ------------------------------------------------------------


@pytest.fixture(scope="module")
def kinds_run(tmp_path_factory, real_cache):
    from .conftest import cli

    folder = tmp_path_factory.mktemp("kinds")
    path = _fixture_matrix(folder, real_cache)
    out = folder / "out"
    args = ["run", "--matrix", path, "--module", "mlx-lm/deepseek_v3", "--suite", "dispatch"]
    args += ["--suite", "probes", "-n", "1", "--out", out]
    for arm in ("mlx-lm-0.32.2", "fixrt-off", "fixrt-on", "fixrt-floor", "overlaid"):
        args += ["--arm", arm]
    proc = cli(*args, cwd=folder, cache=real_cache)
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    by = {}
    for r in rows:
        if r["evidence"] == "synthetic":
            by.setdefault((r["suite"], r["arm"]), []).append(r)
    return proc, by


def _step(result, L, T):
    return next(c for c in result["counters"] if c.get("L") == L and c.get("T") == T)


@pytest.mark.arms
def test_an_activating_arm_is_gated_as_the_runtime_runs(kinds_run):
    proc, by = kinds_run
    assert proc.returncode == 1, proc.stderr  # fixrt-off is red
    off, on = by[("dispatch", "fixrt-off")], by[("dispatch", "fixrt-on")]
    assert len(off) == len(on) == 2  # deepseek-v3 and moonlight-16b
    assert {r["verdict"] for r in off} == {"fail"}, [r["reason"] for r in off]
    assert {r["verdict"] for r in on} == {"pass"}, [r["reason"] for r in on]
    for r in on:  # the counters: the replaced __call__ folded the query at L = 2
        step = _step(r, 2, 64)
        assert step["path"] == "absorbed" and step["ops"]["fold"] > 0
        replaced = r["fingerprint"]["activation"]["replaced"]
        assert replaced == {
            "mlx_lm.models.deepseek_v3.DeepseekV3Attention.__call__": replaced[
                "mlx_lm.models.deepseek_v3.DeepseekV3Attention.__call__"
            ]
        }
        assert replaced["mlx_lm.models.deepseek_v3.DeepseekV3Attention.__call__"].startswith(
            "fixrt/mla.py:"
        )
    for r in off:
        assert _step(r, 2, 64)["path"] == "materialised"
        assert r["fingerprint"]["activation"]["replaced"] == {}


@pytest.mark.arms
def test_an_import_patching_arm_with_a_floor_fails_dispatch_naming_the_floor(kinds_run):
    """Its dispatch once printed the stock arm's summary (both shipped warm caches, 64 and 256,
    lay below the floor); the warm caches now reach past 1024."""
    _, by = kinds_run
    floor, stock = by[("dispatch", "fixrt-floor")], by[("dispatch", "mlx-lm-0.32.2")]
    for r in floor:
        assert r["verdict"] == "fail", r["reason"]
        assert r["reason"].startswith(
            "materialised at L = 2..8 for every warm T < 1100 (T = 4, 64, 256), absorbed from "
            "T = 1100: a cache-length floor; the formula says absorbed from T = 1"
        ), r["reason"]
    for r in stock:
        assert r["reason"].startswith("materialised at L = 2..8 on every warm cache"), r["reason"]


@pytest.mark.arms
def test_forcing_rewrites_the_guards_of_the_replaced_call(kinds_run):
    _, by = kinds_run
    for r in by[("probes", "fixrt-on")]:
        assert r["verdict"] == "pass", r["reason"]
        guards = r["metrics"]["guards"]
        assert [g["source"] for g in guards] == ["use_latent", "use_latent"]
        assert all(g["file"].endswith("fixrt/mla.py") for g in guards)
        assert r["metrics"]["forced"] == {"absorbed": "absorbed", "materialised": "materialised"}
    for r in by[("probes", "fixrt-off")]:
        assert [g["source"] for g in r["metrics"]["guards"]] == ["L == 1", "L == 1"]


@pytest.mark.arms
def test_an_overlay_of_the_patched_file_on_the_stock_arm_passes_dispatch(kinds_run):
    _, by = kinds_run
    assert {r["verdict"] for r in by[("dispatch", "overlaid")]} == {"pass"}
    assert {r["verdict"] for r in by[("dispatch", "mlx-lm-0.32.2")]} == {"fail"}
    for r in by[("dispatch", "overlaid")]:
        assert _step(r, 2, 64)["path"] == "absorbed"


# --- the fake runtime: activation in the worker, fast ---------------------------------------

FAKEFIX = """\
import os

from fakemla.models import good

if os.environ.get("FAKEFIX") == "raise":
    raise RuntimeError("fakefix refuses to start")


def always_absorbed(self, x, mask=None, cache=None):
    q, lat, mask = self.project(x, cache)
    wide = x.shape[1] > 0
    if wide:
        q = self.embed_q(q)
        k = v = lat
    else:
        k = self.embed_q(lat, transpose=False)
        v = self.unembed_out(lat)
    out = self.attend(q, k, v, mask)
    if wide:
        out = self.unembed_out(out)
    return self.finish(out)


def enable():
    good.GoodAttention.__call__ = always_absorbed


if os.environ.get("FAKEFIX") == "1":
    enable()
"""


def _fake_activating(fake_matrix: Path, env_value: str, function: str = "null") -> Path:
    (fake_matrix.parent / "fakefix").mkdir()
    (fake_matrix.parent / "fakefix" / "__init__.py").write_text(FAKEFIX)
    arm = (
        "  fake-fixed-at-import:\n    runtime: fakemla\n    path: fakemla-tree\n"
        f"    role: patched\n    activate: {{module: fakefix, env: {{FAKEFIX: '{env_value}'}},"
        f" function: {function}, install: [fakefix]}}\n"
    )
    text = fake_matrix.read_text().replace("geometries:  # geometries", arm + "geometries:", 1)
    fake_matrix.write_text(text)
    return fake_matrix


def _fake_run(fake_matrix, fake_cache, tmp_path, run_cli):
    out = tmp_path / "out"
    proc = run_cli(
        "run", "--matrix", fake_matrix, "--module", "fake/good", "--arm", "fake-fixed-at-import",
        "--out", out, cache=fake_cache,
    )  # fmt: skip
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    (row,) = [r for r in rows if r["evidence"] == "synthetic"]
    return proc, row


@pytest.mark.parametrize(("env_value", "function"), [("1", "null"), ("0", "enable")])
def test_a_replaced_call_runs_and_is_forced_in_its_own_guards(
    fake_matrix, fake_cache, tmp_path, run_cli, env_value, function
):
    """Replaced at import behind a variable, or by the function the arm names."""
    path = _fake_activating(fake_matrix, env_value, function)
    proc, row = _fake_run(path, fake_cache, tmp_path, run_cli)
    assert row["verdict"] == "pass", (row["reason"], proc.stderr)
    assert row["metrics"]["paths"]["L=2,T=16"] == "absorbed"  # the replacement ran
    guards = row["metrics"]["guards"]
    assert [g["source"] for g in guards] == ["wide", "wide"]
    assert all(g["function"] == "always_absorbed" for g in guards)
    assert row["metrics"]["forced"] == {"absorbed": "absorbed", "materialised": "materialised"}
    assert row["fingerprint"]["activation"]["replaced"] == {
        "fakemla.models.good.GoodAttention.__call__": "fakefix/__init__.py:9 in always_absorbed"
    }


def test_an_activation_that_raises_fails_the_case(fake_matrix, fake_cache, tmp_path, run_cli):
    proc, row = _fake_run(_fake_activating(fake_matrix, "raise"), fake_cache, tmp_path, run_cli)
    assert row["verdict"] == "fail", row["reason"]
    assert "the runtime raised" in row["reason"] and "fakefix refuses to start" in row["reason"]


def test_an_arms_activation_and_notes_do_not_make_another_environment():
    from mlagate.report import page

    base = {
        "python": "3.11",
        "backend": "cpu",
        "arm_dir": "/a",
        "arm_notes": [],
        "activation": None,
    }
    rows = [
        {"arm": "stock", "fingerprint": {**base, "arm": "stock"}},
        {
            "arm": "on",
            "fingerprint": {
                **base,
                "arm": "on",
                "arm_notes": ["installed with --ignore-requires-python"],
                "activation": {"module": "fixrt", "replaced": {"a.B.__call__": "fixrt/mla.py:1"}},
            },
        },
    ]
    envs, _, arms_seen = page.environments(rows)
    assert len(envs) == 1 and len(arms_seen) == 2


# --- mlx-lm 0.31.3 in the shipped matrix -----------------------------------------------------

MLX_LM_0313 = {
    "mlx-lm/deepseek_v3",
    "mlx-lm/deepseek_v32",
    "mlx-lm/glm4_moe_lite",
    "mlx-lm/kimi_linear",
    "mlx-lm/longcat_flash",
}


def test_mlx_lm_0313_has_the_five_modules_it_ships():
    shipped = matrix.load(SHIPPED)
    arm = shipped.arms["mlx-lm-0.31.3"]
    assert arm.role == "stock" and arm.source.spec == "mlx-lm==0.31.3"
    held = {m.id for m in shipped.modules.values() if arm in shipped.arms_for(m)}
    assert held == MLX_LM_0313


@pytest.mark.arms
def test_mlx_lm_0313_is_a_control_in_the_shipped_matrix(tmp_path, run_cli, real_cache):
    out = tmp_path / "out"
    proc = run_cli(
        "run", "--arm", "mlx-lm-0.31.3", "--module", "mlx-lm/deepseek_v3", "--suite", "probes",
        "--suite", "dispatch", "-n", "1", "--out", out, cwd=ROOT, cache=real_cache,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the control fails as it must
    rows = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    verdicts = {
        (r["suite"], r["geometry"]["id"], r["verdict"]) for r in rows if r["checkpoint"] is None
    }
    assert verdicts == {
        ("probes", "deepseek-v3", "pass"),
        ("probes", "moonlight-16b", "pass"),
        ("dispatch", "deepseek-v3", "fail"),
        ("dispatch", "moonlight-16b", "fail"),
    }
    assert "controls: 2 of 2 control cases confirmed failing" in proc.stdout + proc.stderr
