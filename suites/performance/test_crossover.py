"""crossover: forced absorbed vs forced materialised over widths L (the profile's
crossover_widths) at one warm cache (its crossover_cache), locating where materialising
starts to win on this backend.

The formula's widest absorbed width b for that cache is added to the sweep. At b the two
paths cost the same number of operations by construction, so the backend's constant factors
decide which is faster there. Gate: at b the absorbed path is at most `tolerance` slower than
the materialised one (the bootstrap interval of (absorbed - materialised) / materialised
lies below the tolerance): confidently slower fails (the formula sends too many queries to
the absorbed path on this backend), an interval across the tolerance is invalid
(inconclusive). The gate's width takes `samples_at_formula` samples a side (the others the
profile's): the two paths are within a few percent of each other there. The measured
crossover (the first swept width where materialising wins) and the margin at b are reported
either way.
"""

from mlagate import crossover, gates, results, stats, suites
from mlagate.harness import Failed, Invalid
from mlagate.report import plots

FAILURE_KINDS = ("boundary_off", "runtime_raised")
GATES = {
    "tolerance": gates.Number(
        0, 1, above=True
    ),  # how much slower absorbed may be at the formula's width
    "samples_at_formula": gates.Samples(),  # timed samples a side at the formula's width
}


def test_crossover(mla):
    r, n, v = mla.geometry.rnv
    T = mla.profile.crossover_cache
    b = crossover.widest_absorbed(T, r, n, v)
    widths = sorted(set(mla.profile.crossover_widths) | {b})
    key, info = mla.build(forced=True)
    if not info["guards"]:
        raise Invalid(
            "unforceable: no `if` around self.embed_q/self.unembed_out in "
            f"{mla.module.attention_for(mla.case.arm)}"
        )
    mla.prime(key, T, horizon=max(widths))
    sweep = {}
    for L in widths:
        t = mla.interleaved(
            [
                {"label": "absorbed", "key": key, "L": L, "force": "absorbed"},
                {"label": "materialised", "key": key, "L": L, "force": "materialised"},
            ],
            samples=mla.gates["samples_at_formula"] if L == b else None,
        )
        d, lo, hi = stats.diff_ci(t["absorbed"], t["materialised"])
        sweep[L] = {
            "absorbed_s": stats.median(t["absorbed"]),
            "materialised_s": stats.median(t["materialised"]),
            "materialised_minus_absorbed_s": d,
            "ci": (lo, hi),
        }
    losing = [L for L in widths if sweep[L]["materialised_minus_absorbed_s"] < 0]
    empirical = min(losing) if losing else None
    at_b = sweep[b]
    base = at_b["materialised_s"]
    slowdown = -at_b["materialised_minus_absorbed_s"] / base
    lo, hi = -at_b["ci"][1] / base, -at_b["ci"][0] / base
    tol = mla.gates["tolerance"]
    mla.metric("sweep", {str(L): s for L, s in sweep.items()})
    mla.metric(
        "crossover",
        {
            "cache": T,
            "formula_widest_absorbed": b,
            "empirical_first_width_materialised_wins": empirical,
            "absorbed_slowdown_at_formula": slowdown,
            "ci": (lo, hi),
            "tolerance": tol,
        },
    )
    if lo > tol:
        raise Failed(
            ["boundary_off"],
            f"at the formula's width L={b} (T={T}) the absorbed path is {slowdown:.0%} slower "
            f"than materialising (interval {lo:.0%}..{hi:.0%}, tolerance {tol:.0%}); "
            f"materialising first wins at L={empirical}",
            {"width": b, "cache": T, "slowdown": slowdown},
        )
    if hi > tol:
        raise Invalid(
            f"inconclusive at L={b}: absorbed is {slowdown:+.0%} vs materialised, interval "
            f"{lo:+.0%}..{hi:+.0%} straddles the {tol:.0%} tolerance"
        )


# --- what the report and the history show ------------------------------------------------


def crossover_plots(rows: list[dict]) -> list[plots.Plot]:
    """Forced absorbed vs forced materialised step time over widths, the formula's width marked."""
    out = []
    order = lambda r: (r["module"], results.geometry_label(r), r.get("backend", ""), r["arm"])  # noqa: E731
    for r in sorted(rows, key=order):
        m = r.get("metrics") or {}
        if not isinstance(m.get("sweep"), dict):
            continue
        sweep = sorted(((float(L), v) for L, v in m["sweep"].items()), key=lambda kv: kv[0])
        a = [
            (L, v["absorbed_s"] * 1e3)
            for L, v in sweep
            if plots.num(v.get("absorbed_s")) is not None
        ]
        mat = [
            (L, v["materialised_s"] * 1e3)
            for L, v in sweep
            if plots.num(v.get("materialised_s")) is not None
        ]
        c = m.get("crossover") or {}
        markers = []
        formula = c.get("formula_widest_absorbed")
        if plots.num(formula) is not None:
            markers.append(plots.Marker(formula, f"formula L={formula}", "#444"))
        emp = plots.num(c.get("empirical_first_width_materialised_wins"))
        if emp is not None and emp != formula:
            markers.append(plots.Marker(emp, f"measured {int(emp)}", "#d62728"))
        geo, backend = results.geometry_label(r), r.get("backend", "")
        title = (
            f"crossover: {r['module']} · {geo} · {r['arm']} · {backend} (T={c.get('cache', '?')})"
        )
        series = [
            plots.Series("forced absorbed", a, plots.PALETTE[0]),
            plots.Series("forced materialised", mat, plots.PALETTE[1]),
        ]
        svg = plots.line_chart(
            title,
            series,
            "queries per step L",
            "step time, ms",
            x_log=True,
            y_log=True,
            x_base=2,
            markers=markers,
        )
        name = plots.slug(
            "crossover", r["module"], geo, r["arm"], backend, plots.short(r["case_id"])
        )
        out.append(
            plots.Plot(
                "crossover", name, title, svg, f"verdict {r['verdict']}: {r.get('reason', '')}"
            )
        )
    return out


ORDER = 20
PLOTS = suites.PlotSection(
    "crossover",
    "Crossover sweeps",
    "Forced absorbed vs forced materialised step time over widths on one warm cache; the dashed "
    "grey line is the formula's widest absorbed width, red the first swept width where "
    "materialising measured faster.",
    crossover_plots,
)
KEY_FIGURES = (
    suites.KeyFigure(
        "crossover_slowdown",
        "absorbed slowdown at the formula's width",
        "%",
        lambda r: r["metrics"]["crossover"]["absorbed_slowdown_at_formula"] * 100,
        lambda r: tuple(x * 100 for x in r["metrics"]["crossover"]["ci"]),
    ),
)
