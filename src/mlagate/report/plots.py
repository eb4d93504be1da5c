"""Static SVG charts written by hand: line charts on linear or log axes, with threshold
markers, bar histograms and sparklines. No JavaScript, no fonts or files fetched: every
chart is one self-contained <svg> string, and every label in it is escaped.

The drawing primitives (palette, markers, axes, the frame) are in mlagate.report.svg and the bar
charts in mlagate.report.barcharts; this module re-exports both.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from html import escape

from mlagate.report.barcharts import bars, binned_histogram, histogram
from mlagate.report.svg import PALETTE, TITLE_PX, Axis, Marker, fmt, no_data, svg_open

__all__ = [
    "PALETTE",
    "Axis",
    "Marker",
    "Plot",
    "Series",
    "bars",
    "binned_histogram",
    "histogram",
    "line_chart",
    "no_data",
    "num",
    "short",
    "slug",
    "sparkline",
]


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
    kept, dropped = _plottable(series, x_log, y_log)
    xs = [x for s in kept for x, _ in s.points] + [m.x for m in markers]
    ys = [y for s in kept for _, y in s.points] + [
        v for s in kept for e in s.errors for v in e if (v > 0 or not y_log)
    ]
    xa = Axis(xs, left, width - right, x_log, x_base)
    ya = Axis(ys, plot_bottom, top, y_log)
    area = _Area(width, height, left, right, top, plot_bottom, xa, ya)
    out = svg_open(width, height, title)
    out += _grid(area)
    out += _axis_labels(area, x_label, y_label, x_log, y_log)
    out += _marker_lines(area, markers)
    for i, s in enumerate(kept):
        out += _series_lines(area, i, s, y_log, legend_rows)
    if dropped or note:
        out.append(_note(area, note, dropped))
    out.append("</svg>")
    return "\n".join(out)


@dataclass
class _Area:
    """A line chart's size, its plot area in pixels and its two axes."""

    width: int
    height: int
    left: int
    right: int
    top: int
    plot_bottom: int
    xa: Axis
    ya: Axis


def _plottable(series: list[Series], x_log: bool, y_log: bool) -> tuple[list[Series], int]:
    """The series with only their finite points (positive ones on a log axis; error bars kept
    only when no point went) and how many points were left out."""
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
    return kept, dropped


def _grid(a: _Area) -> list[str]:
    """Grid lines and tick labels of both axes."""
    out = []
    for t in a.xa.ticks():
        px = a.xa(t)
        out.append(
            f'<line x1="{px:.1f}" y1="{a.top}" x2="{px:.1f}" y2="{a.plot_bottom}" stroke="#eee"/>'
        )
        out.append(
            f'<text x="{px:.1f}" y="{a.plot_bottom + 14}" '
            f'text-anchor="middle">{escape(fmt(t))}</text>'
        )
    for t in a.ya.ticks():
        py = a.ya(t)
        out.append(
            f'<line x1="{a.left}" y1="{py:.1f}" x2="{a.width - a.right}" y2="{py:.1f}" '
            'stroke="#eee"/>'
        )
        out.append(
            f'<text x="{a.left - 4}" y="{py + 4:.1f}" text-anchor="end">{escape(fmt(t))}</text>'
        )
    return out


def _axis_labels(a: _Area, x_label: str, y_label: str, x_log: bool, y_log: bool) -> list[str]:
    """The plot area's border and the two axis labels ("(log)" on a log axis)."""
    return [
        f'<rect x="{a.left}" y="{a.top}" width="{a.width - a.left - a.right}" '
        f'height="{a.plot_bottom - a.top}" fill="none" stroke="#999"/>',
        f'<text x="{(a.left + a.width - a.right) / 2:.1f}" y="{a.plot_bottom + 30}" '
        f'text-anchor="middle">{escape(x_label)}{" (log)" if x_log else ""}</text>',
        f'<text transform="translate(14 {(a.top + a.plot_bottom) / 2:.1f}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}{" (log)" if y_log else ""}</text>',
    ]


def _marker_lines(a: _Area, markers: list[Marker]) -> list[str]:
    """A dashed vertical line per threshold marker, its label stacked below the earlier ones'."""
    out = []
    for mi, m in enumerate(markers):
        px = a.xa(m.x)
        out.append(
            f'<line class="marker" x1="{px:.1f}" y1="{a.top}" x2="{px:.1f}" y2="{a.plot_bottom}" '
            f'stroke="{m.colour}" stroke-width="1.5" stroke-dasharray="5 3"/>'
        )
        out.append(
            f'<text x="{px + 3:.1f}" y="{a.top + 12 + 13 * mi}" fill="{m.colour}" stroke="#fff" '
            f'stroke-width="3" paint-order="stroke">{escape(m.label)}</text>'
        )
    return out


def _series_lines(a: _Area, i: int, s: Series, y_log: bool, legend_rows: int) -> list[str]:
    """Series i: its error bars, its line (two points or more), its points with their values
    as tooltips, and its legend entry (two entries a row)."""
    xa, ya = a.xa, a.ya
    out = []
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
            f'fill="{colour}"><title>{escape(s.name)}: {escape(fmt(x))}, '
            f"{escape(fmt(y))}</title></circle>"
        )
    lx = a.left + (i % 2) * (a.width - a.left - a.right) / 2
    ly = a.height - 18 - 14 * (legend_rows - 1 - i // 2)
    out.append(
        f'<line x1="{lx:.1f}" y1="{ly - 4}" x2="{lx + 18:.1f}" y2="{ly - 4}" '
        f'stroke="{colour}" stroke-width="2"{dash}/>'
    )
    out.append(f'<text x="{lx + 22:.1f}" y="{ly}">{escape(s.name[:48])}</text>')
    return out


def _note(a: _Area, note: str, dropped: int) -> str:
    """The note at the bottom right, with how many points a log axis left out."""
    text = note + (
        f" ({dropped} non-positive point{'s' if dropped != 1 else ''} not drawn on the log axis)"
        if dropped
        else ""
    )
    return (
        f'<text x="{a.width - a.right}" y="{a.height - 4}" text-anchor="end" fill="#666" '
        f'font-size="10">{escape(text.strip())}</text>'
    )


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
