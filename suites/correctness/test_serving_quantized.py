"""serving_quantized: a KV cache quantized through the runtime's own entry points serves the same
tokens as the plain cache, within a budget per bit width, on the same path.

For each bit width of gates.bits (group gates.group_size): the rows and steps of
serving_batched's kind (gates.rows, gates.widths) run with the cache quantized from the first
token, as the runtime's `--kv-bits` serving does it (mlagate.worker.serving: its
`maybe_quantize_kv_cache` after every call; batched: mlx-vlm's `_make_cache(kv_bits=...)`,
which builds its batched quantized caches). Each row and step is compared with the same tokens
run alone on the plain cache:
- equivalence: within gates.quant_ulps[bits] (ULPs of the dtype at max |logits|);
- dispatch: the quantized run takes the path the plain run takes (the counters, each step);
- a quantized run whose caches hold no quantized class measured nothing quantized (the
  runtime has no quantized form of that cache: not_servable);
- causal (mlagate.harness.servingcausal), on each configuration that served something
  quantized: the widest step with one token j changed moves no position before j
  (gates.causal_ulps, 0: bitwise) and equals the same tokens decoded one at a time on the
  quantized cache (gates.decode_ulps): the quantized run against itself, so the check is as
  tight as the causal suite's, where the plain-cache comparison must allow quant_ulps.
gates.modes says which of single and batched run. On the natural path and both forced paths.
Each configuration (bit width, mode, path) is judged on its own (mlagate.harness.configurations):
one the runtime cannot serve is listed against its finding (matrix.yaml's `unservable`), the
others must be equal.
"""

from mlagate.harness import check, servingcausal
from mlagate.harness import serving as sv
from mlagate.harness.configurations import Configurations
from mlagate.harness.scripts import budget


def _quantized(reply: dict) -> bool:
    return any("Quant" in c for c in reply["classes"]["tested"])


def test_serving_quantized(mla):
    g = mla.gates
    key, info = mla.build(forced=True)
    rows, steps = sv.rows_and_steps(g, mla.profile.vocab_size, g["seed"])
    configs, table, causal = Configurations(mla), {}, {}
    for q in g["bits"]:
        bits = int(q[1:])
        quant = {"bits": bits, "group_size": g["group_size"]}
        limit = budget(g["quant_ulps"][q], mla.case.backend)
        for mode in g["modes"]:
            for force in sv.forces(info):
                label = f"q{bits}g{g['group_size']}/{mode}/path={force or 'natural'}"
                reply = sv.serve(
                    mla, key, rows, steps, force, batched=mode == "batched", quant=quant
                )
                if "not_servable" in reply:
                    configs.judge(label, [("not_servable", f"{label}: {reply['not_servable']}")])
                    continue
                problems, table[label] = sv.judge(
                    reply, label, limit, 0.0, "quantized_mismatch", steps
                )
                if reply["rows"] and not reply["errors"]["tested"] and not _quantized(reply):
                    problems.append(
                        (
                            "not_servable",
                            f"{label}: nothing was quantized: the caches were "
                            f"{', '.join(reply['classes']['tested'])}",
                        )
                    )
                sv.check_paths(reply["rows"], label, "quantized", problems)
                sv.check_forced(reply, force, label, problems)
                if _quantized(reply) and not reply["errors"]["tested"]:
                    problems += servingcausal.check(
                        mla,
                        key,
                        rows,
                        steps,
                        force,
                        label,
                        causal,
                        batched=mode == "batched",
                        quant=quant,
                    )
                configs.judge(label, problems)
    mla.metric("cases", table)
    mla.metric("causal", causal)
    configs.record(mla)
    check(configs.problems)
