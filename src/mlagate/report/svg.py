"""The drawing primitives of the report's hand-written SVG charts (mlagate.report.plots,
mlagate.report.barcharts): the palette, threshold markers, number labels, linear and log axes,
the chart's frame with its two title lines, and the chart that says there is no data. Every
label is escaped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")


@dataclass
class Marker:
    x: float
    label: str
    colour: str = "#555"


def fmt(v: float) -> str:
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


def svg_open(width: int, height: int, title: str) -> list[str]:
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
    out = svg_open(width, height, title)
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
