"""The report pages' plots: matplotlib figures written as SVG, each inlined as one <svg> in a self-contained page.

Both pages draw here, on the controller from the fetched raw data: the capture's timeline
(serving/evidence/capture_report.py) and the bench's report (serving/bench/report.py). Each panel is a matplotlib
Figure on the SVG canvas (no pyplot, no GUI), drawn under one fixed style: text stays text (searchable, small),
no metadata or random ids, so the same data gives the same bytes.

Each panel draws its series in colours no other panel uses (`PANEL_COLOURS`) and everything else is grey, so a
screenshot shows which plots were drawn. Elements a test or a reader looks for carry ids (matplotlib's gid):
`<panel>-line-<i>` (a series' line, one subpath per unbroken run), `<panel>-dots-<i>` (its lone samples),
`<panel>-legend-<i>` and `<panel>-swatch-<i>`, `<panel>-event-<n>`, `<panel>-message`.
"""

from __future__ import annotations

import html
import io
import math
import re
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator
from matplotlib.transforms import blended_transform_factory
from matplotlib.typing import RcKeyType

# Each panel's series colours, in the order its series come. No colour is shared between panels and none is a
# grey, so a panel's first colour found in a screenshot proves that panel's lines were drawn.
PANEL_COLOURS: dict[str, tuple[str, ...]] = {
    "gpu": ("#1a9850", "#66bd63", "#006837", "#a6d96a", "#00441b", "#41ab5d"),  # greens
    "cpu": ("#2166ac", "#4393c3", "#08306b", "#92c5de", "#2b8cbe", "#0570b0"),  # blues
    "io": ("#e66101", "#fdae6b", "#a63603", "#fd8d3c", "#d94801", "#7f2704"),  # oranges
    "latency": ("#d7191c", "#fc9272", "#67000d", "#ef3b2c", "#a50f15", "#fcbba1"),  # reds
    "queue": ("#7b3294", "#c2a5cf", "#3f007d", "#9e9ac8", "#6a51a3", "#ae017e"),  # purples
    "cache": ("#01665e", "#5ab4ac", "#003c30", "#80cdc1", "#35978f", "#c7eae5"),  # teals
    # The request lane: a request's bar (sent to last token), its first token, a failed request's bar.
    "requests": ("#bf812d", "#543005", "#c51b7d"),  # browns, and a magenta for failures
}
# Everything that is not a series is grey, black or white.
BACKGROUND = "#ffffff"
TEXT = "#111111"
MUTED = "#555555"
GRID = "#e5e5e5"
AXIS = "#333333"
FRAME = "#999999"
EVENT = "#777777"

# A timeline panel, in px (1 px = 1 pt of the figure: the SVG canvas is 72 dpi). Every panel has the same x
# scale, so the time axes line up down the page: PLOT_LEFT is the window start, PLOT_RIGHT its end. The y scale
# runs from min(0, lowest value) at PLOT_BOTTOM to the highest value at PLOT_TOP.
PANEL_WIDTH = 900
PANEL_HEIGHT = 220
PLOT_LEFT = 96
PLOT_RIGHT = 700
PLOT_TOP = 30
PLOT_BOTTOM = 186
LEGEND_LEFT = 716
LEGEND_ROWS = 10
LEGEND_LABEL_CHARS = 26
LINE_WIDTH = 2  # thinner lines do not survive rasterisation as their own colour
# A panel with more series than colours repeats them, dashed.
_REPEAT_DASH = (0, (3.0, 1.5))  # in line widths: 6 px on, 3 off at LINE_WIDTH
# A bench panel, in px.
XY_WIDTH, XY_HEIGHT = 900, 260
XY_LEFT, XY_RIGHT, XY_TOP, XY_BOTTOM = 80, 690, 34, 214
XY_LEGEND_LEFT = 704

# The one style (svg.hashsalt is set per panel, in _styled: without it the ids of clip paths and markers are
# random per save). text.parse_math off because series names are data, and a '$' in one is not TeX.
_STYLE: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",
    "path.simplify": False,  # every sample is a vertex: the test of a line is its points
    "text.parse_math": False,
    "text.usetex": False,
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "figure.facecolor": BACKGROUND,
    "axes.facecolor": BACKGROUND,
    "axes.edgecolor": FRAME,
    "axes.linewidth": 1.0,
    "axes.axisbelow": True,
    "grid.color": GRID,
    "grid.linewidth": 1.0,
    "xtick.color": AXIS,
    "ytick.color": AXIS,
    "xtick.labelcolor": TEXT,
    "ytick.labelcolor": TEXT,
    "xtick.major.size": 4,
    "ytick.major.size": 4,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.frameon": False,
    "legend.fontsize": 10,
}
# No <metadata> block: its date would change every save, and its creator is a URL in a page that fetches nothing.
_METADATA: dict[str, Any] = {"Date": None, "Creator": None, "Format": None, "Type": None}
_SVG_ROOT = re.compile(r"<svg\b[^>]*>")
_VIEWBOX = re.compile(r'viewBox="([^"]*)"')


def escape(text: object) -> str:
    """Text for HTML and SVG attributes, quotes too: every string drawn comes from a run's files."""
    return html.escape(str(text), quote=True)


@contextmanager
def _styled(salt: str) -> Iterator[None]:
    """The style, with a salt per panel: ids are unique across the page's panels and the same on every render."""
    with matplotlib.rc_context():  # restores the caller's rcParams on the way out
        matplotlib.rcParams.update(_STYLE)
        matplotlib.rcParams["svg.hashsalt"] = f"refdeploy-{salt}"
        yield


def _figure(width: int, height: int, box: tuple[int, int, int, int]) -> tuple[Figure, Axes]:
    """A figure `width` x `height` px with one axes whose plot area is `box` (left, right, top, bottom) in px."""
    left, right, top, bottom = box
    fig = Figure(figsize=(width / 72, height / 72), dpi=72)
    ax = fig.add_axes((left / width, 1 - bottom / height, (right - left) / width, (bottom - top) / height))
    ax.tick_params(which="both", width=1, direction="out", pad=3)
    return fig, ax


def _inline(fig: Figure, attrs: Mapping[str, str], label: str) -> str:
    """The figure as an <svg> for an HTML page: no XML prolog or DOCTYPE, sized in px (matplotlib sizes in pt,
    the same numbers at its 72 dpi), with `attrs` (data-*) on the root, and a title for screen readers."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata=_METADATA)
    text = buf.getvalue()
    root = _SVG_ROOT.search(text)
    viewbox = _VIEWBOX.search(root.group(0)) if root else None
    if root is None or viewbox is None:  # matplotlib is pinned; a change of its output shows here first
        raise RuntimeError("matplotlib's SVG has no <svg viewBox=...> root")
    w, h = (round(float(v)) for v in viewbox.group(1).split()[2:])
    extra = "".join(f' {k}="{escape(v)}"' for k, v in attrs.items())
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"{extra} '
        f'width="{w}" height="{h}" viewBox="{viewbox.group(1)}" role="img" aria-label="{escape(label)}">'
        f"<title>{escape(label)}</title>"
    )
    return head + text[root.end() :].strip()


def _nice_ticks(lo: float, hi: float, bins: int) -> list[float]:
    """matplotlib's 1-2-5 ticks inside [lo, hi], rounded so labels and sums do not show float noise."""
    ticks = MaxNLocator(nbins=bins, steps=[1, 2, 5, 10]).tick_values(lo, hi)
    span = hi - lo
    return [round(float(t), 12) + 0.0 for t in ticks if lo - span * 1e-9 <= t <= hi + span * 1e-9]


def _tick_label(v: float, step: float, unit: str) -> str:
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
    return f"{v:,.{decimals}f} {unit}".strip()


def _set_ticks(ax: Axes, axis: str, ticks: Sequence[float], unit: str) -> None:
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    labels = [_tick_label(t, step, unit) for t in ticks]
    if axis == "x":
        ax.set_xticks(ticks, labels)
    else:
        ax.set_yticks(ticks, labels)


def _centred_message(ax: Axes, gid: str, message: str) -> None:
    lines = textwrap.wrap(message, 80)[:4] or [""]
    ax.text(0.5, 0.5, "\n".join(lines), transform=ax.transAxes, ha="center", va="center", fontsize=12,
            color=MUTED, gid=gid, linespacing=1.35)  # fmt: skip


def _series_style(key: str, i: int) -> tuple[str, Any]:
    """(colour, linestyle) of a panel's i-th series: its palette in order, then again dashed."""
    palette = PANEL_COLOURS[key]
    return palette[i % len(palette)], (_REPEAT_DASH if i >= len(palette) else "solid")


def _draw_series(ax: Axes, key: str, i: int, segments: Sequence[Sequence[tuple[float, float]]]) -> None:
    """One series: its unbroken runs as one line (NaN between runs breaks it), lone samples as dots."""
    colour, style = _series_style(key, i)
    xs: list[float] = []
    ys: list[float] = []
    for seg in (s for s in segments if len(s) > 1):
        if xs:
            xs.append(math.nan)
            ys.append(math.nan)
        xs += [t for t, _ in seg]
        ys += [v for _, v in seg]
    if xs:
        ax.plot(xs, ys, color=colour, linestyle=style, linewidth=LINE_WIDTH, solid_joinstyle="round",
                solid_capstyle="round", zorder=3, clip_on=False, gid=f"{key}-line-{i}")  # fmt: skip
    lone = [seg[0] for seg in segments if len(seg) == 1]  # a one-point line draws nothing
    if lone:
        ax.plot([t for t, _ in lone], [v for _, v in lone], linestyle="none", marker="o", markersize=5,
                markeredgewidth=0, color=colour, zorder=3, clip_on=False, gid=f"{key}-dots-{i}")  # fmt: skip


def _legend(fig: Figure, key: str, entries: Sequence[tuple[str, bool]], anchor: tuple[float, float]) -> Legend:
    """A legend of (name, drawn) entries: a drawn series has its swatch, an empty one its name and no colour."""
    shown = entries if len(entries) <= LEGEND_ROWS else entries[: LEGEND_ROWS - 1]
    handles: list[Line2D] = []
    labels: list[str] = []
    for i, (name, drawn) in enumerate(shown):
        name = name if len(name) <= LEGEND_LABEL_CHARS else name[: LEGEND_LABEL_CHARS - 1] + "\u2026"
        colour, style = _series_style(key, i)
        handles.append(Line2D([], [], color=colour, linestyle=style if drawn else "none", linewidth=LINE_WIDTH))
        labels.append(name if drawn else f"{name} (no samples)")
    if len(shown) < len(entries):
        handles.append(Line2D([], [], linestyle="none"))
        labels.append(f"+{len(entries) - len(shown)} more in summary.txt")
    leg = fig.legend(handles, labels, loc="upper left", bbox_to_anchor=anchor, borderpad=0, borderaxespad=0,
                     handlelength=1.4, handletextpad=0.6, labelspacing=0.4, labelcolor=TEXT)  # fmt: skip
    for i, (text, handle) in enumerate(zip(leg.get_texts(), leg.legend_handles, strict=True)):
        text.set_gid(f"{key}-legend-{i}")
        if handle is not None:
            handle.set_gid(f"{key}-swatch-{i}")
        if i < len(shown) and not shown[i][1]:
            text.set_color(MUTED)
    return leg


def _timeline_frame(heading: str, seconds: float) -> tuple[Figure, Axes]:
    """A capture timeline panel's figure: its heading, and the x axis every panel shares (0..seconds)."""
    fig, ax = _figure(PANEL_WIDTH, PANEL_HEIGHT, (PLOT_LEFT, PLOT_RIGHT, PLOT_TOP, PLOT_BOTTOM))
    fig.text(PLOT_LEFT / PANEL_WIDTH, 1 - 16 / PANEL_HEIGHT, heading, fontsize=13, fontweight="bold",
             color=TEXT, va="baseline")  # fmt: skip
    ax.spines["bottom"].set_color(AXIS)
    ax.set_xlim(0.0, seconds)
    _set_ticks(ax, "x", _nice_ticks(0.0, seconds, 10), "s")
    ax.set_xlabel("seconds since window start", loc="right", fontsize=10, color=MUTED, labelpad=2)
    ax.grid(True, axis="x")
    return fig, ax


def _mark_events(ax: Axes, key: str, seconds: float, events: Sequence[tuple[int, float]], zorder: int) -> None:
    """The numbered events inside the window: a dashed line each (`<key>-event-<n>`), its number above."""
    on_top = blended_transform_factory(ax.transData, ax.transAxes)
    for n, t in events:
        if 0 <= t <= seconds:
            ax.axvline(t, color=EVENT, linewidth=1, linestyle=(0, (4, 3)), zorder=zorder, gid=f"{key}-event-{n}")
            ax.text(t, 1.0, f"{n}", transform=on_top, ha="center", va="bottom", fontsize=9, color=MUTED)


def timeline_panel(
    key: str,
    heading: str,
    status: str,
    seconds: float,
    unit: str,
    series: Sequence[tuple[str, Sequence[Sequence[tuple[float, float]]]]],
    events: Sequence[tuple[int, float]],
    message: str = "",
) -> str:
    """One capture timeline panel's <svg>: series of (name, unbroken runs of (t, value)) over 0..seconds with
    the numbered events marked; `message` instead of lines where the panel has none (its legend still names a
    series that had no samples)."""
    with _styled(key):
        fig, ax = _timeline_frame(heading, seconds)
        values = [v for _, segs in series for seg in segs for _, v in seg]
        if message or not values:
            ax.set_ylim(0.0, 1.0)
            ax.set_yticks([])
            _centred_message(ax, f"{key}-message", message or "no samples in the window")
        else:
            lo, hi = min(0.0, *values), max(values)
            hi = hi if hi > lo else lo + 1.0
            ax.set_ylim(lo, hi)
            _set_ticks(ax, "y", _nice_ticks(lo, hi, 4), unit)
            ax.grid(True, axis="y")
            for i, (_, segs) in enumerate(series):
                _draw_series(ax, key, i, segs)
        if series and not (message and not values):
            drawn = [(name, any(segs) and not message) for name, segs in series]
            _legend(fig, key, drawn, (LEGEND_LEFT / PANEL_WIDTH, 1 - (PLOT_TOP + 2) / PANEL_HEIGHT))
        _mark_events(ax, key, seconds, events, zorder=4)
        label = f"{heading}: {status}"
        return _inline(fig, {"data-panel": key, "data-status": status}, label)


def request_lane_panel(
    heading: str,
    status: str,
    seconds: float,
    spans: Sequence[Mapping[str, Any]],
    events: Sequence[tuple[int, float]],
    message: str = "",
) -> str:
    """The request lane's <svg>: one row per client, each request a bar from sent to its last token (clipped to
    the window), its first token a tick on the bar; a failed request's bar in the failure colour. Ids:
    `requests-bar-<i>` (the i-th span), `requests-first-<i>`."""
    key = "requests"
    bar, first, failed = PANEL_COLOURS[key]
    lanes = sorted({int(s["lane"]) for s in spans}) if not message else []
    with _styled(key):
        fig, ax = _timeline_frame(heading, seconds)
        if not lanes:
            ax.set_ylim(0.0, 1.0)
            ax.set_yticks([])
            _centred_message(ax, f"{key}-message", message or "no request in the window")
        else:
            row = {lane: i for i, lane in enumerate(lanes)}
            ax.set_ylim(len(lanes) - 0.5, -0.5)
            ax.set_yticks(range(len(lanes)), [f"client {lane}" for lane in lanes])
            # A bar as thick as its row allows, at least the line width (so it survives rasterisation).
            height_px = max(LINE_WIDTH * 2, min(14.0, (PLOT_BOTTOM - PLOT_TOP) / len(lanes) * 0.6))
            for i, sp in enumerate(spans):
                start = max(0.0, float(sp["start_s"]))
                end = min(seconds, float(sp["end_s"] if sp.get("end_s") is not None else seconds))
                if end < start:
                    continue
                y = row[int(sp["lane"])]
                ax.plot([start, end], [y, y], color=bar if sp.get("ok") else failed, linewidth=height_px,
                        solid_capstyle="butt", zorder=3, gid=f"{key}-bar-{i}")  # fmt: skip
                ft = sp.get("first_token_s")
                if ft is not None and 0.0 <= float(ft) <= seconds:
                    ax.plot([float(ft)], [y], linestyle="none", marker="|", markersize=height_px + 4,
                            markeredgewidth=LINE_WIDTH, color=first, zorder=4, gid=f"{key}-first-{i}")  # fmt: skip
            handles = [Line2D([], [], color=bar, linewidth=LINE_WIDTH * 3),
                       Line2D([], [], color=first, linestyle="none", marker="|", markersize=10,
                              markeredgewidth=LINE_WIDTH),
                       Line2D([], [], color=failed, linewidth=LINE_WIDTH * 3)]  # fmt: skip
            labels = ["request: sent to last token", "first token", "failed request"]
            fig.legend(handles, labels, loc="upper left",
                       bbox_to_anchor=(LEGEND_LEFT / PANEL_WIDTH, 1 - (PLOT_TOP + 2) / PANEL_HEIGHT), borderpad=0,
                       borderaxespad=0, handlelength=1.4, handletextpad=0.6, labelspacing=0.4,
                       labelcolor=TEXT)  # fmt: skip
        _mark_events(ax, key, seconds, events, zorder=5)
        return _inline(fig, {"data-panel": key, "data-status": status, "data-spans": str(len(spans))},
                       f"{heading}: {status}")  # fmt: skip


def xy_panel(
    title: str,
    series: Sequence[tuple[str, Sequence[tuple[float, float]], str]],
    x_label: str,
    y_label: str,
    mode: str = "line",
    bands: Sequence[tuple[float, float, str]] = (),
    message: str = "",
) -> str:
    """One bench panel's <svg>: series of (label, points, colour) as lines (with dots where there are few) or
    dots alone, grey labelled bands behind; `message` (or 'no data') in the frame where no point is finite."""
    good = [(label, [p for p in ps if all(math.isfinite(v) for v in p)], colour) for label, ps, colour in series]
    pts = [p for _, ps, _ in good for p in ps]
    with _styled(re.sub(r"\W+", "-", title)[:40]):
        fig, ax = _figure(XY_WIDTH, XY_HEIGHT, (XY_LEFT, XY_RIGHT, XY_TOP, XY_BOTTOM))
        fig.text(XY_LEFT / XY_WIDTH, 1 - 20 / XY_HEIGHT, title, fontsize=14, fontweight="bold", color=TEXT,
                 va="baseline")  # fmt: skip
        if not pts:
            ax.set_xticks([])
            ax.set_yticks([])
            ax.text(0.5, 0.5, message or "no data", transform=ax.transAxes, ha="center", va="center", fontsize=13,
                    color=MUTED)  # fmt: skip
            return _inline(fig, {"data-plot": "empty"}, title)
        xs = [p[0] for p in pts] + [b[0] for b in bands] + [b[1] for b in bands]
        ys = [p[1] for p in pts]
        x0, x1 = min(xs), max(xs)
        y0, y1 = min(0.0, min(ys)), max(ys)
        x0, x1 = (x0 - 0.5, x1 + 0.5) if x1 <= x0 else (x0, x1)
        ax.set_xlim(x0, x1)
        ax.set_ylim(y0, y1 if y1 > y0 else y0 + 1.0)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
        ax.yaxis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
        ax.xaxis.set_major_formatter(lambda v, _: f"{v:g}")
        ax.yaxis.set_major_formatter(lambda v, _: f"{v:g}")
        ax.grid(True, axis="y")
        ax.set_xlabel(x_label, fontsize=12, color=AXIS, labelpad=4)
        ax.set_ylabel(y_label, fontsize=12, color=AXIS, labelpad=6)
        on_top = blended_transform_factory(ax.transData, ax.transAxes)
        for a, b, label in bands:
            ax.axvspan(a, b, color=GRID, linewidth=0, zorder=0.5)
            ax.text(a, 0.97, f" {label}", transform=on_top, ha="left", va="top", fontsize=9, color=MUTED, clip_on=True)
        for label, ps, colour in good:
            if mode == "dots":
                style: dict[str, Any] = {"linestyle": "none", "marker": "o", "markersize": 4}
            else:
                style = {"linewidth": 2, "marker": "o" if len(ps) < 12 else "", "markersize": 6}
            ax.plot([x for x, _ in ps], [y for _, y in ps], color=colour, markeredgewidth=0, zorder=3, clip_on=False,
                    label=label[:28], **style)  # fmt: skip
        fig.legend(loc="upper left", bbox_to_anchor=(XY_LEGEND_LEFT / XY_WIDTH, 1 - XY_TOP / XY_HEIGHT),
                   borderpad=0, borderaxespad=0, handlelength=1.2, fontsize=11, labelcolor=TEXT)  # fmt: skip
        return _inline(fig, {"data-plot": "drawn"}, title)
