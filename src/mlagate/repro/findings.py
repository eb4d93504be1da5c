"""The findings a repro script shows: one record each (its suite, the configuration it is for,
the failure kinds of matrix.yaml's expectations and the names of its `unservable` declarations
it stands behind, its docs/findings.md section, its script body) and which finding a case's
configuration names."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from importlib import resources

DOC = "docs/findings.md"


@dataclass(frozen=True)
class Finding:
    name: str
    suite: str
    config: str  # the configuration of the suite it is for (`--config`)
    kinds: tuple[str, ...]  # an expectation of one of these kinds says the finding holds
    title: str
    anchor: str  # its section in docs/findings.md
    script: str  # its body, scripts/<script>.pyt
    expected: str  # what a runtime without the defect does
    settings: tuple[tuple[str, object], ...] = ()  # what the script reads beside the model
    unservable: tuple[str, ...] = ()  # matrix.yaml `unservable` findings it shows
    shown_in: tuple[str, ...] = ()  # other suites whose cases it stands behind (settings: suite's)
    parts: tuple[str, ...] = ()  # scripts/<part>.pyt put before its own body (shared helpers)
    holds: tuple[tuple[str, str], ...] = ()  # (backend, arm glob) where it holds, no expectation

    def of(self, suite: str) -> bool:
        return suite == self.suite or suite in self.shown_in

    def holds_on(self, backend: str, arm: str) -> bool:
        return any(b == backend and fnmatch.fnmatchcase(arm, a) for b, a in self.holds)

    def body(self) -> str:
        scripts = resources.files(__package__).joinpath("scripts")
        return "".join(
            scripts.joinpath(f"{name}.pyt").read_text(encoding="utf-8")
            for name in (*self.parts, self.script)
        )


def _q(bits: int) -> Finding:
    return Finding(
        name=f"quantized_kv_q{bits}",
        suite="serving_quantized",
        config=f"q{bits}",
        kinds=("runtime_raised", "not_servable"),
        title=f"A {bits}-bit quantized KV cache (--kv-bits {bits}) cannot serve an MLA model",
        anchor="quantized-kv-caches-no-mla-module-of-any-shipped-arm-serves-one",
        script="quantized",
        expected=(
            "maybe_quantize_kv_cache turns the model's caches into quantized caches and the next "
            f"decode step gives the plain cache's logits within the suite's q{bits} budget"
        ),
        settings=(
            ("bits", bits),
            ("group_size", "group_size"),
            ("prompt", 24),
            ("budget_ulps", f"quant_ulps.q{bits}"),
        ),
        unservable=(
            "quantized-cache-raises-in-mla-attention",
            "quantize-leaves-caches-unquantized",
        ),
    )


def _batched_q(bits: int) -> Finding:
    return Finding(
        name=f"batched_quantized_kv_q{bits}",
        suite="serving_quantized",
        config=f"q{bits}_batched",
        kinds=("runtime_raised",),
        title=f"A batch cannot be served with a {bits}-bit quantized KV cache: quantizing the "
        "batched caches raises",
        anchor="quantized-kv-caches-no-mla-module-of-any-shipped-arm-serves-one",
        script="batched_quantized",
        expected=(
            f"generate.ar._make_cache(model, left_padding, kv_bits={bits}) builds the batch's "
            "quantized caches and the left-padded prompts give each row's logits of the row run "
            f"alone, within the suite's q{bits} budget"
        ),
        settings=(
            ("bits", bits),
            ("group_size", "group_size"),
            ("rows", "rows"),
            ("budget_ulps", f"quant_ulps.q{bits}"),
        ),
        unservable=("batched-quantized-pool-cache-raises",),
    )


FINDINGS: dict[str, Finding] = {
    f.name: f
    for f in (
        _q(8),
        _q(4),
        _batched_q(8),
        _batched_q(4),
        Finding(
            name="max_kv_size_ignored",
            suite="serving_rotating",
            config="max_kv_size",
            kinds=("not_servable",),
            title="make_prompt_cache(model, max_kv_size=W) gives no rotating cache for this MLA "
            "model: --max-kv-size is ignored",
            anchor="rotating-kv-caches-most-mla-modules-ignore-max_kv_size",
            script="max_kv_size",
            expected="a RotatingKVCache per layer that holds at most W tokens",
            settings=(("max_kv_size", "max_kv_size"),),
            unservable=("make-cache-ignores-max-kv-size",),
        ),
        Finding(
            name="rotating_verify",
            suite="serving_rotating",
            config="verify",
            kinds=("prefill_decode_mismatch",),
            title="A verify step on a RotatingKVCache past its size differs from decoding the "
            "same tokens",
            anchor="mlx-lm-and-mlx-vlm-0617-a-verify-step-on-a-rotating-cache-past-its-size-"
            "differs-from-decoding",
            script="rotating_verify",
            expected="the verify step's logits equal those of the same tokens decoded one at a "
            "time on the same rotating cache, within the suite's decode budget",
            settings=(
                ("max_kv_size", "max_kv_size"),
                ("prompt", 30),
                ("verify", 8),
                ("budget_ulps", "decode_ulps"),
            ),
        ),
        Finding(
            name="padded_rows",
            suite="serving_batched",
            config="padded_rows",
            kinds=("batch_row_mismatch",),
            title="Right-padded rows of a batch (_merge_caches, prepare/finalize) differ from "
            "their plain runs",
            anchor="mlx-lm-0313-kimi_linears-padded-batch-rows-differ-from-their-plain-runs",
            script="padded_rows",
            expected="every row's first decode equals the row run alone, within the suite's "
            "same-path budget",
            settings=(("rows", "rows"), ("budget_ulps", "same_path_ulps")),
        ),
        Finding(
            name="forced_absorbed",
            suite="causal",
            config="forced_absorbed",
            kinds=("runtime_raised",),
            title="The attention's absorbed branch, forced for a step of L >= 2 tokens, cannot run",
            anchor="mlx-lm-0322-stock-mistral4s-absorbed-branch-cannot-run-at-l--2",
            script="forced_absorbed",
            expected="the absorbed branch, forced for a verify step of 2 to 8 tokens on a warm "
            "cache, runs and gives the logits of the same tokens decoded one at a time, within "
            "the suite's budget",
            settings=(("prompt", 24), ("widths", "widths"), ("budget_ulps", "logits_ulps")),
            unservable=("stock-mistral4-absorbed-raises",),
            parts=("forcing",),
            shown_in=(
                "probes",
                "equivalence",
                "serving_batched",
                "serving_rotating",
                "serving_prompt_reuse",
                "serving_quantized",
            ),
        ),
        Finding(
            name="stale_pool",
            suite="trim_after_rejection",
            config="rejection",
            kinds=("runtime_raised",),
            title="The first decode after a rejection rolled back through the runtime's own API "
            "raises or differs from a run without the rejected tokens",
            anchor="mlx-vlm-0617-glm5_next-raises-on-the-first-decode-after-a-rejection-that-un-"
            "completes-a-pool-window",
            script="after_rejection",
            expected="after every rejection of k = 1..S-1 of a verify step of S, the next decode "
            "gives the logits of a run fed only the accepted tokens, within the suite's budget",
            settings=(
                ("beyond_topk", "beyond_topk"),
                ("widths", "widths"),
                ("budget_ulps", "logits_ulps"),
            ),
        ),
        Finding(
            name="compiled_topk",
            suite="pool_equivalence",
            config="wide_step",
            kinds=("pool_mismatch",),
            title="A wide step on a cache past the indexer's top-k differs from the same tokens "
            "fed one at a time",
            anchor="mlx-vlm-0710-hy_v4s-indexer-selects-the-wrong-tokens-once-the-cache-length-"
            "changes",
            script="wide_step",
            expected="each wide step of S tokens gives the logits of the same tokens fed one at "
            "a time, within the suite's budget",
            settings=(
                ("beyond_topk", "beyond_topk"),
                ("widths", "widths"),
                ("budget_ulps", "logits_ulps"),
            ),
        ),
        Finding(
            name="cachelist_reuse",
            suite="serving_prompt_reuse",
            config="trim",
            kinds=("reuse_mismatch",),
            title="Per-turn prompt reuse keeps the abandoned branch of a conversation",
            anchor="mlx-vlm-per-turn-prompt-reuse-does-not-trim-a-cachelist",
            script="reuse_trim",
            expected="the reuse drops the tokens past the shared prefix and each follow-up gives "
            "the logits of the cache that only held the prefix, within the suite's budget",
            settings=(
                ("prefixes", "prefixes"),
                ("branch", "branch"),
                ("follow_ups", "follow_ups"),
                ("budget_ulps", "kept_ulps"),
            ),
        ),
        Finding(
            name="path_rule",
            suite="dispatch",
            config="path_rule",
            kinds=("wrong_path",),
            title="The attention takes another path than the runtime's own max_absorbed_queries "
            "chooses",
            anchor="mlx-vlm-0710-hy_v4-still-guards-the-absorbed-path-on-one-query",
            script="path_rule",
            expected="each step of L = 2..8 tokens on a cold cache and on warm caches takes the "
            "path of L == 1 or L <= max_absorbed_queries(r, n, v, T + L)",
            settings=(("warm_caches", "warm_caches"), ("widths", "widths")),
        ),
        Finding(
            name="tf32",
            suite="equivalence",
            config="tf32",
            kinds=(),
            title="MLX CUDA computes float32 matmuls in TF32",
            anchor="mlx-cuda-float32-matmuls-run-in-tf32",
            script="tf32",
            expected="a float32 matmul agrees with a float64 reference within float32 rounding "
            "(under 256 float32 ULPs at max |out|, one TF32 ULP being 8192), and the model's "
            "float32 logits agree with the CPU backend's",
            settings=(("prompt", 24), ("budget_ulps", 256)),
            holds=(("cuda", "*"),),
        ),
        Finding(
            name="crossover_too_wide",
            suite="crossover",
            config="formula_width",
            kinds=("boundary_off",),
            title="At the cost model's widest absorbed width the absorbed path is far slower "
            "than the materialised one",
            anchor="mlx-cuda-h200-the-flop-crossover-is-too-wide-at-128-heads",
            script="crossover",
            expected="at the formula's widest absorbed width on a warm cache (where the two paths "
            "cost the same operations) the absorbed step is at most the suite's tolerance slower "
            "than the materialised one",
            settings=(
                ("cache", "profile.crossover_cache"),
                ("tolerance", "tolerance"),
                ("samples", "samples_at_formula"),
            ),
            parts=("forcing",),
        ),
        Finding(
            name="indexer_swap",
            suite="speculative_transaction",
            config="selections",
            kinds=("numerical_mismatch",),
            title="The sparse indexer selects other keys in speculative rounds than in decoding "
            "the kept tokens",
            anchor="mlx-cuda-h200-deepseek-v32s-indexer-swaps-a-top-k-entry-between-a-wide-step-"
            "and-decoding",
            script="selections",
            expected="every (indexer, position) top-k of the speculative rounds (verify, accept "
            "j, trim_prompt_cache) equals that of decoding the kept tokens one at a time",
            settings=(
                ("layers", "layers"),
                ("beyond_topk", "beyond_topk"),
                ("widths", "widths"),
                ("rounds", "rounds"),
                ("seeds", "seeds"),
            ),
        ),
        Finding(
            name="decode_after_verify",
            suite="speculative",
            config="decode_after_verify",
            kinds=(),
            title="Plain decoding on a long cache slows right after materialising verify steps",
            anchor="mlx-cuda-the-stock-arms-plain-decoding-slows-right-after-materialising-"
            "verify-steps",
            script="decode_after_verify",
            expected="plain decoding at the longest prompt keeps its speed (within 20 %) right "
            "after the runtime's speculative loop ran on the same cache",
            settings=(
                ("contexts", "contexts"),
                ("new_tokens", "new_tokens"),
                ("num_draft", "num_draft"),
                ("slower_than", 0.2),
            ),
            holds=(("cuda", "mlx-lm-0.32.2"),),
        ),
    )
}


def configs(suite: str) -> list[str]:
    return [f.config for f in FINDINGS.values() if f.of(suite)]


def for_case(
    suite: str, config: str | None, expected_kinds: tuple[str, ...], declared: set[str]
) -> Finding | None:
    """The finding of `config` in `suite`; without one, the first whose kinds the case's
    expectation names, else the first that shows an `unservable` finding declared for the case
    (None: no finding of this suite is expected there)."""
    mine = [f for f in FINDINGS.values() if f.of(suite)]
    if config is not None:
        return next((f for f in mine if f.config == config), None)
    return next((f for f in mine if set(f.kinds) & set(expected_kinds)), None) or next(
        (f for f in mine if set(f.unservable) & declared), None
    )
