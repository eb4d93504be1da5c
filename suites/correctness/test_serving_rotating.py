"""serving_rotating: a rotating KV cache made by the runtime's own make_prompt_cache(model,
max_kv_size=gates.max_kv_size) (what `--max-kv-size` serves) serves the tokens of the plain cache
while they fit, and stays causal once it rotates.

The rows and steps of serving_quantized's kind (gates.rows, gates.widths, accepted whole), each
row alone (single) or merged by the runtime's `_merge_caches` into its batched rotating cache
(batched; mlx-vlm's batches take no max_kv_size). Checks:
- offered: the caches the runtime gives hold a rotating class; a module whose own make_cache
  ignores max_kv_size, or a runtime whose batches cannot rotate, is not_servable (a finding);
- while a row fits (its tokens, the batch's padded tokens in batched mode, at most
  max_kv_size): each row and step equals the same tokens run alone on the plain cache (within
  gates.same_path_ulps) on the same path (the counters);
- once it rotates: some row and step past the window differs from its plain run by more than
  gates.same_path_ulps (the rotating cache dropped tokens the plain cache keeps; a cache that
  never evicts is a rotating_mismatch), and the causal check of mlagate.harness.servingcausal
  on the rotating cache (the widest step with one token changed moves nothing before it; the
  widest step equals the same tokens decoded one at a time), the plain cache no longer being a
  reference (it keeps what the rotating cache drops).
On the natural path and both forced paths. Each configuration (window, mode, path) is judged on
its own (mlagate.harness.configurations): one the runtime cannot serve is listed against its
finding (matrix.yaml's `unservable`), the others must be equal.
"""

from mlagate.harness import check, give_up, servingcausal
from mlagate.harness import serving as sv
from mlagate.harness.configurations import Configurations
from mlagate.harness.scripts import budget


def _fits(reply: dict, rows, steps, size: int, batched: bool) -> dict:
    """The reply's rows and steps after which the row (the batch: its longest row) holds at most
    `size` tokens."""
    kept = []
    for r in reply["rows"]:
        row = max(range(len(rows)), key=lambda i: len(rows[i])) if batched else r["row"]
        if len(rows[row]) + sum(s["width"] for s in steps[: r["step"]]) <= size:
            kept.append(r)
    return {**reply, "rows": kept}


def _rotates(reply: dict, fit: dict, size: int, same: float, label: str, problems, row) -> list:
    """Past the window a rotating cache has dropped tokens the plain cache keeps: some row and
    step there must differ from its plain run by more than the same-path budget. A cache that
    never evicts equals the plain cache everywhere: rotating_mismatch. No row past the window
    measures nothing: invalid. The table row keeps how many were compared there and the
    worst."""
    if reply["errors"]["tested"] or reply["errors"]["reference"]:
        return []  # runtime_raised already
    past = [r for r in reply["rows"] if r not in fit["rows"]]
    if not past:
        give_up(f"{label}: no row or step runs past max_kv_size={size}: nothing rotates", problems)
    row["past_window"] = {"compared": len(past), "max_ulps": round(max(r["ulps"] for r in past), 3)}
    if any(not r["ulps"] <= same for r in past):
        return []
    return [
        (
            "rotating_mismatch",
            f"{label}: past max_kv_size={size} every row and step equals its plain run ({len(past)}"
            f" compared, worst {max(r['ulps'] for r in past):.1f} ULP): the cache never evicts",
        )
    ]


def test_serving_rotating(mla):
    g = mla.gates
    key, info = mla.build(forced=True)
    rows, steps = sv.rows_and_steps(g, mla.profile.vocab_size, g["seed"])
    size, same = g["max_kv_size"], budget(g["same_path_ulps"], mla.case.backend)
    configs, table, causal = Configurations(mla), {}, {}
    for mode in g["modes"]:
        batched = mode == "batched"
        for force in sv.forces(info):
            label = f"W={size}/{mode}/path={force or 'natural'}"
            reply = sv.serve(mla, key, rows, steps, force, batched=batched, max_kv_size=size)
            if "not_servable" in reply:
                configs.judge(label, [("not_servable", f"{label}: {reply['not_servable']}")])
                continue
            fit = _fits(reply, rows, steps, size, batched)
            problems, table[label] = sv.judge(fit, label, same, 0.0, "rotating_mismatch", steps)
            problems += _rotates(reply, fit, size, same, label, problems, table[label])
            sv.check_paths(fit["rows"], label, "rotating", problems)
            sv.check_forced(reply, force, label, problems)
            if not reply["errors"]["tested"]:
                problems += servingcausal.check(
                    mla, key, rows, steps, force, label, causal, batched=batched, max_kv_size=size
                )
            configs.judge(label, problems)
    mla.metric("cases", table)
    mla.metric("causal", causal)
    configs.record(mla)
    check(configs.problems)
