"""The serving operators (mlagate.mutate.servingoperators): padding terms, per-row offsets,
batch-size guards and quantized tuples found with ast, and the fake runtime's padding mutants
through serving_batched."""

import shutil
import subprocess
import textwrap
from pathlib import Path

import mlx.core as mx
import pytest

from mlagate.mutate import killmatrix, operators

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SERVING = list(operators.SERVING_OPERATORS)

FILES = {
    "rt/models/att.py": """
        import mlx.core as mx
        from .base import create_attention_mask
        from .lin import linear
        from .mla import latent_length

        class Att:
            def __call__(self, x, mask=None, cache=None):
                B, L, _ = x.shape
                offset = cache.offset if cache is not None else 0
                if isinstance(cache.offset, int):
                    pass
                return linear(self.p, x), latent_length(x), offset
        """,
    "rt/models/lin.py": """
        def linear(m, x):
            return _batched(m, x)

        def _batched(m, x):
            if x.shape[0] == 1:
                return m(x)
            return m(x)

        def unused(m, x):
            if x.shape[0] == 1:
                return m(x)
        """,
    "rt/models/mla.py": """
        def latent_length(kv):
            arr = kv[0] if isinstance(kv, tuple) else kv
            return arr.shape[-2]
        """,
    "rt/models/base.py": """
        def create_attention_mask(h, cache=None):
            return cache.make_mask(h.shape[1])

        def create_causal_mask(N, offset=0, left_padding=None):
            mask = offset >= N
            if left_padding is not None:
                mask = mask & (left_padding <= N)
            return mask
        """,
    "rt/models/cache.py": """
        class BatchKVCache:
            def prepare(self, left_padding=None):
                self.left_padding += left_padding
                self.offset = self.offset - left_padding

            def finalize(self, pad):
                self.left_padding = self.left_padding + pad

            def make_mask(self, N):
                return create_causal_mask(N, offset=self._idx, left_padding=self.left_padding)

            def extend(self, other):
                self.left_padding += other.left_padding

        class BatchRotatingKVCache:
            def make_mask(self, N):
                return create_causal_mask(N, left_padding=self.left_padding)
        """,
}

EXPECTED = {
    "row_offset: cache.offset -> (cache.offset[:1] if isinstance(cache.offset, mx.array) else "
    "cache.offset) @ rt/models/att.py::Att.__call__",
    "batch_guard: x.shape[0] == 1 -> x.shape[0] != 1 @ rt/models/lin.py::_batched",
    "quant_tuple: kv[0] -> kv[1] @ rt/models/mla.py::latent_length",
    "quant_tuple: kv[0] -> kv[2] @ rt/models/mla.py::latent_length",
    "pad_drop: mask & (left_padding <= N) -> mask @ rt/models/base.py::create_causal_mask",
    "pad_shift: left_padding <= N -> left_padding < N @ rt/models/base.py::create_causal_mask",
    "pad_drop: self.left_padding += left_padding -> pass @ rt/models/cache.py::"
    "BatchKVCache.prepare",
    "pad_drop: self.offset - left_padding -> self.offset @ rt/models/cache.py::"
    "BatchKVCache.prepare",
    "pad_drop: self.left_padding = self.left_padding + pad -> pass @ rt/models/cache.py::"
    "BatchKVCache.finalize",
    "pad_drop: create_causal_mask(N, offset=self._idx, left_padding=self.left_padding) -> "
    "create_causal_mask(N, offset=self._idx, left_padding=None) @ rt/models/cache.py::"
    "BatchKVCache.make_mask",
}


def _site(tmp_path) -> Path:
    site = tmp_path / "site"
    for rel, text in {**FILES, "rt/__init__.py": "", "rt/models/__init__.py": ""}.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(textwrap.dedent(text).lstrip())
    return site


def _generate(site, ops=SERVING):
    return operators.generate("a", site, "rt/att", "rt.models.att", "Att", ops)


def test_serving_operators_find_their_sites_by_ast(tmp_path):
    """Each site once; not the batch-size test of a function the module never reaches, not
    isinstance's read of the offset, not a sliding-window cache, not a method that only merges
    batches (extend)."""
    assert {m.id for m in _generate(_site(tmp_path))} == EXPECTED


def test_serving_mutants_apply_compile_and_keep_ids_when_lines_move(tmp_path):
    site = _site(tmp_path)
    mutants = _generate(site)
    for i, m in enumerate(mutants):
        copy = tmp_path / f"m{i}"
        shutil.copytree(site, copy)
        (tmp_path / f"m{i}.patch").write_text(m.patch)
        subprocess.run(["git", "apply", "-p1", str(tmp_path / f"m{i}.patch")], cwd=copy, check=True)
        compile((copy / m.file).read_text(), m.file, "exec")
    att = site / "rt" / "models" / "att.py"
    att.write_text("# moved\n\n" + att.read_text())
    assert {m.id for m in _generate(site)} == {m.id for m in mutants}


def test_row_offset_keeps_an_int_offset_and_broadcasts_the_first_row():
    """The mutant changes nothing for one sequence (an int offset) and gives every row of a
    batch the first row's offset."""
    new = next(m for m in _generate_once() if m.operator == "row_offset").after

    class Cache:
        pass

    cache = Cache()
    cache.offset = 7
    assert eval(new, {"mx": mx, "cache": cache}) == 7  # noqa: S307 - the mutant's own text
    cache.offset = mx.array([5, 3, 1])
    assert eval(new, {"mx": mx, "cache": cache}).tolist() == [5]  # noqa: S307


def _generate_once():
    import tempfile

    return _generate(_site(Path(tempfile.mkdtemp())))


def test_operator_filter_and_unknown_files(tmp_path):
    site = _site(tmp_path)
    assert {m.operator for m in _generate(site, ["batch_guard"])} == {"batch_guard"}
    assert _generate(site, ["boundary"]) == []  # no dispatch here: the serving ops do not leak
    (site / "rt" / "models" / "cache.py").unlink()  # a runtime without batch caches
    assert not any("cache.py" in m.file for m in _generate(site))


@pytest.mark.mutate
def test_padding_mutants_of_the_fake_runtime_are_killed_by_serving_batched(tmp_path):
    """The fake runtime's batch cache: its padding mask's comparison off by one and its finalize
    not counting the rolled right padding are both killed by serving_batched; the mutant that
    records an all-zero right padding (`> 0` made `>= 0`) rolls by zero, so it survives."""
    from tests.conftest import cli

    out = tmp_path / "out"
    proc = cli(
        "mutate", "--matrix", FIXTURES / "fake-serving.yaml", "--arm", "fake-patched",
        "--module", "fake/good", "--operator", "pad_drop", "--operator", "pad_shift",
        "--suite", "serving_batched", "--out", out, "-n", "1", cache=tmp_path / "cache",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the survivor
    doc = killmatrix.load(out / "kill-matrix.json")
    status = {m["id"]: (m["status"], m.get("killed_by") or None) for m in doc["mutants"]}
    cache = "@ fakemla/models/cache.py::BatchKVCache"
    assert status == {
        "pad_shift: mx.arange(T)[None] >= self.left_padding[:, None] -> mx.arange(T)[None] > "
        f"self.left_padding[:, None] {cache}.padding_mask": ("killed", ["serving_batched"]),
        f"pad_drop: self.left_padding = self.left_padding + pad -> pass {cache}.finalize": (
            "killed",
            ["serving_batched"],
        ),
        f"pad_shift: max(right_padding) > 0 -> max(right_padding) >= 0 {cache}.prepare": (
            "survived",
            None,
        ),
    }


KILLED_ON_CPU = 12  # docs/mutation.md, "The serving operators": killed by serving_batched


@pytest.mark.arms
def test_the_shipped_arguments_cover_exactly_the_unreachable_serving_mutants(real_cache):
    """On the shipped patched arms, deepseek_v3 and glm5_next: matrix.yaml argues 21 serving
    mutants on the CPU (native_batch_linear's batch_guard there only) and 20 elsewhere; none of
    the 12 that serving_batched killed on the CPU is among them, nor the
    finalize of mlx-vlm's BatchKVCache that its per-row rejection kills (a glob that swallowed
    one would hide a mutant the suites can see)."""
    from mlagate import matrix
    from mlagate.arm import arms
    from mlagate.mutate import run
    from tests.conftest import ROOT

    shipped = matrix.load(ROOT / "matrix.yaml")
    ids = ["mlx-lm-0.32.2-patched", "mlx-vlm-0.7.10"]
    installs = arms.materialise_all(shipped, ids, real_cache)
    found = []
    modules = {
        "mlx-lm-0.32.2-patched": ["mlx-lm/deepseek_v3"],
        "mlx-vlm-0.7.10": ["mlx-vlm/deepseek_v3", "mlx-vlm/glm5_next"],
    }
    for arm, mods in modules.items():
        ms = [shipped.modules[m] for m in mods]
        spec = [(m.id, m.import_path, m.attention_for(arm)) for m in ms]
        found += operators.generate_many(arm, installs[arm].site, spec, SERVING)
    argued = {m.id for m in found if run.equivalent_reason(shipped, m)}
    on_metal = {m.id for m in found if run.equivalent_reason(shipped, m, "metal")}
    assert argued - on_metal == {next(m.id for m in found if "native_batch_linear" in m.id)}
    killed = killmatrix.load(ROOT / "docs/reference/cpu/mutation/kill-matrix-serving.json")
    killed_ids = {m["id"] for m in killed["mutants"] if m["status"] == "killed"}
    later = killmatrix.load(ROOT / "docs/reference/cpu/mutation/kill-matrix-serving-survivors.json")
    killed_later = {m["id"] for m in later["mutants"] if m["status"] == "killed"}
    assert len(found) == 34 and len(argued) == 21 and len(killed_ids) == KILLED_ON_CPU
    assert len(killed_later) == 4 and not argued & (killed_ids | killed_later)
    assert {m.id for m in found} >= killed_ids
