"""The knee search's figure: latency and goodput against load, the knee marked, written to an SVG or PNG file.

Drawn on the controller from the search's result (serving/standalone/knee.py `Search.result()`) and a few figures per
measured run that the controller computes from each run's vLLM result (`KneeRun` below). Two panels share the
load axis (requests/s or concurrency, on a log2 scale because the search doubles its loads):

  latency   TTFT p50 and p90 and TPOT p50 (and p90 when given), in ms, on a log scale: past the knee latency
            grows by factors, and a linear axis would flatten everything before it.
  goodput   requests/s that met every SLO (left axis) and the share of requests that met them (right axis, 0-1,
            with the search's min_share dashed).

Each valid run is a point and the median of a load's valid runs a line (the search judges a load by its median
too); an invalid run is a hollow grey point and in no median. The knee is a vertical line (gid
`knee-line-<panel>`, panel latency or goodput) and the bracket [highest holding, lowest failing] a shaded band
(`knee-bracket-<panel>`); where the start load failed, that load is a dashed line (`knee-fails-<panel>`). The
title is the search's summary line (`knee-title`).

The figure is built without pyplot under serving/evidence/plots.py's style, so the same data gives the same bytes.
"""

from __future__ import annotations

import math
import statistics
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NotRequired, TypedDict, TypeGuard

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from serving.evidence.plots import AXIS, GRID, MUTED, PANEL_COLOURS, TEXT, _styled

WIDTH, HEIGHT = 900, 640  # px; 1 px = 1 pt at the figure's 72 dpi
PLOT_LEFT, PLOT_RIGHT = 80, 820  # the panels' plot area, px from the left (the share axis' labels to its right)
TITLE_CHARS = 110  # the summary is wrapped to this many characters a line, at most TITLE_LINES lines
TITLE_LINES = 4
KNEE = "#000000"  # the knee line: black, the only black line on the figure
BRACKET = "#d9d9d9"  # the bracket band: grey, behind everything
INVALID = "#999999"
# The series: (key in KneeRun, label, colour). Reds for latency, a teal for goodput and a purple for share met,
# the capture timeline's latency, cache and queue colours (serving/evidence/plots.py PANEL_COLOURS).
LATENCY = (
    ("ttft_p50_ms", "TTFT p50", PANEL_COLOURS["latency"][0]),
    ("ttft_p90_ms", "TTFT p90", PANEL_COLOURS["latency"][2]),
    ("tpot_p50_ms", "TPOT p50", PANEL_COLOURS["latency"][1]),
    ("tpot_p90_ms", "TPOT p90", PANEL_COLOURS["latency"][4]),
)
GOODPUT = ("goodput_req_s", "goodput", PANEL_COLOURS["cache"][0])
SHARE = ("share_met", "share met", PANEL_COLOURS["queue"][0])
# No <metadata> date or creator: the same data gives the same file.
_SVG_METADATA: dict[str, Any] = {"Date": None, "Creator": None, "Format": None, "Type": None}
_PNG_METADATA: dict[str, Any] = {"Software": None}


class KneeRun(TypedDict):
    """One measured run of the search, as the controller computes it from the run's result. A figure the run
    does not have (no request finished, say) is None and draws nothing."""

    load: float  # req/s for a rate search, concurrent requests for a concurrency search
    share_met: float | None  # fraction of requests that met every SLO, 0..1
    goodput_req_s: float | None  # requests/s that met every SLO
    ttft_p50_ms: float | None
    ttft_p90_ms: float | None
    tpot_p50_ms: float | None
    tpot_p90_ms: NotRequired[float | None]
    valid: bool  # False: the run failed or was flagged untrustworthy (a hollow grey point, in no median)


# What every KneeRun has (tpot_p90_ms is optional).
RUN_KEYS = ("load", "share_met", "goodput_req_s", "ttft_p50_ms", "ttft_p90_ms", "tpot_p50_ms", "valid")


def knee_figure(result: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]) -> Figure:
    """The figure of a search's `result` and its `runs` (KneeRun each), not yet written anywhere."""
    for i, run in enumerate(runs):
        missing = [k for k in RUN_KEYS if k not in run]
        if missing:
            raise ValueError(f"run {i} lacks {sorted(missing)}")
    unit = "requests/s" if result.get("kind") == "rate" else "concurrency (requests in flight)"
    with _styled("knee"):
        fig = Figure(figsize=(WIDTH / 72, HEIGHT / 72), dpi=72)
        title = textwrap.wrap(str(result.get("summary") or "knee search"), TITLE_CHARS)[:TITLE_LINES]
        fig.text(0.5, 1 - 10 / HEIGHT, "\n".join(title), ha="center", va="top", fontsize=11, color=TEXT,
                 linespacing=1.3, gid="knee-title")  # fmt: skip
        # The panels in px from the top: the latency panel under the title (and its own heading), the goodput
        # panel under it, room for the load axis' labels at the bottom.
        top = 44 + 15 * len(title)
        latency = fig.add_axes(_box(top, 330))
        goodput = fig.add_axes(_box(372, HEIGHT - 50), sharex=latency)
        loads = sorted({float(r["load"]) for r in runs if _finite(r["load"]) and float(r["load"]) > 0})
        if not loads:
            for ax in (latency, goodput):
                ax.set_xticks([])
                ax.set_yticks([])
                ax.text(0.5, 0.5, "no measured run", transform=ax.transAxes, ha="center", va="center",
                        fontsize=12, color=MUTED, gid="knee-message")  # fmt: skip
            return fig
        _load_axis(latency, goodput, loads, unit)
        _latency_panel(latency, runs)
        _goodput_panel(goodput, runs, result)
        _mark_knee(latency, "latency", result)
        _mark_knee(goodput, "goodput", result)
        return fig


def draw_knee(result: Mapping[str, Any], runs: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Write the figure of a search's `result` and its `runs` (KneeRun each) to `path`: SVG or PNG by its suffix."""
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in ("svg", "png"):
        raise ValueError(f"{path}: the knee figure is written as .svg or .png")
    fig = knee_figure(result, runs)
    with _styled("knee"):  # the SVG's ids come from the style's salt: the same on every save
        fig.savefig(path, format=fmt, metadata=_SVG_METADATA if fmt == "svg" else _PNG_METADATA)
    return path


def _box(top: float, bottom: float) -> tuple[float, float, float, float]:
    """An axes box spanning PLOT_LEFT..PLOT_RIGHT and top..bottom (px from the figure's top), as matplotlib takes it."""
    return (PLOT_LEFT / WIDTH, 1 - bottom / HEIGHT, (PLOT_RIGHT - PLOT_LEFT) / WIDTH, (bottom - top) / HEIGHT)


def _finite(value: object) -> TypeGuard[float]:
    """A number that can be drawn: int or float (not bool), finite."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _points(runs: Sequence[Mapping[str, Any]], key: str, valid: bool) -> list[tuple[float, float]]:
    """(load, figure) of the runs that are valid (or not) and have the figure."""
    return [(float(r["load"]), float(r[key])) for r in runs if bool(r["valid"]) == valid and _finite(r.get(key))]


def _medians(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """(load, median of the load's figures), by load."""
    by_load: dict[float, list[float]] = {}
    for load, value in points:
        by_load.setdefault(load, []).append(value)
    return [(load, statistics.median(vs)) for load, vs in sorted(by_load.items())]


def _series(
    ax: Axes, runs: Sequence[Mapping[str, Any]], key: str, label: str, colour: str, keep: Callable[[float], bool]
) -> bool:
    """One figure of the runs: valid runs as points, their median per load as a line, invalid runs hollow grey.
    Only values `keep` accepts are drawn (a log axis takes no 0). Whether anything was drawn."""
    good = [p for p in _points(runs, key, valid=True) if keep(p[1])]
    bad = [p for p in _points(runs, key, valid=False) if keep(p[1])]
    if good:
        ax.plot(*zip(*good, strict=True), linestyle="none", marker="o", markersize=5, markeredgewidth=0,
                color=colour, alpha=0.7, zorder=3, gid=f"knee-{key}-runs")  # fmt: skip
        ax.plot(*zip(*_medians(good), strict=True), color=colour, linewidth=2, marker="o", markersize=3,
                zorder=4, label=label, gid=f"knee-{key}-median")  # fmt: skip
    if bad:
        ax.plot(*zip(*bad, strict=True), linestyle="none", marker="o", markersize=5, markerfacecolor="none",
                markeredgecolor=INVALID, markeredgewidth=1, zorder=3, gid=f"knee-{key}-invalid")  # fmt: skip
    return bool(good or bad)


def _load_axis(latency: Axes, goodput: Axes, loads: Sequence[float], unit: str) -> None:
    """The shared load axis: log2 (the search doubles its loads), ticks at the loads the search measured when
    they fit, labelled plainly (6.73, not 2^2.75)."""
    lo, hi = loads[0], loads[-1]
    pad = 2**0.25  # a quarter of a doubling either side
    goodput.set_xscale("log", base=2)
    goodput.set_xlim(lo / pad, hi * pad)
    ticks = loads if len(loads) <= 12 else [x for x in loads if math.log2(x).is_integer()] or [lo, hi]
    goodput.set_xticks(ticks, [f"{x:g}" for x in ticks])
    goodput.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    goodput.set_xlabel(unit, fontsize=11, color=AXIS)
    latency.tick_params(axis="x", labelbottom=False)
    for ax in (latency, goodput):
        ax.grid(True, axis="y", color=GRID)


def _latency_panel(ax: Axes, runs: Sequence[Mapping[str, Any]]) -> None:
    values = [float(r[k]) for r in runs for k, _, _ in LATENCY if _finite(r.get(k))]
    log = bool(values) and min(values) > 0
    if log:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    drawn = [_series(ax, runs, key, label, colour, lambda v: v > 0 or not log) for key, label, colour in LATENCY]
    ax.set_ylabel("latency (ms)" + (", log scale" if log else ""), fontsize=11, color=AXIS)
    ax.set_title("latency per run, and the median per load", fontsize=11, color=TEXT, loc="left")
    if any(drawn):
        ax.legend(loc="upper left", fontsize=9, labelcolor=TEXT)
    else:
        ax.text(0.5, 0.5, "no latency figures", transform=ax.transAxes, ha="center", va="center", color=MUTED)


def _goodput_panel(ax: Axes, runs: Sequence[Mapping[str, Any]], result: Mapping[str, Any]) -> None:
    key, label, colour = GOODPUT
    _series(ax, runs, key, f"{label} (req/s meeting all SLOs)", colour, lambda v: True)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("goodput (req/s)", fontsize=11, color=AXIS)
    ax.set_title("goodput and share of requests meeting the SLOs", fontsize=11, color=TEXT, loc="left")
    share = ax.twinx()
    key, label, colour = SHARE
    _series(share, runs, key, label, colour, lambda v: True)
    share.set_ylim(0, 1.02)
    share.set_ylabel("share met", fontsize=11, color=AXIS)
    min_share = (result.get("criteria") or {}).get("min_share")
    handles, labels = ax.get_legend_handles_labels()
    more_h, more_l = share.get_legend_handles_labels()
    if _finite(min_share):
        share.axhline(float(min_share), color=colour, linestyle=(0, (4, 3)), linewidth=1, zorder=2,
                      gid="knee-min-share")  # fmt: skip
        more_h.append(Line2D([], [], color=colour, linestyle=(0, (4, 3)), linewidth=1))
        more_l.append(f"needed share ({float(min_share):g})")
    if handles or more_h:
        ax.legend(handles + more_h, labels + more_l, loc="lower left", fontsize=9, labelcolor=TEXT)


def _mark_knee(ax: Axes, panel: str, result: Mapping[str, Any]) -> None:
    """The bracket shaded, the knee a vertical line; where nothing held, the failing start load dashed. Ids:
    knee-bracket-<panel>, knee-line-<panel>, knee-fails-<panel>."""
    bracket = result.get("bracket") or [None, None]
    lo, hi = bracket[0], bracket[1]
    if _finite(lo) and _finite(hi):
        ax.axvspan(float(lo), float(hi), color=BRACKET, linewidth=0, zorder=0.5, gid=f"knee-bracket-{panel}")
    knee = result.get("knee")
    if _finite(knee):
        ax.axvline(float(knee), color=KNEE, linewidth=1.5, zorder=5, gid=f"knee-line-{panel}")
    elif lo is None and _finite(hi):
        ax.axvline(float(hi), color=KNEE, linewidth=1.5, linestyle=(0, (4, 3)), zorder=5, gid=f"knee-fails-{panel}")
