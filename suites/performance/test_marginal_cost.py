"""marginal_cost: the cost of the extra queries of a verify step, time(L) - time(1) for
L = 2, 3, 4, over the profile's cache lengths, per module and arm.

Widths are interleaved on one primed cache (L = 1, 2, 3, 4, then reversed, ...), and every
timed step's path is proven by the counters.

Gate (every arm): at the longest cache, the L = 2 marginal cost in units of the L = 1 step
on the same cache, (time(2) - time(1)) / time(1), is at most `max_relative`. A module that
absorbs pays about one more decode step for the second query whatever the cache (its
attention over the cached latent grows with T exactly as decode does); a module that
materialises pays the expansion of the whole cache, tens to hundreds of decode steps, and
more the longer the cache. The verdict uses the bootstrap interval of the marginal
(denominator: the L = 1 median): confidently above fails, confidently below passes, an
interval across the bound is invalid (inconclusive). The growth of the absolute marginal
from the shortest to the longest cache, and its slope per cached token with an interval,
are reported for every arm.
"""

from mlagate import gates, results, stats, suites
from mlagate.harness import Failed, Invalid
from mlagate.report import plots

GATES = {
    "widths": gates.List(gates.Int(1, 4096), min_len=2),  # L = 1 and the verify widths
    "max_relative": gates.Number(0, above=True),  # the second query's cost bound, in decode steps
    "samples": gates.Samples(),  # timed samples per width and cache length (the intervals decide)
}
CONTROLS_FAIL = True  # a single-query guard makes the second query re-expand the whole cache
FAILURE_KINDS = ("too_slow", "runtime_raised")
CONTROL_KINDS = ("too_slow",)


def test_marginal_cost(mla):
    gates = mla.gates
    widths = gates["widths"]
    key, _ = mla.build()
    series = [{"label": f"L={L}", "key": key, "L": L} for L in widths]
    by_t = {}
    for T in mla.profile.perf_cache_lengths:
        mla.prime(key, T)
        by_t[T] = mla.interleaved(series, samples=mla.gates["samples"])
    table = {}
    for L in widths[1:]:
        mc = stats.marginal_cost({T: (t["L=1"], t[f"L={L}"]) for T, t in by_t.items()})
        table[f"L={L}"] = {
            "per_T": {
                str(T): {
                    "marginal_s": v["marginal"],
                    "ci_s": v["ci"],
                    "relative": v["marginal"] / stats.median(by_t[T]["L=1"]),
                }
                for T, v in mc["per_T"].items()
            },
            "slope_s_per_token": mc["slope"],
            "slope_ci": mc["slope_ci"],
        }
    mla.metric("marginal", table)
    mla.metric("l1_median_s", {str(T): stats.median(t["L=1"]) for T, t in by_t.items()})
    lo_t, hi_t = min(by_t), max(by_t)
    two = table["L=2"]["per_T"]
    if two[str(lo_t)]["marginal_s"] > 0:
        mla.metric(
            "growth",
            {
                "ratio": two[str(hi_t)]["marginal_s"] / two[str(lo_t)]["marginal_s"],
                "from_T": lo_t,
                "to_T": hi_t,
            },
        )
    l1 = stats.median(by_t[hi_t]["L=1"])
    rel, lo, hi = (
        two[str(hi_t)]["relative"],
        two[str(hi_t)]["ci_s"][0] / l1,
        two[str(hi_t)]["ci_s"][1] / l1,
    )
    bound = gates["max_relative"]
    mla.metric("gate", {"relative_marginal": rel, "ci": (lo, hi), "T": hi_t, "bound": bound})
    if lo > bound:
        raise Failed(
            ["too_slow"],
            f"at T={hi_t} the second query costs {rel:.1f} decode steps (interval "
            f"{lo:.1f}-{hi:.1f}, bound {bound}): it grows with the cache",
            {"relative_marginal": rel, "T": hi_t, "bound": bound},
        )
    if hi > bound:
        raise Invalid(
            f"inconclusive: the second query costs {rel:.2f} decode steps at T={hi_t}, interval "
            f"{lo:.2f}-{hi:.2f} straddles the bound {bound}"
        )


# --- what the report and the history show ------------------------------------------------


def marginal_plots(rows: list[dict]) -> list[plots.Plot]:
    """L = 2 marginal vs cache length per arm, with each arm's decode step (L = 1) dashed."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if isinstance(r.get("metrics", {}).get("marginal"), dict):
            key = (r["module"], results.geometry_label(r), r.get("backend", ""), r.get("dtype", ""))
            groups.setdefault(key, []).append(r)
    out = []
    for (module, geo, backend, dtype), rs in sorted(groups.items()):
        series = []
        for i, r in enumerate(sorted(rs, key=lambda r: r["arm"])):
            colour = plots.PALETTE[i % len(plots.PALETTE)]
            per_t = (r["metrics"]["marginal"].get("L=2") or {}).get("per_T") or {}
            pts, errs = [], []
            for T, v in sorted(per_t.items(), key=lambda kv: float(kv[0])):
                m = plots.num((v or {}).get("marginal_s"))
                if m is None:
                    continue
                pts.append((float(T), m * 1e3))
                ci = v.get("ci_s") or [m, m]
                errs.append((ci[0] * 1e3, ci[1] * 1e3))
            series.append(plots.Series(f"{r['arm']} ({r['verdict']})", pts, colour, errors=errs))
            l1 = r["metrics"].get("l1_median_s") or {}
            l1_pts = [(float(T), v * 1e3) for T, v in l1.items() if plots.num(v) is not None]
            if l1_pts:
                series.append(plots.Series(f"{r['arm']} decode step", l1_pts, colour, dashed=True))
        title = f"marginal cost: {module} · {geo} · {backend} {dtype}"
        svg = plots.line_chart(
            title,
            series,
            "cache length T (tokens)",
            "time(L=2) - time(L=1), ms",
            x_log=True,
            y_log=True,
            x_base=2,
            note="bars: 95% bootstrap interval",
        )
        out.append(
            plots.Plot("marginal", plots.slug("marginal", module, geo, backend, dtype), title, svg)
        )
    return out


def _longest(r: dict) -> dict:
    per_t = r["metrics"]["marginal"]["L=2"]["per_T"]
    return per_t[max(per_t, key=float)]


ORDER = 10
PLOTS = suites.PlotSection(
    "marginal",
    "Marginal verify cost vs cache length",
    "The cost of the second query of a verify step, time(L=2) - time(L=1), per arm, against "
    "the cache length (both axes log). A module that absorbs pays about one decode step "
    "(dashed) at every length; one that materialises grows with the cache.",
    marginal_plots,
)
KEY_FIGURES = (
    suites.KeyFigure(
        "marginal_ms",
        "L=2 marginal cost at the longest cache",
        "ms",
        lambda r: _longest(r)["marginal_s"] * 1e3,
        lambda r: tuple(x * 1e3 for x in _longest(r)["ci_s"]),
    ),
)
