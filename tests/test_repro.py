"""mlagate repro: each measured finding's standalone script reproduces it in a fresh
environment holding only the arm's packages (no mlagate), and a script of a finding that an arm
does not have (fixed there, or a module that honours the setting) does not reproduce there."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mlagate import backends
from mlagate import matrix as matrix_mod
from mlagate.paths import default_path
from mlagate.repro import env
from mlagate.repro.core import ReproRequest, repro

SHIPPED = matrix_mod.load(default_path())


def case(suite, module, arm, geometry):
    return f"{suite}::{module}::{arm}::{geometry}::float32::cpu"


# (case, --config, reproduces, expected): every finding of docs/findings.md with a script, on an
# arm where it holds, and where it does not (fixed there, or a module without the defect).
# Expected is what the matrix says: True where an expectation (or an `unservable` declaration
# naming the module) holds it, False where nothing does, None where a declaration for every
# module of the suite allows it (the runtime decides, as the suite's own probe does).
CASES = [
    (
        case("serving_quantized", "mlx-lm/deepseek_v3", "mlx-lm-0.32.2-patched", "deepseek-v3"),
        "q8",
        True,
        None,
    ),  # AttributeError: 'list' object has no attribute 'swapaxes' (patched site)
    (
        case("serving_quantized", "mlx-lm/deepseek_v32", "mlx-lm-0.32.2", "deepseek-v3.2-exp"),
        "q4",
        True,
        None,
    ),  # maybe_quantize_kv_cache leaves the caches unquantized
    (
        case("serving_rotating", "mlx-lm/deepseek_v32", "mlx-lm-0.32.2", "deepseek-v3.2-exp"),
        None,
        True,
        None,
    ),  # make_cache ignores max_kv_size (no --config: the declaration names the finding)
    (
        case("serving_rotating", "mlx-lm/deepseek_v3", "mlx-lm-0.32.2", "deepseek-v3"),
        None,
        True,
        True,
    ),  # a verify step past the window differs from decoding
    (
        case("serving_batched", "mlx-lm/kimi_linear", "mlx-lm-0.31.3", "kimi-linear-48b"),
        None,
        True,
        True,
    ),  # padded rows differ from their plain runs
    (
        case("serving_batched", "mlx-lm/kimi_linear", "mlx-lm-0.32.2", "kimi-linear-48b"),
        "padded_rows",
        False,
        False,
    ),  # fixed in 0.32.2
    (
        case("serving_rotating", "mlx-lm/deepseek_v3", "mlx-lm-0.32.2", "deepseek-v3"),
        "max_kv_size",
        False,
        None,
    ),  # deepseek_v3 has no make_cache: the rotating cache is offered
    (
        case("causal", "mlx-lm/mistral4", "mlx-lm-0.32.2", "mistral-small-4"),
        None,
        True,
        True,
    ),  # the forced absorbed branch at L = 2 raises: a "causal" mask string
    (
        case("causal", "mlx-lm/mistral4", "mlx-lm-0.32.2-patched", "mistral-small-4"),
        "forced_absorbed",
        False,
        False,
    ),  # the patched branch makes the mask: bitwise with decoding
    (
        case("trim_after_rejection", "mlx-vlm/glm5_next", "mlx-vlm-0.6.17", "glm-5.3-flash"),
        None,
        True,
        True,
    ),  # 14 of 20 rejections: the next decode raises on the stale pool
    (
        case("trim_after_rejection", "mlx-vlm/glm5_next", "mlx-vlm-0.7.10", "glm-5.3-flash"),
        "rejection",
        False,
        False,
    ),  # the rewrite's speculative cache transaction: bitwise
    (
        case("pool_equivalence", "mlx-vlm/hy_v4", "mlx-vlm-0.7.10", "hy-v4"),
        None,
        True,
        True,
    ),  # the compiled top-k: wide steps off by millions of ULPs
    (
        case("pool_equivalence", "mlx-vlm/deepseek_v32", "mlx-vlm-0.7.10", "deepseek-v3.2-exp"),
        "wide_step",
        False,
        False,
    ),  # an indexer without the compiled partition
    (
        case("serving_prompt_reuse", "mlx-vlm/glm5_next", "mlx-vlm-0.7.10", "glm-5.3-flash"),
        None,
        True,
        True,
    ),  # a CacheList has no offset: nothing trimmed
    (
        case("serving_prompt_reuse", "mlx-vlm/deepseek_v3", "mlx-vlm-0.7.10", "deepseek-v3"),
        "trim",
        False,
        False,
    ),  # a KVCache a layer: trimmed, bitwise
    (
        case("dispatch", "mlx-vlm/hy_v4", "mlx-vlm-0.7.10", "hy-v4"),
        None,
        True,
        True,
    ),  # its own sequence_length == 1 guard: warm steps materialise
    (
        case("dispatch", "mlx-vlm/glm5_next", "mlx-vlm-0.7.10", "glm-5.3-flash"),
        None,
        True,
        True,
    ),  # length <= 8 absorbs on a cold cache
    (
        case("dispatch", "mlx-vlm/deepseek_v32", "mlx-vlm-0.7.10", "deepseek-v3.2-exp"),
        "path_rule",
        False,
        False,
    ),  # the fixed module follows max_absorbed_queries
    (
        case("serving_rotating", "mlx-vlm/deepseek_v3", "mlx-vlm-0.6.17", "deepseek-v3"),
        None,
        True,
        True,
    ),  # mlx-vlm's RotatingKVCache: the same verify step past the window
    (
        case("serving_rotating", "mlx-vlm/deepseek_v3", "mlx-vlm-0.7.10", "deepseek-v3"),
        "verify",
        False,
        False,
    ),  # fixed in 0.7.10
    (
        case("serving_quantized", "mlx-vlm/deepseek_v3", "mlx-vlm-0.7.10", "deepseek-v3"),
        "q8",
        True,
        None,
    ),  # mlx-vlm's QuantizedKVCache: the same packed tuple in the rope score
    (
        case("serving_rotating", "mlx-vlm/glm5_next", "mlx-vlm-0.7.10", "glm-5.3-flash"),
        "max_kv_size",
        True,
        None,
    ),  # its make_cache: a KVCache and a PoolingCache, 40 tokens held with W = 32
    (
        case("serving_quantized", "mlx-vlm/glm5_next", "mlx-vlm-0.7.10", "glm-5.3-flash"),
        "q8_batched",
        True,
        True,
    ),  # mx.quantize refuses the BatchPoolingCache's boolean mask
    (
        case("serving_quantized", "mlx-vlm/deepseek_v3", "mlx-vlm-0.7.10", "deepseek-v3"),
        "q8_batched",
        False,
        False,
    ),  # its batched caches quantize; the step then raises the single cache's finding
    (
        case("probes", "mlx-lm/mistral4", "mlx-lm-0.32.2", "mistral-small-4"),
        None,
        True,
        True,
    ),  # the probes' forced absorbed step raises: the causal suite's script, its settings
    (
        case("serving_batched", "mlx-lm/mistral4", "mlx-lm-0.32.2", "mistral-small-4"),
        "forced_absorbed",
        True,
        True,
    ),  # declared for the absorbed configurations (stock-mistral4-absorbed-raises)
    (
        case("equivalence", "mlx-lm/deepseek_v3", "mlx-lm-0.32.2-patched", "deepseek-v3"),
        "tf32",
        False,
        False,
    ),  # MLX's CPU backend: float32 matmuls within 10 ULPs of float64 (CUDA: TF32, below)
    (
        case(
            "speculative_transaction", "mlx-lm/deepseek_v32", "mlx-lm-0.32.2", "deepseek-v3.2-exp"
        ),
        "selections",
        False,
        False,
    ),  # float32 on the CPU: 112 of 112 selections equal decoding (CUDA: swaps, below)
    (
        case("crossover", "mlx-lm/deepseek_v3", "mlx-lm-0.32.2", "deepseek-v3"),
        "formula_width",
        False,
        False,
    ),  # a timing: 4 heads on the CPU, the two paths within a few per cent at the formula's 148
    (
        case("speculative", "mlx-lm/deepseek_v3", "mlx-lm-0.32.2", "deepseek-v3"),
        "decode_after_verify",
        False,
        False,
    ),  # a timing: decoding keeps its speed after verify steps
]

# Timings reproduce on the machine that measures them: their scripts' runs are recorded
# (RECORDED), never asserted in a unit test (docs/findings.md).
TIMINGS = {"formula_width", "decode_after_verify"}

# The GPU-only findings, run on an NVIDIA H100 (MLX 0.32.4 CUDA, full profile) on 7 December:
# each folder of docs/reference/h100/repro holds the script as mlagate repro wrote it, its
# case.json and its output. (folder, --config, reproduced there)
RECORDED_AT = Path(__file__).parent.parent / "docs" / "reference" / "h100" / "repro"
# Edits to a script since its recorded run, each (text then, text now): the selections script
# has since refused a position where a run recorded no selection (SystemExit: no verdict), which
# it had counted as equal; in the recorded runs every position of both runs held one (T > top-k).
NO_SELECTION = (
    "                compared += 1\n"
    "                if a != b:\n"
    "                    swapped = sorted(set(a or ()) ^ set(b or ()))",
    "                if a is None or b is None:\n"
    "                    raise SystemExit("
    'f"seed {seed} indexer {who} position {pos}: no selection")\n'
    "                compared += 1\n"
    "                if a != b:\n"
    "                    swapped = sorted(set(a) ^ set(b))",
)
SINCE_RUN = {"selections": (NO_SELECTION,)}
RECORDED = [
    ("tf32-patched", "tf32", True),
    ("selections-stock", "selections", True),
    ("selections-patched", "selections", True),
    ("crossover-v3-stock", "formula_width", True),
    ("crossover-v3-patched", "formula_width", True),
    ("crossover-glm-patched", "formula_width", False),
    ("decode-stock", "decode_after_verify", True),
    ("decode-patched", "decode_after_verify", False),
]


def test_each_findings_declarations_are_the_shipped_matrixs():
    from mlagate.repro.findings import FINDINGS

    names = {u.finding for u in SHIPPED.unservable}
    assert {n for f in FINDINGS.values() for n in f.unservable} <= names


@pytest.mark.parametrize(("cid", "config", "_", "expected"), CASES, ids=lambda v: str(v)[:60])
def test_what_the_matrix_expects_of_each_case(cid, config, _, expected, tmp_path):
    """Without running: expected as the matrix says, and a script written either way."""
    result = repro(ReproRequest(SHIPPED, cid, tmp_path, config=config, run=False))
    assert result.expected is expected and result.exit_code == 0, result.line()
    assert result.script.is_file()


def test_a_fixed_or_unexpected_finding_exits_1_and_one_the_runtime_decides_never_does():
    from mlagate.repro.core import ReproResult
    from mlagate.repro.findings import FINDINGS

    def code(expected, reproduced):
        out = "REPRODUCED: x" if reproduced else "NOT REPRODUCED: x"
        run = env.Run(1 if reproduced else 0, out)
        f = FINDINGS["padded_rows"]
        return ReproResult(f, "c", Path("s"), Path("i"), expected, run).exit_code

    assert (code(True, True), code(True, False), code(False, True), code(False, False)) == (
        0,
        1,
        1,
        0,
    )
    assert (code(None, True), code(None, False)) == (0, 0)


@pytest.fixture(scope="module")
def envs(tmp_path_factory):
    """One environment per arm, shared by that arm's scripts (each made fresh per session)."""
    root = tmp_path_factory.mktemp("envs")
    return lambda arm: root / arm


@pytest.mark.arms
@pytest.mark.parametrize(
    ("cid", "config", "reproduces", "expected"),
    [c for c in CASES if c[1] not in TIMINGS],
    ids=lambda v: str(v)[:60],
)
def test_each_finding_reproduces_where_it_holds_and_not_where_it_does_not(
    cid, config, reproduces, expected, envs, tmp_path
):
    out = tmp_path / "out"
    arm = cid.split("::")[2]
    result = repro(ReproRequest(SHIPPED, cid, out, config=config, venv=envs(arm)))
    assert result.reproduced is reproduces, result.run.output
    assert result.expected is expected and result.exit_code == 0, result.line()
    text = result.script.read_text()
    assert "mlagate" not in text.split('"""', 2)[2].replace("mlagate repro", ""), "imports mlagate"
    python = env._python(envs(arm))
    alone = subprocess.run([str(python), "-I", "-c", "import mlagate"], capture_output=True)
    assert alone.returncode != 0, "the environment holds mlagate"
    issue = result.issue.read_text()
    for part in ("## Environment", "- mlx: ", "## Expected", result.run.verdict_line, "```python"):
        assert part in issue, part


def test_a_script_that_cannot_run_to_a_verdict_is_not_a_reproduction():
    """A traceback (exit 1, no verdict line) or a verdict line the exit status contradicts
    decides nothing."""
    assert env.Run(1, "Traceback ...\nValueError: x").reproduced is None
    assert env.Run(0, "REPRODUCED: x").reproduced is None
    assert env.Run(1, "NOT REPRODUCED: x").reproduced is None
    assert env.Run(1, "a\nREPRODUCED: x").reproduced is True
    assert env.Run(0, "NOT REPRODUCED: x").reproduced is False


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["serving_rotating::mlx-lm/deepseek_v3"], "is not suite::module::arm"),
        ([case("serving_rotating", "mlx-lm/nope", "mlx-lm-0.32.2", "deepseek-v3")], "module"),
        (
            [case("serving_rotating", "mlx-lm/deepseek_v3", "mlx-lm-0.32.2", "glm-5.3-flash")],
            "not one of mlx-lm/deepseek_v3's",
        ),
        (
            [
                case("serving_rotating", "mlx-lm/deepseek_v3", "mlx-lm-0.32.2", "deepseek-v3"),
                "--config",
                "q9",
            ],
            "--config: q9 names no finding",
        ),
        ([case("probes", "mlx-lm/deepseek_v3", "mlx-lm-0.32.2", "deepseek-v3")], "--config"),
        (
            [
                case("serving_rotating", "mlx-lm/deepseek_v3", "mlx-lm-0.32.2", "deepseek-v3"),
                "--out",
                "{file}",
            ],
            "--out: ",
        ),
        (
            [
                case("serving_rotating", "mlx-lm/deepseek_v3", "mlx-lm-0.32.2", "deepseek-v3"),
                "--venv",
                "{file}",
            ],
            "--venv: ",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, said, run_cli, tmp_path):
    (tmp_path / "file").write_text("x")
    argv = [str(a).replace("{file}", str(tmp_path / "file")) for a in argv]
    out = [] if "--out" in argv else ["--out", tmp_path / "o"]
    proc = run_cli("repro", *argv, *out, "--no-run")
    assert proc.returncode == 2, proc.stderr
    assert said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_no_run_writes_the_script_its_case_and_the_issue(run_cli, tmp_path):
    cid = case("serving_rotating", "mlx-lm/deepseek_v3", "mlx-lm-0.32.2", "deepseek-v3")
    proc = run_cli("repro", cid, "--out", tmp_path / "o", "--no-run")
    assert proc.returncode == 0, proc.stderr
    script = tmp_path / "o" / "repro_rotating_verify.py"
    compile(script.read_text(), str(script), "exec")
    assert '"seed": 14' in script.read_text() and '"max_kv_size": 32' in script.read_text()
    assert (tmp_path / "o" / "case.json").is_file() and (tmp_path / "o" / "issue.md").is_file()


@pytest.mark.parametrize(("folder", "config", "reproduced"), RECORDED, ids=lambda v: str(v))
def test_each_recorded_gpu_run_is_of_todays_script_and_says_what_the_matrix_expects(
    folder, config, reproduced, tmp_path
):
    """The recorded run is of the script mlagate repro writes now (its code: a changed script
    needs a new run), its verdict line and exit status agree, and the matrix expects that verdict
    there."""

    recorded = RECORDED_AT / folder
    cid = json.loads((recorded / "case.json").read_text())["case"]
    result = repro(ReproRequest(SHIPPED, cid, tmp_path, profile="full", config=config, run=False))
    today, then = (
        s.read_text().split('"""', 2)[2] for s in (result.script, recorded / result.script.name)
    )
    for before, after in SINCE_RUN.get(config, ()):
        assert then.count(before) == 1, (folder, before)
        then = then.replace(before, after)
    assert today == then, folder  # the docstring's pip line names this machine's MLX extra
    output = (recorded / "output.txt").read_text()
    status = int(output.strip().splitlines()[-1].split()[1])  # "exit N in S s"
    run = env.Run(status, output)
    assert run.reproduced is reproduced, output
    assert result.expected is reproduced, result.line()
    assert "backend: Device(gpu, 0)" in output


@pytest.mark.arms
@pytest.mark.parametrize(("folder", "config", "reproduced"), RECORDED, ids=lambda v: str(v))
def test_each_gpu_finding_reproduces_in_a_fresh_environment_on_a_cuda_runner(
    folder, config, reproduced, envs, tmp_path
):
    """Where MLX runs on CUDA (MLAGATE_BACKEND=cuda, a registry reachable): each recorded GPU
    case's script, written now and run in a fresh environment with MLX's CUDA extra, says what
    the matrix expects. Elsewhere it is skipped; the recorded runs are held above."""
    if backends.default_backend() != "cuda":
        pytest.skip("needs MLX's CUDA backend: MLAGATE_BACKEND=cuda on a CUDA runner")
    cid = json.loads((RECORDED_AT / folder / "case.json").read_text())["case"]
    venv = envs(cid.split("::")[2] + "-cuda")
    result = repro(ReproRequest(SHIPPED, cid, tmp_path, profile="full", config=config, venv=venv))
    assert result.reproduced is reproduced, result.line()  # the matrix's expectation (above)


def test_a_backend_finding_holds_on_its_backend_and_a_setting_reads_the_profile(tmp_path):
    cuda = case("equivalence", "mlx-lm/deepseek_v3", "mlx-lm-0.32.2", "deepseek-v3")
    cuda = cuda.replace("::cpu", "::cuda")
    result = repro(ReproRequest(SHIPPED, cuda, tmp_path / "c", config="tf32", run=False))
    assert result.expected and '"mlx[cuda' in result.script.read_text()  # the case's backend
    cid = case("crossover", "mlx-lm/deepseek_v3", "mlx-lm-0.32.2", "deepseek-v3")
    for profile, cache in (("quick", 1024), ("full", 8192)):
        out = tmp_path / profile
        repro(ReproRequest(SHIPPED, cid, out, profile=profile, config="formula_width", run=False))
        written = json.loads((out / "case.json").read_text())
        assert written["cache"] == cache and written["tolerance"] == 0.10
    spec = case("speculative", "mlx-lm/deepseek_v3", "mlx-lm-0.32.2", "deepseek-v3")
    repro(ReproRequest(SHIPPED, spec, tmp_path / "s", config="decode_after_verify", run=False))
    written = json.loads((tmp_path / "s" / "case.json").read_text())
    assert written["contexts"] == [64, 256, 1024] and written["num_draft"] == 3


def test_the_crossover_scripts_formula_is_mlagates():
    """The script carries its own copy of the cost model (it runs without mlagate): it gives
    mlagate.crossover's widest absorbed width for every shipped geometry and cache, the caches
    where the next width is an exact tie (the strict bound decides) included."""
    from mlagate import crossover
    from mlagate.repro.findings import FINDINGS

    script: dict = {"__name__": "repro"}
    exec(FINDINGS["crossover_too_wide"].body(), script)
    for g in SHIPPED.geometries.values():
        r, n, v = g.kv_lora_rank, g.qk_nope_head_dim, g.v_head_dim
        if 2 * r <= n + v:
            continue
        ties = [
            T
            for T in range(11000)
            if crossover.is_tie(crossover.widest_absorbed(T, r, n, v) + 1, T, r, n, v)
        ]
        assert ties, g.id  # every shipped geometry has one below 11000
        for T in (0, 1, 63, 64, 1024, 8192, 65536, *ties):
            assert script["widest_absorbed"](T, r, n, v) == crossover.widest_absorbed(T, r, n, v)


@pytest.mark.arms
def test_a_position_a_run_recorded_no_selection_for_is_no_verdict_never_equal(envs, tmp_path):
    """The selections script on a cache under the top-k (the indexer selects nothing there):
    no verdict, where it had counted the two missing selections as equal."""
    cid = case(
        "speculative_transaction", "mlx-lm/deepseek_v32", "mlx-lm-0.32.2", "deepseek-v3.2-exp"
    )
    result = repro(
        ReproRequest(SHIPPED, cid, tmp_path, config="selections", venv=envs("mlx-lm-0.32.2"))
    )
    assert result.reproduced is False, result.run.output  # the environment, and a real verdict
    text = result.script.read_text()
    assert text.count('"beyond_topk": 19') == 1
    result.script.write_text(text.replace('"beyond_topk": 19', '"beyond_topk": -8'))  # T = 8
    run = env.run(env._python(envs("mlx-lm-0.32.2")), result.script)
    assert run.reproduced is None and "no selection" in run.output, run.output


SLOWED = '''
def planted(model, after_verify):
    """A planted slow-down: 20 ms more in each one-token step, after the first verify-width
    step (after_verify) or from the first step on."""
    cls, seen = type(model), {"verify": not after_verify}
    call = cls.__call__

    def slowed(self, inputs, *args, **kwargs):
        width = inputs.shape[1]
        seen["verify"] = seen["verify"] or 1 < width <= 16
        if width == 1 and seen["verify"]:
            time.sleep(0.02)
        return call(self, inputs, *args, **kwargs)

    cls.__call__ = slowed
    return model


def check():'''


@pytest.mark.arms
def test_the_decode_script_reports_a_slow_down_after_verify_steps_and_not_one_throughout(
    envs, tmp_path
):
    """decode_after_verify's verdict on two planted runtimes: decoding that slows only after the
    verify steps reproduces; decoding as slow before them as after does not."""
    cid = case("speculative", "mlx-lm/deepseek_v3", "mlx-lm-0.32.2", "deepseek-v3")
    result = repro(
        ReproRequest(
            SHIPPED, cid, tmp_path, config="decode_after_verify", venv=envs("mlx-lm-0.32.2")
        )
    )
    assert result.reproduced is not None, result.run.output  # a timing: decided, either way
    text = result.script.read_text()
    assert text.count("\ndef check():") == text.count("    model = build_model()\n") == 1
    for after_verify, reproduces in ((True, True), (False, False)):
        planted = text.replace("\ndef check():", SLOWED).replace(
            "    model = build_model()\n", f"    model = planted(build_model(), {after_verify})\n"
        )
        result.script.write_text(planted)
        run = env.run(env._python(envs("mlx-lm-0.32.2")), result.script)
        assert run.reproduced is reproduces, run.output


@pytest.mark.arms
def test_a_batch_whose_caches_stay_unquantized_is_the_other_finding_never_this_one(envs, tmp_path):
    """The batched quantized script where _make_cache quantizes nothing (planted: kv_bits not
    passed on): not reproduced, the unquantized caches named as the other finding."""
    cid = "serving_quantized::mlx-vlm/deepseek_v3::mlx-vlm-0.7.10::deepseek-v3::float32::cpu"
    result = repro(
        ReproRequest(SHIPPED, cid, tmp_path, config="q8_batched", venv=envs("mlx-vlm-0.7.10"))
    )
    assert result.reproduced is False and "raised" in result.run.output, result.run.output
    text = result.script.read_text()
    call = "ar._make_cache(model, pads, kv_bits=bits, kv_group_size=group)"
    assert text.count(call) == 1
    result.script.write_text(text.replace(call, call.replace("kv_bits=bits", "kv_bits=None")))
    run = env.run(env._python(envs("mlx-vlm-0.7.10")), result.script)
    assert run.reproduced is False and "quantized no cache of the batch" in run.output, run.output
