"""The evidence bundle's timeline, for people: a self-contained HTML page and a plain-text summary.

An evidence capture writes `timeline.json` into its bundle: the window it watched, five panels of series
sampled in it (GPU, CPU, I/O, latency, queue; each `successful`, `skipped` or `failed`, with the reason),
events such as py-spy dumps, the window's summary figures, notes, and the bundle's other artifacts.
`write_report` turns it into `timeline.html` and `summary.txt`. The page is one file: inline SVG drawn here,
no scripts, fonts, stylesheets or anything else fetched, so it opens offline from a copied bundle. The
panels share one time axis, seconds since the window start, so a GPU stall lines up with the queue it
built. Each panel draws in colours no other panel uses (`PANEL_COLOURS`) and everything else is grey, so a
screenshot shows which plots were drawn. A skipped or failed panel keeps its frame and says why.
`summary.txt` is what an SRE pastes into an incident: the figures with units, each panel's status and
per-series min/median/max, the notes, and where the raw artifacts are.

  python -m probes.report BUNDLE_DIR

Exit status: 0 written (the two paths on stdout), 1 could not write them, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import html
import json
import math
import statistics
import sys
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
TIMELINE_FILE = "timeline.json"
HTML_FILE = "timeline.html"
SUMMARY_FILE = "summary.txt"
# timeline.json always has these panels, drawn in this order.
PANEL_KEYS = ("gpu", "cpu", "io", "latency", "queue")
STATUSES = ("successful", "skipped", "failed")

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

# summary key -> (what it is, unit), in the order summary.txt lists them; other keys follow, unit from the suffix.
SUMMARY_FIGURES: dict[str, tuple[str, str]] = {
    "requests": ("requests", ""),
    "prompt_tokens": ("prompt tokens", "tokens"),
    "generation_tokens": ("generation tokens", "tokens"),
    "ttft_p50_ms": ("TTFT p50", "ms"),
    "ttft_p99_ms": ("TTFT p99", "ms"),
    "itl_p50_ms": ("ITL p50", "ms"),
    "itl_p99_ms": ("ITL p99", "ms"),
    "e2e_p50_ms": ("e2e p50", "ms"),
    "e2e_p99_ms": ("e2e p99", "ms"),
    "preemptions": ("preemptions", ""),
}
_SUFFIX_UNITS = (("_ms", "ms"), ("_s", "s"), ("_pct", "%"), ("_bytes", "bytes"), ("_tokens", "tokens"))


class ReportInputError(ValueError):
    """timeline.json is missing, unreadable, or not the schema this module draws."""


# --- input ---------------------------------------------------------------------------------------------------


def _is_number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _finite(x: object) -> float | None:
    """x as a float if it is a finite JSON number, else None."""
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) else None


def _check_series(key: str, series: object) -> None:
    if not isinstance(series, dict):
        raise ReportInputError(f"panels.{key}.series must be an object of name -> [[t_s, value], ...]")
    for name, points in series.items():
        if not isinstance(points, list):
            raise ReportInputError(f"panels.{key}.series[{name!r}] must be a list of [t_s, value] pairs")
        for i, p in enumerate(points):
            ok = (
                isinstance(p, list) and len(p) == 2 and _finite(p[0]) is not None and (p[1] is None or _is_number(p[1]))
            )
            if not ok:
                raise ReportInputError(f"panels.{key}.series[{name!r}][{i}] is {p!r}, not a [t_s, value] pair")


def validate_timeline(timeline: object) -> dict[str, Any]:
    """`timeline` if it is a schema 1 timeline this module can draw; ReportInputError naming what is wrong."""
    if not isinstance(timeline, dict):
        raise ReportInputError(f"timeline must be a JSON object, not {type(timeline).__name__}")
    version = timeline.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ReportInputError(f"schema_version is {version!r}; this report reads schema_version {SCHEMA_VERSION}")
    window = timeline.get("window")
    if not isinstance(window, dict):
        raise ReportInputError("missing key 'window' (an object with start_wall, end_wall, seconds)")
    seconds = _finite(window.get("seconds"))
    if seconds is None or seconds <= 0:
        raise ReportInputError(f"window.seconds is {window.get('seconds')!r}; expected a positive number")
    panels = timeline.get("panels")
    if not isinstance(panels, dict):
        raise ReportInputError(f"missing key 'panels' (an object with {', '.join(PANEL_KEYS)})")
    for key in PANEL_KEYS:
        if key not in panels:
            raise ReportInputError(f"missing panel 'panels.{key}' (timeline.json must have {', '.join(PANEL_KEYS)})")
        panel = panels[key]
        if not isinstance(panel, dict):
            raise ReportInputError(f"panels.{key} must be an object")
        if panel.get("status") not in STATUSES:
            raise ReportInputError(f"panels.{key}.status is {panel.get('status')!r}; expected one of {STATUSES}")
        _check_series(key, panel.get("series", {}))
    unknown = [k for k in panels if k not in PANEL_KEYS]
    if unknown:
        raise ReportInputError(f"unknown panel {unknown[0]!r} (schema 1 has {', '.join(PANEL_KEYS)})")
    for name in ("events", "notes"):
        if not isinstance(timeline.get(name, []), list):
            raise ReportInputError(f"{name} must be a list")
    for name in ("summary", "artifacts"):
        if not isinstance(timeline.get(name, {}), dict):
            raise ReportInputError(f"{name} must be an object")
    return timeline


def load_timeline(path: Path) -> dict[str, Any]:
    """Read and check a bundle's timeline.json (see `validate_timeline`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReportInputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ReportInputError(f"{path}: cannot read: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ReportInputError(f"{path}: not JSON: {e}") from None
    try:
        return validate_timeline(data)
    except ReportInputError as e:
        raise ReportInputError(f"{path}: {e}") from None


# --- figures -------------------------------------------------------------------------------------------------


def _str(x: object, default: str = "?") -> str:
    return default if x is None else str(x)


def _num(v: object) -> str:
    """A figure for people: thousands separated, one decimal unless small; n/a for null."""
    if v is None:
        return "n/a"
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if not math.isfinite(v):
        return str(v)
    if v == 0 or abs(v) >= 1:
        return f"{v:,.1f}"
    return f"{v:.3g}"


def _seconds(s: object) -> str:
    return f"{s:g} s" if _is_number(s) else "? s"


@dataclass(frozen=True)
class _Window:
    start_wall: str
    end_wall: str
    seconds: float


def _window(timeline: Mapping[str, Any]) -> _Window:
    w = timeline.get("window") or {}
    seconds = _finite(w.get("seconds"))
    if seconds is None or seconds <= 0:
        seconds = 1.0  # unvalidated input: still draw something, the axis says 0..1
    return _Window(_str(w.get("start_wall")), _str(w.get("end_wall")), seconds)


@dataclass(frozen=True)
class _Series:
    """One series as drawn: runs of points inside the window (a null value breaks the line)."""

    name: str
    segments: tuple[tuple[tuple[float, float], ...], ...]
    outside: int  # samples before 0 or after the window's end, not drawn

    @property
    def values(self) -> list[float]:
        return [v for seg in self.segments for _, v in seg]


def _series(name: str, raw: object, seconds: float) -> _Series:
    segments: list[tuple[tuple[float, float], ...]] = []
    run: list[tuple[float, float]] = []
    outside = 0
    for p in raw if isinstance(raw, list) else []:
        t, v = (_finite(p[0]), _finite(p[1])) if isinstance(p, list | tuple) and len(p) == 2 else (None, None)
        if t is None:
            continue
        if not 0 <= t <= seconds:
            outside += 1
            continue
        if v is not None:
            run.append((t, v))
        elif run:
            segments.append(tuple(run))
            run = []
    if run:
        segments.append(tuple(run))
    return _Series(name, tuple(segments), outside)


def _panel_series(panel: Mapping[str, Any], seconds: float) -> list[_Series]:
    raw = panel.get("series") or {}
    return [_series(str(name), points, seconds) for name, points in raw.items()] if isinstance(raw, dict) else []


def _figures(summary: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(what, value, unit) rows of the summary figures, known ones first."""
    rows = [(label, _num(summary.get(key)), unit) for key, (label, unit) in SUMMARY_FIGURES.items()]
    for key, value in summary.items():
        if key not in SUMMARY_FIGURES:
            unit = next((u for suffix, u in _SUFFIX_UNITS if key.endswith(suffix)), "")
            rows.append((key, _num(value), unit))
    return rows


def _artifact_href(path: str) -> str | None:
    """A link for a relative path inside the bundle; None for anything that could leave it."""
    if not path or path.startswith(("/", "\\")) or ":" in path.split("/", 1)[0] or ".." in path.split("/"):
        return None
    return path


# --- SVG -----------------------------------------------------------------------------------------------------


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


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _text(
    x: float, y: float, text: str, *, size: int = 11, anchor: str = "start", fill: str = TEXT, extra: str = ""
) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}"{extra}>'
        f"{_e(text)}</text>"
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
        t = _finite(ev.get("t_s")) if isinstance(ev, Mapping) else None
        if t is None or not 0 <= t <= seconds:
            continue
        x = _x(t, seconds)
        label = f"{i}: {_seconds(t)} {_str(ev.get('label'), '')}"
        out.append(
            f'<g data-event="{i}"><title>{_e(label)}</title>'
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


def _lines(key: str, series: Sequence[_Series], seconds: float, lo: float, hi: float) -> list[str]:
    out: list[str] = []
    for i, s in enumerate(series):
        colour, dash = _colour(key, i)
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        for seg in s.segments:
            pts = [(_x(t, seconds), _y(v, lo, hi)) for t, v in seg]
            if len(pts) == 1:  # a lone sample: a dot, since a one-point line draws nothing
                (x, y) = pts[0]
                out.append(f'<circle data-series="{_e(s.name)}" cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{colour}"/>')
                continue
            points = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            out.append(
                f'<polyline data-series="{_e(s.name)}" points="{points}" fill="none" stroke="{colour}" '
                f'stroke-width="{LINE_WIDTH}" stroke-linejoin="round" stroke-linecap="round"{dash_attr}/>'
            )
    return out


def _legend(key: str, series: Sequence[_Series]) -> list[str]:
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
        out.append(f'<g data-legend="{_e(s.name)}"><title>{_e(s.name)}</title>{swatch}{label}</g>')
    if len(shown) < len(series):
        y = PLOT_TOP + 8 + len(shown) * LEGEND_ROW
        out.append(_text(LEGEND_LEFT + 20, y + 3.5, f"+{len(series) - len(shown)} more in summary.txt", size=10))
    return out


def _panel_svg(key: str, panel: Mapping[str, Any] | None, window: _Window, events: Sequence[Any]) -> str:
    panel = panel if isinstance(panel, Mapping) else {}
    title = _str(panel.get("title"), key)
    unit = _str(panel.get("unit"), "")
    status = _str(panel.get("status"), "missing")
    heading = f"{title} ({unit})" if unit else title
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" data-panel="{_e(key)}" data-status="{_e(status)}" '
        f'width="{PANEL_WIDTH}" height="{PANEL_HEIGHT}" viewBox="0 0 {PANEL_WIDTH} {PANEL_HEIGHT}" '
        f'role="img" aria-label="{_e(heading)}: {_e(status)}">',
        f"<title>{_e(heading)}: {_e(status)}</title>",
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
    series = _panel_series(panel, window.seconds) if status == "successful" else []
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


def _panel_caption(panel: Mapping[str, Any] | None, window: _Window) -> str:
    panel = panel if isinstance(panel, Mapping) else {}
    parts = [f"source: {_str(panel.get('source'), 'not recorded')}"]
    if panel.get("status") == "successful":
        outside = sum(s.outside for s in _panel_series(panel, window.seconds))
        if outside:
            parts.append(f"{outside} samples outside the window not drawn")
    return "; ".join(parts)


# --- HTML ----------------------------------------------------------------------------------------------------

_STYLE = f"""
body {{ margin: 16px 24px; background: {BACKGROUND}; color: {TEXT}; font-family: sans-serif; font-size: 14px; }}
h1 {{ font-size: 20px; margin: 0 0 4px; }}
h2 {{ font-size: 16px; margin: 18px 0 6px; }}
p {{ margin: 4px 0; }}
table {{ border-collapse: collapse; font-family: monospace; font-size: 13px; }}
th, td {{ padding: 1px 14px 1px 0; text-align: left; }}
td.num {{ text-align: right; }}
figure {{ margin: 0 0 10px; }}
figcaption, .muted {{ color: {MUTED}; font-size: 12px; }}
svg {{ display: block; }}
a {{ color: {TEXT}; }}
"""


def render_html(timeline: Mapping[str, Any]) -> str:
    """The timeline as one self-contained HTML page: header, summary table, the five panels, events, notes."""
    w = _window(timeline)
    host = _str(timeline.get("host"))
    container = _str(timeline.get("container"))
    panels = timeline.get("panels") or {}
    events = timeline.get("events") or []
    summary = timeline.get("summary") or {}
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>timeline {_e(host)} {_e(w.start_wall)}</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        "<body>",
        "<header>",
        f"<h1>Evidence timeline: {_e(host)}, container {_e(container)}</h1>",
        f"<p>window: {_e(w.start_wall)} &rarr; {_e(w.end_wall)} ({_e(_seconds(w.seconds))})</p>",
        "</header>",
        "<h2>Summary</h2>",
        '<table class="summary">',
        "<tr><th>figure</th><th>value</th><th>unit</th></tr>",
    ]
    for label, value, unit in _figures(summary if isinstance(summary, Mapping) else {}):
        out.append(f'<tr><td>{_e(label)}</td><td class="num">{_e(value)}</td><td>{_e(unit)}</td></tr>')
    out.append("</table>")
    out.append("<h2>Panels</h2>")
    out.append(
        f'<p class="muted">x axis, shared by every panel: seconds since the window start, {_e(w.start_wall)}. '
        "Dashed lines are events, numbered as in the list below.</p>"
    )
    for key in PANEL_KEYS:
        panel = panels.get(key) if isinstance(panels, Mapping) else None
        out.append(f'<figure id="panel-{key}">')
        out.append(_panel_svg(key, panel, w, events))
        out.append(f"<figcaption>{_e(_panel_caption(panel, w))}</figcaption>")
        out.append("</figure>")
    out.append("<h2>Events</h2>")
    if events:
        out.append("<ol>")
        for ev in events:
            ev = ev if isinstance(ev, Mapping) else {}
            out.append(f"<li>{_e(_seconds(ev.get('t_s')))}: {_e(_str(ev.get('label'), ''))}</li>")
        out.append("</ol>")
    else:
        out.append('<p class="muted">none</p>')
    out.append("<h2>Notes</h2>")
    notes = timeline.get("notes") or []
    out.extend(["<ul>", *(f"<li>{_e(n)}</li>" for n in notes), "</ul>"] if notes else ['<p class="muted">none</p>'])
    out.append("<h2>Artifacts</h2>")
    artifacts = timeline.get("artifacts") or {}
    if artifacts:
        out.append('<table class="artifacts">')
        for name, path in artifacts.items():
            href = _artifact_href(str(path))
            cell = f'<a href="{_e(href)}">{_e(path)}</a>' if href else _e(path)
            out.append(f"<tr><td>{_e(name)}</td><td>{cell}</td></tr>")
        out.append("</table>")
    else:
        out.append('<p class="muted">none listed</p>')
    out.extend(["</body>", "</html>"])
    return "\n".join(out) + "\n"


# --- plain text ----------------------------------------------------------------------------------------------


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool], indent: str) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(r: Sequence[str]) -> str:
        cells = [c.rjust(w) if rt else c.ljust(w) for c, w, rt in zip(r, widths, right, strict=True)]
        return (indent + "  ".join(cells)).rstrip()

    return [line(header), *(line(r) for r in rows)]


def render_summary(timeline: Mapping[str, Any]) -> str:
    """Plain text for an incident: host, window, figures with units, each panel's series, notes, artifacts."""
    w = _window(timeline)
    lines = [
        f"evidence timeline: host {_str(timeline.get('host'))}, container {_str(timeline.get('container'))}",
        f"window: {w.start_wall} -> {w.end_wall} ({_seconds(w.seconds)})",
        "",
        "summary:",
    ]
    summary = timeline.get("summary") or {}
    figures = _figures(summary if isinstance(summary, Mapping) else {})
    lines.extend(_table(("figure", "value", "unit"), figures, (False, True, False), "  "))
    lines.extend(["", "panels (min / median / max over the samples in the window):"])
    panels = timeline.get("panels") or {}
    for key in PANEL_KEYS:
        panel = panels.get(key) if isinstance(panels, Mapping) else None
        if not isinstance(panel, Mapping):
            lines.append(f"  {key}: MISSING from timeline.json")
            continue
        unit = _str(panel.get("unit"), "")
        status = _str(panel.get("status"), "missing")
        head = f"  {_str(panel.get('title'), key)}" + (f" ({unit})" if unit else "") + f": {status}"
        if status != "successful":
            head += f": {_str(panel.get('reason'), 'no reason given')}"
        lines.append(head)
        lines.append(f"    source: {_str(panel.get('source'), 'not recorded')}")
        if status != "successful":
            continue
        series = _panel_series(panel, w.seconds)
        if not series:
            lines.append("    no series")
            continue
        rows = []
        for s in series:
            v = s.values
            stats = (_num(min(v)), _num(statistics.median(v)), _num(max(v))) if v else ("-", "-", "-")
            rows.append((s.name, str(len(v)), *stats))
        header = ("series", "n", "min", "median", "max")
        lines.extend(_table(header, rows, (False, True, True, True, True), "    "))
        outside = sum(s.outside for s in series)
        if outside:
            lines.append(f"    ({outside} samples outside the window not counted)")
    events = timeline.get("events") or []
    lines.extend(["", "events:" if events else "events: none"])
    for i, ev in enumerate(events, start=1):
        ev = ev if isinstance(ev, Mapping) else {}
        lines.append(f"  {i}. {_seconds(ev.get('t_s'))}: {_str(ev.get('label'), '')}")
    notes = timeline.get("notes") or []
    lines.extend(["", "notes:" if notes else "notes: none"])
    lines.extend(f"  {n}" for n in notes)
    artifacts = timeline.get("artifacts") or {}
    lines.extend(["", "artifacts (paths inside the bundle):" if artifacts else "artifacts: none listed"])
    if artifacts:
        lines.extend(
            _table(("artifact", "path"), [(str(k), str(v)) for k, v in artifacts.items()], (False, False), "  ")[1:]
        )
    return "\n".join(lines) + "\n"


# --- bundle --------------------------------------------------------------------------------------------------


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_report(bundle_dir: Path) -> tuple[Path, Path]:
    """Read BUNDLE_DIR/timeline.json; write timeline.html and summary.txt next to it; return their paths."""
    if not bundle_dir.is_dir():
        raise ReportInputError(f"{bundle_dir}: not a directory")
    timeline = load_timeline(bundle_dir / TIMELINE_FILE)
    html_path, summary_path = bundle_dir / HTML_FILE, bundle_dir / SUMMARY_FILE
    _write(html_path, render_html(timeline))
    _write(summary_path, render_summary(timeline))
    return html_path, summary_path


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line on stderr, exit 2
        print(f"{self.prog}: {message}", file=sys.stderr)
        raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="python -m probes.report", description="write an evidence bundle's timeline.html and summary.txt")
    p.add_argument("bundle_dir", type=Path, help="the bundle directory holding timeline.json")
    a = p.parse_args(argv)
    try:
        paths = write_report(a.bundle_dir)
    except ReportInputError as e:
        print(f"{p.prog}: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"{p.prog}: cannot write the report: {e}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
