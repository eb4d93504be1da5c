"""equivalence: forced absorbed vs forced materialised on identical inputs (fp32 and bf16,
unquantised and 4-bit group-64 weights, L = 2 and L = 8, on the profile's first warm cache). Each
path is measured
against a float64 reference of the very same weights (dequantised, upcast, run on the CPU),
in ULPs of the dtype at the output's magnitude (max |reference|).

Gates, per dtype and backend (matrix.yaml suites.equivalence.gates.budgets):
- the absorbed path's p99 error is at most `absorbed_factor` x the materialised path's
  (plus `floor_ulps`, so two near-exact paths are not judged on rounding noise);
- the p99 absorbed-vs-materialised delta at the widest L is at most `growth_factor` x the
  delta at the narrowest L (plus `floor_ulps`): the error must not grow with L. Both widths
  step the same cache with the same first tokens;
- the max error of either path is at most `max_ulps` (a sanity bound against gross errors).

Random weights give near-uniform attention, whose output cancels to a small value and hides
errors in the scores (a query off by 0.1 % changes nothing visible). gates.score_scale
multiplies embed_q, which scales the scores of both paths alike, so attention is peaked as in
trained models and a wrong score shows in the output.
"""

from mlagate.contract.gates import UNCALIBRATED
from mlagate.harness import Invalid, check, give_up


def test_equivalence(mla):
    gates = mla.gates
    warm = mla.profile.cache_lengths[0]
    problems, table = [], {}
    forced_key = None
    for dtype in gates["dtypes"]:
        budget = gates["budgets"][dtype][mla.case.backend]
        for quant in (
            ["checkpoint"] if mla.checkpoint_path else gates["quant"]
        ):  # a checkpoint keeps its own weights
            q = (
                None
                if quant in ("none", "checkpoint")
                else {"bits": int(quant[1]), "group_size": int(quant.split("g")[1])}
            )
            forced_key, info = mla.build(
                dtype=dtype, quant=q, forced=True, score_scale=gates["score_scale"]
            )
            if not info["guards"]:
                give_up(
                    "unforceable: no `if` around self.embed_q/self.unembed_out in "
                    f"{info.get('searched') or mla.module.attention_for(mla.case.arm)}",
                    problems,
                )
            ref = mla.reference(forced_key, score_scale=gates["score_scale"])
            rows = {}
            for L in gates["widths"]:
                st = mla.compare(
                    {
                        "absorbed": (forced_key, "absorbed"),
                        "materialised": (forced_key, "materialised"),
                    },
                    ref,
                    warm,
                    L,
                    dtype,
                )
                for label in ("absorbed", "materialised"):
                    if st["paths"][label] != label:
                        give_up(
                            f"{dtype} {quant} L={L}: forced {label} but the counters saw "
                            f"{st['paths'][label]}",
                            problems,
                        )
                rows[L] = table[f"{dtype}/{quant}/L={L}"] = {
                    k: st[k] for k in ("absorbed", "materialised", "delta", "magnitude", "ulp")
                }
            if not uncalibrated(budget):
                problems += [
                    ("numerical_mismatch", p)
                    for p in budget_problems(f"{dtype}/{quant}", rows, budget)
                ]
    mla.metric("errors_ulps", table)
    check(problems, shown=len(problems))
    blind = [d for d in gates["dtypes"] if uncalibrated(gates["budgets"][d][mla.case.backend])]
    if blind:
        raise Invalid(
            f"uncalibrated: suites.equivalence.gates.budgets.{'/'.join(blind)}."
            f"{mla.case.backend} has no measured floor_ulps or max_ulps: run mlagate calibrate "
            f"first (this case measured its errors: mlagate calibrate --runner "
            f"{mla.case.runner} OUT --store STORE for this machine class's runs with --reuse "
            "STORE)"
        )


def uncalibrated(budget) -> bool:
    return UNCALIBRATED in (budget["floor_ulps"], budget["max_ulps"])


def budget_problems(label: str, rows: dict[int, dict], budget) -> list[str]:
    """What one dtype/quant's errors (ULPs per width L) break of a backend's budget: the absorbed
    path's p99 error against the materialised one's, the worst error, and the growth of the
    difference with L."""
    problems = []
    for L, st in rows.items():
        a, m = st["absorbed"]["p99"], st["materialised"]["p99"]
        if a > budget["absorbed_factor"] * m + budget["floor_ulps"]:
            problems.append(
                f"{label}/L={L}: absorbed p99 error {a:.1f} ULP > {budget['absorbed_factor']} x "
                f"materialised {m:.1f} + {budget['floor_ulps']}"
            )
        worst = max(st["absorbed"]["max"], st["materialised"]["max"])
        if worst > budget["max_ulps"]:
            problems.append(
                f"{label}/L={L}: error {worst:.1f} ULP over the {budget['max_ulps']} ULP bound"
            )
    lo, hi = min(rows), max(rows)
    dlo, dhi = rows[lo]["delta"]["p99"], rows[hi]["delta"]["p99"]
    if dhi > budget["growth_factor"] * dlo + budget["floor_ulps"]:
        problems.append(
            f"{label}: delta grows with L: p99 {dhi:.1f} ULP at L={hi} vs {dlo:.1f} at L={lo}"
        )
    return problems
