"""Static SVG charts written by hand: line charts on linear or log axes, with threshold
markers, bar histograms and sparklines. No JavaScript, no fonts or files fetched: every
chart is one self-contained <svg> string, and every label in it is escaped.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")


@dataclass
class Plot:
    """One chart of the commit page; `kind` is the plot section (a suite's PlotSection id)."""

    kind: str
    slug: str
    title: str
    svg: str
    caption: str = ""


def slug(*parts: str) -> str:
    """A file name for a chart (plots/<slug>.svg)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(parts)).strip("_")[:120]


def short(case_id: str) -> str:
    """Eight hex digits that tell cases apart in a slug."""
    return hashlib.sha1(case_id.encode()).hexdigest()[:8]


def num(v) -> float | None:
    """v as a float when it is a number (not a bool), else None."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass
class Series:
    name: str
    points: list[tuple[float, float]]
    colour: str = ""
    dashed: bool = False
    errors: list[tuple[float, float]] = field(default_factory=list)  # (lo, hi) per point, optional


@dataclass
class Marker:
    x: float
    label: str
    colour: str = "#555"


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e5 or a < 1e-3:
        m, e = f"{v:.0e}".split("e")
        return f"{m}e{int(e)}"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


class Axis:
    """Maps data to pixels on [lo_px, hi_px]; log axes need positive data."""

    def __init__(
        self, values: list[float], lo_px: float, hi_px: float, log: bool = False, base: int = 10
    ):
        self.log, self.base, self.lo_px, self.hi_px = log, base, lo_px, hi_px
        vals = [v for v in values if math.isfinite(v) and (v > 0 or not log)]
        if not vals:
            vals = [1.0, 10.0] if log else [0.0, 1.0]
        lo, hi = min(vals), max(vals)
        if log:
            lo_e, hi_e = math.floor(math.log(lo, base) + 1e-9), math.ceil(math.log(hi, base) - 1e-9)
            if hi_e == lo_e:
                hi_e += 1
            self.lo, self.hi = float(base) ** lo_e, float(base) ** hi_e
        else:
            if lo == hi:
                lo, hi = (lo - 1, hi + 1) if lo == 0 else (lo - abs(lo) * 0.1, hi + abs(hi) * 0.1)
            step = _nice_step((hi - lo) / 5)
            self.lo, self.hi = math.floor(lo / step) * step, math.ceil(hi / step) * step

    def __call__(self, v: float) -> float:
        if self.log:
            v = max(v, self.lo)
            f = (math.log(v) - math.log(self.lo)) / (math.log(self.hi) - math.log(self.lo))
        else:
            f = (v - self.lo) / (self.hi - self.lo)
        return self.lo_px + f * (self.hi_px - self.lo_px)

    def ticks(self) -> list[float]:
        if self.log:
            lo_e = round(math.log(self.lo, self.base))
            hi_e = round(math.log(self.hi, self.base))
            every = max(1, math.ceil((hi_e - lo_e) / 8))
            return [float(self.base) ** e for e in range(lo_e, hi_e + 1, every)]
        step = _nice_step((self.hi - self.lo) / 5)
        n = round((self.hi - self.lo) / step)
        return [self.lo + i * step for i in range(n + 1)]


def _nice_step(raw: float) -> float:
    if raw <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


TITLE_PX = 34  # two title lines: "what: which"


def _svg_open(width: int, height: int, title: str) -> list[str]:
    head, _, rest = title.partition(": ")
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 '
        f'{width} {height}" role="img" aria-label="{escape(title)}" font-family="sans-serif" '
        'font-size="11">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>',
        f'<text x="{width / 2:.1f}" y="14" text-anchor="middle" font-size="13" '
        f'font-weight="bold">{escape(head)}</text>',
        f'<text x="{width / 2:.1f}" y="28" text-anchor="middle" '
        f'font-size="11">{escape(rest[:90])}</text>',
    ]


def no_data(title: str, message: str, width: int = 480, height: int = 200) -> str:
    out = _svg_open(width, height, title)
    out.append(
        f'<rect x="20" y="30" width="{width - 40}" height="{height - 50}" fill="#f6f6f6" '
        'stroke="#bbb" stroke-dasharray="4 3"/>'
    )
    out.append(
        f'<text x="{width / 2:.1f}" y="{height / 2 + 8:.1f}" text-anchor="middle" fill="#666" '
        f'font-size="12" class="no-data">{escape(message)}</text>'
    )
    out.append("</svg>")
    return "\n".join(out)


def line_chart(
    title: str,
    series: list[Series],
    x_label: str,
    y_label: str,
    x_log: bool = False,
    y_log: bool = False,
    x_base: int = 10,
    markers: list[Marker] | None = None,
    width: int = 540,
    height: int = 320,
    note: str = "",
) -> str:
    """A line chart; on a log axis, points at or below zero are left out (and said so in a note)."""
    markers = markers or []
    left, right, top, bottom = 64, 24, TITLE_PX + 6, 62
    legend_rows = math.ceil(len(series) / 2)
    height += 14 * max(0, legend_rows - 1)
    plot_bottom = height - bottom - 14 * max(0, legend_rows - 1)
    dropped = 0
    kept: list[Series] = []
    for s in series:
        pts = [
            (x, y)
            for x, y in s.points
            if math.isfinite(x)
            and math.isfinite(y)
            and (x > 0 or not x_log)
            and (y > 0 or not y_log)
        ]
        dropped += len(s.points) - len(pts)
        kept.append(
            Series(s.name, pts, s.colour, s.dashed, s.errors if len(pts) == len(s.points) else [])
        )
    xs = [x for s in kept for x, _ in s.points] + [m.x for m in markers]
    ys = [y for s in kept for _, y in s.points] + [
        v for s in kept for e in s.errors for v in e if (v > 0 or not y_log)
    ]
    xa = Axis(xs, left, width - right, x_log, x_base)
    ya = Axis(ys, plot_bottom, top, y_log)
    out = _svg_open(width, height, title)
    for t in xa.ticks():
        px = xa(t)
        out.append(
            f'<line x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{plot_bottom}" stroke="#eee"/>'
        )
        out.append(
            f'<text x="{px:.1f}" y="{plot_bottom + 14}" '
            f'text-anchor="middle">{escape(_fmt(t))}</text>'
        )
    for t in ya.ticks():
        py = ya(t)
        out.append(
            f'<line x1="{left}" y1="{py:.1f}" x2="{width - right}" y2="{py:.1f}" stroke="#eee"/>'
        )
        out.append(
            f'<text x="{left - 4}" y="{py + 4:.1f}" text-anchor="end">{escape(_fmt(t))}</text>'
        )
    out.append(
        f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{plot_bottom - top}" '
        'fill="none" stroke="#999"/>'
    )
    out.append(
        f'<text x="{(left + width - right) / 2:.1f}" y="{plot_bottom + 30}" '
        f'text-anchor="middle">{escape(x_label)}{" (log)" if x_log else ""}</text>'
    )
    out.append(
        f'<text transform="translate(14 {(top + plot_bottom) / 2:.1f}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}{" (log)" if y_log else ""}</text>'
    )
    for mi, m in enumerate(markers):
        px = xa(m.x)
        out.append(
            f'<line class="marker" x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{plot_bottom}" '
            f'stroke="{m.colour}" stroke-width="1.5" stroke-dasharray="5 3"/>'
        )
        out.append(
            f'<text x="{px + 3:.1f}" y="{top + 12 + 13 * mi}" fill="{m.colour}" stroke="#fff" '
            f'stroke-width="3" paint-order="stroke">{escape(m.label)}</text>'
        )
    for i, s in enumerate(kept):
        colour = s.colour or PALETTE[i % len(PALETTE)]
        for (x, _), (lo, hi) in zip(s.points, s.errors, strict=False):
            if y_log and lo <= 0:
                lo = ya.lo
            out.append(
                f'<line x1="{xa(x):.1f}" y1="{ya(lo):.1f}" x2="{xa(x):.1f}" y2="{ya(hi):.1f}" '
                f'stroke="{colour}" stroke-width="1" opacity="0.6"/>'
            )
        pts = " ".join(f"{xa(x):.1f},{ya(y):.1f}" for x, y in sorted(s.points))
        dash = ' stroke-dasharray="6 3"' if s.dashed else ""
        if len(s.points) > 1:
            out.append(
                f'<polyline class="series" points="{pts}" fill="none" stroke="{colour}" '
                f'stroke-width="2"{dash}/>'
            )
        for x, y in s.points:
            out.append(
                f'<circle class="series" cx="{xa(x):.1f}" cy="{ya(y):.1f}" r="2.5" '
                f'fill="{colour}"><title>{escape(s.name)}: {escape(_fmt(x))}, '
                f"{escape(_fmt(y))}</title></circle>"
            )
        lx = left + (i % 2) * (width - left - right) / 2
        ly = height - 18 - 14 * (legend_rows - 1 - i // 2)
        out.append(
            f'<line x1="{lx:.1f}" y1="{ly - 4}" x2="{lx + 18:.1f}" y2="{ly - 4}" '
            f'stroke="{colour}" stroke-width="2"{dash}/>'
        )
        out.append(f'<text x="{lx + 22:.1f}" y="{ly}">{escape(s.name[:48])}</text>')
    if dropped or note:
        text = note + (
            f" ({dropped} non-positive point{'s' if dropped != 1 else ''} not drawn on the log "
            "axis)"
            if dropped
            else ""
        )
        out.append(
            f'<text x="{width - right}" y="{height - 4}" text-anchor="end" fill="#666" '
            f'font-size="10">{escape(text.strip())}</text>'
        )
    out.append("</svg>")
    return "\n".join(out)


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
    labels = (["0"] if has_zero else []) + [_fmt(2.0**e) for e in edges]
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
    labels = [f"<{_fmt(edges[0])}"] + [_fmt(e) for e in edges[:-1]] + [f">={_fmt(edges[-1])}"]
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
    out = _svg_open(width, height, title)
    plot_bottom = height - bottom
    ymax = max([1] + [x for c in counts.values() for x in c])
    ya = Axis([0, ymax], plot_bottom, top)
    for t in ya.ticks():
        py = ya(t)
        out.append(
            f'<line x1="{left}" y1="{py:.1f}" x2="{width - right}" y2="{py:.1f}" stroke="#eee"/>'
        )
        out.append(
            f'<text x="{left - 4}" y="{py + 4:.1f}" text-anchor="end">{escape(_fmt(t))}</text>'
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
                    f'fill="{colour}"><title>{escape(name)}: {escape(_fmt(n))} in bin '
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


def sparkline(
    values: list[float | None],
    steps: list[int],
    width: int = 180,
    height: int = 36,
    title: str = "",
) -> str:
    """A small trend line over commits (None: no value at that commit); steps marked in red."""
    pts = [(i, v) for i, v in enumerate(values) if v is not None and math.isfinite(v)]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 '
        f'{width} {height}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
    ]
    if pts:
        n = max(1, len(values) - 1)
        xa = lambda i: 3 + i * (width - 6) / n  # noqa: E731
        ya = Axis([v for _, v in pts], height - 4, 4)
        out.append(
            f'<polyline points="{" ".join(f"{xa(i):.1f},{ya(v):.1f}" for i, v in pts)}" '
            'fill="none" stroke="#1f77b4" stroke-width="1.5"/>'
        )
        for s in steps:
            out.append(
                f'<line class="step" x1="{xa(s) - (width - 6) / n / 2:.1f}" y1="0" '
                f'x2="{xa(s) - (width - 6) / n / 2:.1f}" y2="{height}" stroke="#d62728" '
                'stroke-width="1.5"/>'
            )
        i, v = pts[-1]
        out.append(f'<circle cx="{xa(i):.1f}" cy="{ya(v):.1f}" r="2" fill="#1f77b4"/>')
    out.append("</svg>")
    return "".join(out)
