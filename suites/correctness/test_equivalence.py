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

from mlagate import gates, suites
from mlagate.harness import check, give_up
from mlagate.report import plots

_BUDGET = gates.Record(
    {
        "absorbed_factor": gates.Number(0),
        "growth_factor": gates.Number(0),
        "floor_ulps": gates.Number(0),
        "max_ulps": gates.Number(0, above=True),
    }
)
FAILURE_KINDS = ("numerical_mismatch", "runtime_raised")
GATES = {
    "widths": gates.List(
        gates.Int(2, 1 << 16), min_len=2
    ),  # step widths compared (growth needs two)
    "score_scale": gates.Number(
        0, above=True
    ),  # multiplies embed_q: peaked attention as in trained models
    "dtypes": gates.List(gates.Dtype()),  # dtypes compared
    "quant": gates.List(gates.Text(r"none|q[2-8]g(32|64|128)")),  # unquantised, or qBITSgGROUP
    "budgets": gates.Keyed("dtype", gates.Keyed("backend", _BUDGET)),  # ULPs per dtype, per backend
}


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
                    f"{mla.module.attention_for(mla.case.arm)}",
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
            problems += [
                ("numerical_mismatch", p) for p in budget_problems(f"{dtype}/{quant}", rows, budget)
            ]
    mla.metric("errors_ulps", table)
    check(problems, shown=len(problems))


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


# --- what the report and the history show ------------------------------------------------


def _add_row(hists: dict, edges: dict, p99s: dict, key: tuple, row: dict) -> None:
    """One row's errors: its elementwise histogram where the worker sent one, else its p99."""
    for path in ("absorbed", "materialised"):
        st = row.get(path) or {}
        h = st.get("hist")
        if (
            isinstance(h, dict)
            and isinstance(h.get("counts"), list)
            and isinstance(h.get("edges"), list)
        ):
            if edges.setdefault(key, h["edges"]) == h["edges"]:
                acc = hists.setdefault(key, {}).setdefault(path, [0] * len(h["counts"]))
                for i, c in enumerate(h["counts"][: len(acc)]):
                    acc[i] += int(c)
        elif plots.num(st.get("p99")) is not None:
            per_path = p99s.setdefault(key, {"absorbed p99": [], "materialised p99": []})
            per_path[f"{path} p99"].append(st["p99"])


def equivalence_plots(rows: list[dict]) -> list[plots.Plot]:
    """Per backend and dtype. Rows whose stats carry the worker's elementwise histogram
    ("hist") give the distribution of every output element's error, summed over rows; rows
    without it (older results) give the distribution over rows (case x quantisation x L) of
    each path's p99 error. Both in ULPs of the dtype at the output's magnitude."""
    p99s: dict[tuple, dict[str, list[float]]] = {}
    hists: dict[tuple, dict[str, list[int]]] = {}
    edges: dict[tuple, list[float]] = {}
    n_rows: dict[tuple, int] = {}
    for r in rows:
        table = (r.get("metrics") or {}).get("errors_ulps")
        if not isinstance(table, dict):
            continue
        for row_name, row in table.items():
            key = (r.get("backend", ""), row_name.split("/")[0])
            _add_row(hists, edges, p99s, key, row)
            n_rows[key] = n_rows.get(key, 0) + 1
    out = []
    for key in sorted(set(p99s) | set(hists)):
        backend, dtype = key
        if key in hists:
            title = f"equivalence error per element: {backend} {dtype} ({n_rows[key]} rows)"
            axis = "|path - float64 reference|, ULPs (power-of-two bins)"
            svg = plots.binned_histogram(title, edges[key], hists[key], axis)
            caption = "every output element of every measured row (case x quantisation x L)"
            name = plots.slug("equivalence-elements", backend, dtype)
            out.append(plots.Plot("equivalence", name, title, svg, caption))
        if key in p99s:
            n = len(p99s[key]["absorbed p99"])
            title = f"equivalence error, p99 per row: {backend} {dtype} ({n} rows)"
            axis = "p99 error vs float64 reference, ULPs (power-of-two bins)"
            svg = plots.histogram(title, p99s[key], axis)
            caption = (
                "one count per measured row (case x quantisation x L) without an "
                "elementwise histogram"
            )
            out.append(
                plots.Plot(
                    "equivalence", plots.slug("equivalence", backend, dtype), title, svg, caption
                )
            )
    return out


ORDER = 50
PLOTS = suites.PlotSection(
    "equivalence",
    "Equivalence errors in ULPs",
    "How far each forced path is from a float64 reference of the same weights, in ULPs of the "
    "dtype at the output's magnitude: the error of every output element where the results "
    "carry the worker's histogram, else the distribution of the per-row p99 error.",
    equivalence_plots,
)
KEY_FIGURES = (
    suites.KeyFigure(
        "equivalence_p99",
        "worst p99 absorbed-vs-materialised delta",
        "ULP",
        lambda r: max(row["delta"]["p99"] for row in r["metrics"]["errors_ulps"].values()),
    ),
)
