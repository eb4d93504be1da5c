"""The report's drawings of the shipped suites' results, named by each suite's contract
(`plots.draw` in suites/<kind>/<name>.suite.yaml): the report draws them, not the suite's test
body. A drawing gets only the results whose metrics meet the suite's metrics schema, and reads
them by key. `figures` draws any suite's key figures, one bar per case (a suite kept beside a
matrix draws with it).
"""

from __future__ import annotations

from collections.abc import Callable

from mlagate import results
from mlagate.report import plots


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


def throughput_rows(metrics: dict) -> list[dict]:
    """Decode throughput rows of a result: metrics["rows"] or metrics["throughput"], each a
    list of {context, plain_tok_s, spec_tok_s[, draft]} (metrics["throughput"] may also be a
    dict keyed by context). Rows without both throughputs' keys are left out; draft defaults
    to "spec"."""
    out = []
    for name in ("rows", "throughput"):
        t = (metrics or {}).get(name)
        if isinstance(t, dict):
            t = [{"context": k, **v} for k, v in t.items() if isinstance(v, dict)]
        if not isinstance(t, list):
            continue
        for row in t:
            if not isinstance(row, dict) or "plain_tok_s" not in row or "spec_tok_s" not in row:
                continue
            try:
                out.append(
                    {
                        "context": float(row["context"]),
                        "plain_tok_s": plots.num(row.get("plain_tok_s")),
                        "spec_tok_s": plots.num(row.get("spec_tok_s")),
                        "draft": str(row.get("draft") or "spec"),
                    }
                )
            except (KeyError, TypeError, ValueError):
                continue
    return sorted(out, key=lambda r: (r["context"], r["draft"]))


def throughput_plots(rows: list[dict]) -> list[plots.Plot]:
    """Plain vs speculative decode throughput against context (one line per draft)."""
    out = []
    for r in sorted(rows, key=lambda r: (r["module"], results.geometry_label(r), r["arm"])):
        tr = throughput_rows(r.get("metrics") or {})
        if not tr:
            continue
        plain = sorted(
            {x["context"]: x["plain_tok_s"] for x in tr if x["plain_tok_s"] is not None}.items()
        )
        series = [plots.Series("plain decode", plain, plots.PALETTE[0])]
        for i, draft in enumerate(sorted({x["draft"] for x in tr})):
            pts = [
                (x["context"], x["spec_tok_s"])
                for x in tr
                if x["draft"] == draft and x["spec_tok_s"] is not None
            ]
            name = f"speculative ({draft})" if draft != "spec" else "speculative decode"
            series.append(plots.Series(name, pts, plots.PALETTE[(i + 2) % len(plots.PALETTE)]))
        geo = results.geometry_label(r)
        title = f"decode throughput: {r['module']} · {geo} · {r['arm']} · {r.get('backend', '')}"
        svg = plots.line_chart(
            title, series, "context (tokens)", "tokens / s", x_log=True, x_base=2
        )
        name = plots.slug("throughput", r["module"], geo, r["arm"], plots.short(r["case_id"]))
        out.append(
            plots.Plot(
                "throughput", name, title, svg, f"verdict {r['verdict']}: {r.get('reason', '')}"
            )
        )
    return out


def figure_bars(rows: list[dict], figures) -> list[plots.Plot]:
    """One bar chart per key figure of the suite: its value per case (module, arm, geometry)."""
    out = []
    for f in figures:
        values = {}
        for r in sorted(rows, key=lambda r: r["case_id"]):
            v = f.value(r)
            if v is not None:
                values[f"{r['module']} {r['arm']} {results.geometry_label(r)}"] = v
        if not values:
            continue
        title = f"{f.label} ({f.unit})"
        svg = plots.bars(title, list(values), {f.label: list(values.values())}, "case", f.unit, [])
        out.append(plots.Plot("figures", plots.slug("figure", f.id), title, svg))
    return out


# plots.draw -> (the suite's typed results, its key figures) -> charts
DRAWINGS: dict[str, Callable[[list[dict], tuple], list[plots.Plot]]] = {
    "equivalence": lambda rows, _: equivalence_plots(rows),
    "crossover": lambda rows, _: crossover_plots(rows),
    "marginal": lambda rows, _: marginal_plots(rows),
    "throughput": lambda rows, _: throughput_plots(rows),
    "figures": figure_bars,
}
