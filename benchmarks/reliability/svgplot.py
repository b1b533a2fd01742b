"""A tiny SVG line/bar chart writer (no plotting dependency): enough for the figures in docs/reliability.md."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from pathlib import Path

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")
W, H, L, R, T, B = 640, 360, 70, 20, 40, 50


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        return [10.0**e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
    step = 10 ** math.floor(math.log10(max(hi - lo, 1e-9)))
    for mult in (1, 2, 5, 10):
        if (hi - lo) / (step * mult) <= 8:
            step *= mult
            break
    start = math.floor(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 2)]


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 10 or v == 0 else f"{v:g}"


def line_chart(
    path: Path,
    title: str,
    series: dict[str, Sequence[tuple[float, float]]],
    *,
    xlabel: str,
    ylabel: str,
    xlog: bool = False,
    ylog: bool = False,
    ymin: float | None = 0.0,
) -> None:
    points = [p for s in series.values() for p in s]
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1 = min(xs), max(xs)
    y0 = min(ys) if (ymin is None or ylog) else ymin
    y1 = max(ys) * 1.1
    xt, yt = _ticks(x0, x1, xlog), _ticks(y0, y1, ylog)
    if not xlog:
        x0, x1 = min(x0, xt[0]), max(x1, xt[-1]) if xt[-1] <= x1 * 1.3 else x1
    if ylog:
        y0, y1 = yt[0], yt[-1]
    else:
        y1 = yt[-1] if yt[-1] >= y1 else y1

    def sx(x: float) -> float:
        f = (math.log10(x) - math.log10(x0)) / (math.log10(x1) - math.log10(x0)) if xlog else (x - x0) / (x1 - x0)
        return L + f * (W - L - R)

    def sy(y: float) -> float:
        f = (math.log10(y) - math.log10(y0)) / (math.log10(y1) - math.log10(y0)) if ylog else (y - y0) / (y1 - y0)
        return H - B - f * (H - T - B)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
    ]
    for x in xt:
        if x0 <= x <= x1:
            out.append(f'<line x1="{sx(x):.1f}" y1="{T}" x2="{sx(x):.1f}" y2="{H - B}" stroke="#eee"/>')
            out.append(f'<text x="{sx(x):.1f}" y="{H - B + 16}" text-anchor="middle">{_fmt(x)}</text>')
    for y in yt:
        if y0 <= y <= y1:
            out.append(f'<line x1="{L}" y1="{sy(y):.1f}" x2="{W - R}" y2="{sy(y):.1f}" stroke="#eee"/>')
            out.append(f'<text x="{L - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{_fmt(y)}</text>')
    out.append(f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>')
    out.append(f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">{escape(xlabel)}</text>')
    out.append(
        f'<text x="16" y="{(T + H - B) / 2}" text-anchor="middle" transform="rotate(-90 16 {(T + H - B) / 2})">'
        f"{escape(ylabel)}</text>"
    )
    for i, (name, pts) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2"/>')
        out.extend(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}"/>' for x, y in pts)
        out.append(f'<rect x="{L + 10}" y="{T + 6 + i * 16}" width="12" height="3" fill="{color}"/>')
        out.append(f'<text x="{L + 28}" y="{T + 11 + i * 16}">{escape(name)}</text>')
    out.append("</svg>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n")
