"""One panel of the evidence timeline page as inline SVG: axes, series lines, legend, event marks, or why not.

Every panel has the same geometry, so the time axes line up down the page and a GPU stall sits above the queue
it built. Each panel draws in colours no other panel uses (`PANEL_COLOURS`) and everything else is grey, so a
screenshot shows which plots were drawn. A skipped or failed panel keeps its frame and says why.
probes/report.py lays the panels out in the page, and serving/bench_report.py draws its page in this palette.
"""

from __future__ import annotations

import html
import math
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from probes.report_input import Series, Window, as_text, finite, panel_series, seconds_text

# Each panel's series colours, in the order its series come. No colour is shared between panels and none is a
# grey, so a panel's first colour found in a screenshot proves that panel's lines were drawn.
PANEL_COLOURS: dict[str, tuple[str, ...]] = {
    "gpu": ("#1a9850", "#66bd63", "#006837", "#a6d96a", "#00441b", "#41ab5d"),  # greens
    "cpu": ("#2166ac", "#4393c3", "#08306b", "#92c5de", "#2b8cbe", "#0570b0"),  # blues
    "io": ("#e66101", "#fdae6b", "#a63603", "#fd8d3c", "#d94801", "#7f2704"),  # oranges
    "latency": ("#d7191c", "#fc9272", "#67000d", "#ef3b2c", "#a50f15", "#fcbba1"),  # reds
    "queue": ("#7b3294", "#c2a5cf", "#3f007d", "#9e9ac8", "#6a51a3", "#ae017e"),  # purples
}
# Everything that is not a series is grey, black or white.
BACKGROUND = "#ffffff"
TEXT = "#111111"
MUTED = "#555555"
GRID = "#e5e5e5"
AXIS = "#333333"
FRAME = "#999999"
EVENT = "#777777"

# One panel's SVG, in px. Every panel has the same x scale: PLOT_LEFT is the window start, PLOT_RIGHT its end.
# The y scale runs from min(0, lowest value) at PLOT_BOTTOM to the highest value at PLOT_TOP.
PANEL_WIDTH = 900
PANEL_HEIGHT = 220
PLOT_LEFT = 96
PLOT_RIGHT = 700
PLOT_TOP = 30
PLOT_BOTTOM = 186
LEGEND_LEFT = 716
LEGEND_ROW = 15
LEGEND_LABEL_CHARS = 26
LINE_WIDTH = 2  # px; thinner lines do not survive rasterisation as their own colour
# A panel with more series than colours repeats them, dashed.
_REPEAT_DASH = "6 3"


def _nice_step(span: float, target: int) -> float:
    """A 1, 2 or 5 x 10^k step giving about `target` intervals over `span`."""
    raw = span / target
    mag = 10.0 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw * (1 - 1e-9))


def _ticks(lo: float, hi: float, target: int) -> tuple[list[float], float]:
    step = _nice_step(hi - lo, target)
    first = math.ceil(lo / step - 1e-9)
    ticks: list[float] = []
    k = first
    while k * step <= hi + step * 1e-9:
        ticks.append(round(k * step, 12) + 0.0)
        k += 1
    return ticks, step


def _tick_label(v: float, step: float) -> str:
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return f"{v:,.{decimals}f}"


def _y_domain(values: Sequence[float]) -> tuple[float, float]:
    lo, hi = min(0.0, *values), max(values)
    if hi <= lo:
        hi = lo + 1.0
    return lo, hi


def _x(t: float, seconds: float) -> float:
    return PLOT_LEFT + t / seconds * (PLOT_RIGHT - PLOT_LEFT)


def _y(v: float, lo: float, hi: float) -> float:
    return PLOT_BOTTOM - (v - lo) / (hi - lo) * (PLOT_BOTTOM - PLOT_TOP)


def escape(text: object) -> str:
    """Text for HTML and SVG, quotes too: every string here comes from timeline.json, which a capture wrote."""
    return html.escape(str(text), quote=True)


def _text(
    x: float, y: float, text: str, *, size: int = 11, anchor: str = "start", fill: str = TEXT, extra: str = ""
) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}"{extra}>'
        f"{escape(text)}</text>"
    )


def _x_axis(seconds: float) -> list[str]:
    out: list[str] = []
    ticks, step = _ticks(0.0, seconds, 10)
    for t in ticks:
        x = _x(t, seconds)
        out.append(f'<line x1="{x:.1f}" y1="{PLOT_TOP}" x2="{x:.1f}" y2="{PLOT_BOTTOM}" stroke="{GRID}"/>')
        out.append(f'<line x1="{x:.1f}" y1="{PLOT_BOTTOM}" x2="{x:.1f}" y2="{PLOT_BOTTOM + 4}" stroke="{AXIS}"/>')
        out.append(_text(x, PLOT_BOTTOM + 15, f"{_tick_label(t, step)} s", size=10, anchor="middle"))
    out.append(_text(PLOT_RIGHT, PLOT_BOTTOM + 29, "seconds since window start", size=10, anchor="end", fill=MUTED))
    return out


def _y_axis(lo: float, hi: float, unit: str) -> list[str]:
    out: list[str] = []
    ticks, step = _ticks(lo, hi, 4)
    for v in ticks:
        y = _y(v, lo, hi)
        out.append(f'<line x1="{PLOT_LEFT}" y1="{y:.1f}" x2="{PLOT_RIGHT}" y2="{y:.1f}" stroke="{GRID}"/>')
        out.append(f'<line x1="{PLOT_LEFT - 4}" y1="{y:.1f}" x2="{PLOT_LEFT}" y2="{y:.1f}" stroke="{AXIS}"/>')
        label = f"{_tick_label(v, step)} {unit}".strip()
        out.append(_text(PLOT_LEFT - 7, y + 3.5, label, size=10, anchor="end"))
    return out


def _events(events: Sequence[Any], seconds: float) -> list[str]:
    out: list[str] = []
    for i, ev in enumerate(events, start=1):
        t = finite(ev.get("t_s")) if isinstance(ev, Mapping) else None
        if t is None or not 0 <= t <= seconds:
            continue
        x = _x(t, seconds)
        label = f"{i}: {seconds_text(t)} {as_text(ev.get('label'), '')}"
        out.append(
            f'<g data-event="{i}"><title>{escape(label)}</title>'
            f'<line x1="{x:.1f}" y1="{PLOT_TOP}" x2="{x:.1f}" y2="{PLOT_BOTTOM}" stroke="{EVENT}" '
            f'stroke-width="1" stroke-dasharray="4 3"/>'
            f"{_text(x, PLOT_TOP - 3, str(i), size=9, anchor='middle', fill=MUTED)}</g>"
        )
    return out


def _centred_message(message: str) -> list[str]:
    lines = textwrap.wrap(message, 80)[:4] or [""]
    mid = (PLOT_LEFT + PLOT_RIGHT) / 2
    top = (PLOT_TOP + PLOT_BOTTOM) / 2 - (len(lines) - 1) * 8
    return [_text(mid, top + i * 16 + 4, line, size=12, anchor="middle", fill=MUTED) for i, line in enumerate(lines)]


def _colour(key: str, i: int) -> tuple[str, str]:
    """(colour, dash) of a panel's i-th series; dash is '' for solid."""
    palette = PANEL_COLOURS[key]
    return palette[i % len(palette)], (_REPEAT_DASH if i >= len(palette) else "")


def _lines(key: str, series: Sequence[Series], seconds: float, lo: float, hi: float) -> list[str]:
    out: list[str] = []
    for i, s in enumerate(series):
        colour, dash = _colour(key, i)
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        for seg in s.segments:
            pts = [(_x(t, seconds), _y(v, lo, hi)) for t, v in seg]
            if len(pts) == 1:  # a lone sample: a dot, since a one-point line draws nothing
                (x, y) = pts[0]
                out.append(
                    f'<circle data-series="{escape(s.name)}" cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{colour}"/>'
                )
                continue
            points = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            out.append(
                f'<polyline data-series="{escape(s.name)}" points="{points}" fill="none" stroke="{colour}" '
                f'stroke-width="{LINE_WIDTH}" stroke-linejoin="round" stroke-linecap="round"{dash_attr}/>'
            )
    return out


def _legend(key: str, series: Sequence[Series]) -> list[str]:
    out: list[str] = []
    rows = (PLOT_BOTTOM - PLOT_TOP) // LEGEND_ROW
    shown = series if len(series) <= rows else series[: rows - 1]
    for i, s in enumerate(shown):
        y = PLOT_TOP + 8 + i * LEGEND_ROW
        name = s.name if len(s.name) <= LEGEND_LABEL_CHARS else s.name[: LEGEND_LABEL_CHARS - 1] + "\u2026"
        if s.values:
            colour, dash = _colour(key, i)
            dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
            swatch = (
                f'<line x1="{LEGEND_LEFT}" y1="{y:.1f}" x2="{LEGEND_LEFT + 14}" y2="{y:.1f}" stroke="{colour}" '
                f'stroke-width="{LINE_WIDTH}"{dash_attr}/>'
            )
            label = _text(LEGEND_LEFT + 20, y + 3.5, name, size=10)
        else:  # nothing drawn, so no colour either
            swatch = ""
            label = _text(LEGEND_LEFT + 20, y + 3.5, f"{name} (no samples)", size=10, fill=MUTED)
        out.append(f'<g data-legend="{escape(s.name)}"><title>{escape(s.name)}</title>{swatch}{label}</g>')
    if len(shown) < len(series):
        y = PLOT_TOP + 8 + len(shown) * LEGEND_ROW
        out.append(_text(LEGEND_LEFT + 20, y + 3.5, f"+{len(series) - len(shown)} more in summary.txt", size=10))
    return out


def panel_svg(key: str, panel: Mapping[str, Any] | None, window: Window, events: Sequence[Any]) -> str:
    """One panel's <svg>: its lines over the window with the events marked, or the frame and why it has none."""
    panel = panel if isinstance(panel, Mapping) else {}
    title = as_text(panel.get("title"), key)
    unit = as_text(panel.get("unit"), "")
    status = as_text(panel.get("status"), "missing")
    heading = f"{title} ({unit})" if unit else title
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" data-panel="{escape(key)}" data-status="{escape(status)}" '
        f'width="{PANEL_WIDTH}" height="{PANEL_HEIGHT}" viewBox="0 0 {PANEL_WIDTH} {PANEL_HEIGHT}" '
        f'role="img" aria-label="{escape(heading)}: {escape(status)}">',
        f"<title>{escape(heading)}: {escape(status)}</title>",
        f'<rect x="0" y="0" width="{PANEL_WIDTH}" height="{PANEL_HEIGHT}" fill="{BACKGROUND}"/>',
        _text(PLOT_LEFT, 16, heading, size=13, extra=' font-weight="bold"'),
    ]
    out.extend(_x_axis(window.seconds))
    # Frame and axis first: a series that sits at zero is drawn over the axis, not hidden under it.
    out.append(
        f'<rect x="{PLOT_LEFT}" y="{PLOT_TOP}" width="{PLOT_RIGHT - PLOT_LEFT}" height="{PLOT_BOTTOM - PLOT_TOP}" '
        f'fill="none" stroke="{FRAME}"/>'
    )
    out.append(f'<line x1="{PLOT_LEFT}" y1="{PLOT_BOTTOM}" x2="{PLOT_RIGHT}" y2="{PLOT_BOTTOM}" stroke="{AXIS}"/>')
    series = panel_series(panel, window.seconds) if status == "successful" else []
    values = [v for s in series for v in s.values]
    if status != "successful":
        reason = panel.get("reason")
        if not panel:
            message = "MISSING: this panel is not in timeline.json"
        else:
            message = f"{status.upper()}: {reason}" if reason else f"{status.upper()} (no reason given)"
        out.extend(_centred_message(message))
    elif not values:
        out.extend(_centred_message("no samples in the window"))
        out.extend(_legend(key, series))
    else:
        lo, hi = _y_domain(values)
        out.extend(_y_axis(lo, hi, unit))
        out.extend(_lines(key, series, window.seconds, lo, hi))
        out.extend(_legend(key, series))
    out.extend(_events(events, window.seconds))
    out.append("</svg>")
    return "\n".join(out)


def panel_caption(panel: Mapping[str, Any] | None, window: Window) -> str:
    """The line under a panel: where its data came from, and how many samples fell outside the window."""
    panel = panel if isinstance(panel, Mapping) else {}
    parts = [f"source: {as_text(panel.get('source'), 'not recorded')}"]
    if panel.get("status") == "successful":
        outside = sum(s.outside for s in panel_series(panel, window.seconds))
        if outside:
            parts.append(f"{outside} samples outside the window not drawn")
    return "; ".join(parts)
