"""Bar charts of the report, as static SVG: counts in power-of-two bins (histogram), pre-binned
shares (binned_histogram) and the grouped bars both draw (bars). mlagate.report.plots re-exports
them.
"""

from __future__ import annotations

import math
from html import escape

from mlagate.report.svg import PALETTE, TITLE_PX, Axis, Marker, fmt, svg_open


def histogram(
    title: str,
    groups: dict[str, list[float]],
    x_label: str,
    bins_log2: tuple[int, int] | None = None,
    markers: list[Marker] | None = None,
    width: int = 540,
    height: int = 300,
) -> str:
    """Counts of positive values in power-of-two bins [2^k, 2^(k+1)) (each labelled at its left
    edge), one bar colour per group, side by side within a bin. Zeros are counted in a leftmost
    "0" bin."""
    values = [v for vs in groups.values() for v in vs if math.isfinite(v)]
    pos = [v for v in values if v > 0]
    if bins_log2 is None:
        lo = math.floor(math.log2(min(pos))) if pos else 0
        hi = math.floor(math.log2(max(pos))) + 1 if pos else 1
    else:
        lo, hi = bins_log2
    edges = list(range(lo, hi))
    has_zero = any(v <= 0 for v in values)
    labels = (["0"] if has_zero else []) + [fmt(2.0**e) for e in edges]
    counts: dict[str, list[float]] = {}
    for name, vs in groups.items():
        c = [0] * len(labels)
        for v in vs:
            if not math.isfinite(v):
                continue
            if v <= 0:
                c[0] += 1
                continue
            e = min(max(math.floor(math.log2(v)), lo), hi - 1)
            c[(1 if has_zero else 0) + e - lo] += 1
        counts[name] = c
    positions = {2.0**e: (1 if has_zero else 0) + e - lo for e in edges}
    return bars(
        title,
        labels,
        counts,
        x_label,
        "count",
        [
            (positions[min(positions, key=lambda p: abs(math.log2(p / m.x)))], m)
            for m in markers or []
            if m.x > 0 and positions
        ],
        width,
        height,
    )


def binned_histogram(
    title: str,
    edges: list[float],
    groups: dict[str, list[int]],
    x_label: str,
    width: int = 540,
    height: int = 300,
) -> str:
    """Pre-binned counts (counts[0] below edges[0], counts[i] in [edges[i-1], edges[i]), the
    last at or above edges[-1]) as percentages of each group's total; empty outer bins trimmed."""
    labels = [f"<{fmt(edges[0])}"] + [fmt(e) for e in edges[:-1]] + [f">={fmt(edges[-1])}"]
    used = [i for i in range(len(labels)) if any(i < len(c) and c[i] for c in groups.values())]
    lo, hi = (used[0], used[-1] + 1) if used else (0, 1)
    shares = {}
    for name, c in groups.items():
        total = sum(c) or 1
        shares[name] = [100.0 * c[i] / total if i < len(c) else 0.0 for i in range(lo, hi)]
    return bars(title, labels[lo:hi], shares, x_label, "% of elements", [], width, height)


def bars(
    title: str,
    labels: list[str],
    counts: dict[str, list[float]],
    x_label: str,
    y_label: str,
    markers: list[tuple[int, Marker]],
    width: int = 540,
    height: int = 300,
) -> str:
    """Grouped bars over labelled bins; a marker sits at the left edge of bin index i."""
    left, right, top, bottom = 48, 14, TITLE_PX + 6, 66
    out = svg_open(width, height, title)
    plot_bottom = height - bottom
    ymax = max([1] + [x for c in counts.values() for x in c])
    ya = Axis([0, ymax], plot_bottom, top)
    for t in ya.ticks():
        py = ya(t)
        out.append(
            f'<line x1="{left}" y1="{py:.1f}" x2="{width - right}" y2="{py:.1f}" stroke="#eee"/>'
        )
        out.append(
            f'<text x="{left - 4}" y="{py + 4:.1f}" text-anchor="end">{escape(fmt(t))}</text>'
        )
    nb = max(1, len(labels))
    bw = (width - left - right) / nb
    ng = max(1, len(counts))
    for gi, (name, c) in enumerate(counts.items()):
        colour = PALETTE[gi % len(PALETTE)]
        for bi, n in enumerate(c):
            if n:
                x = left + bi * bw + 2 + gi * (bw - 4) / ng
                out.append(
                    f'<rect class="bar" x="{x:.1f}" y="{ya(n):.1f}" '
                    f'width="{max(1.0, (bw - 4) / ng):.1f}" height="{plot_bottom - ya(n):.1f}" '
                    f'fill="{colour}"><title>{escape(name)}: {escape(fmt(n))} in bin '
                    f"{escape(labels[bi])}</title></rect>"
                )
        lx = left + gi * 150
        out.append(
            f'<rect x="{lx}" y="{height - 24}" width="10" height="10" fill="{colour}"/><text '
            f'x="{lx + 14}" y="{height - 15}">{escape(name[:22])}</text>'
        )
    for bi, label in enumerate(labels):
        if nb <= 16 or bi % 2 == 0:
            out.append(
                f'<text x="{left + bi * bw:.1f}" y="{plot_bottom + 13}" text-anchor="middle" '
                f'font-size="9">{escape(label)}</text>'
            )
    for bi, m in markers:
        px = left + bi * bw
        out.append(
            f'<line class="marker" x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{plot_bottom}" '
            f'stroke="{m.colour}" stroke-width="1.5" stroke-dasharray="5 3"/>'
        )
        out.append(
            f'<text x="{px + 3:.1f}" y="{top + 12}" fill="{m.colour}">{escape(m.label)}</text>'
        )
    out.append(
        f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{plot_bottom - top}" '
        'fill="none" stroke="#999"/>'
    )
    out.append(
        f'<text x="{(left + width - right) / 2:.1f}" y="{plot_bottom + 30}" '
        f'text-anchor="middle">{escape(x_label)}</text>'
    )
    out.append(
        f'<text transform="translate(12 {(top + plot_bottom) / 2:.1f}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    out.append("</svg>")
    return "\n".join(out)
