"""The evidence bundle's summary.txt: the timeline in plain text, for an incident.

An evidence capture writes `timeline.json` into its bundle: the window it watched, five panels of series
sampled in it (GPU, CPU, I/O, latency, queue; each `successful`, `skipped` or `failed`, with the reason),
events such as py-spy dumps, the window's summary figures, notes, and the bundle's other artifacts.
`write_summary` turns it into `summary.txt`, what an SRE pastes into an incident: the figures with units, each
panel's status and per-series min/median/max, the notes, and where the raw artifacts are. It runs in the probe
image, at the end of the capture, and needs nothing beyond the standard library.

The page, `timeline.html`, is drawn on the controller from the fetched bundle (serving/evidence/capture_report.py), with
matplotlib, which the probe image does not carry. probes/capture/report_input.py reads and checks timeline.json
for both.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# Re-exported (`X as X`): capture.py catches summary.ReportInputError.
from probes.capture.report_input import ReportInputError as ReportInputError
from probes.capture.report_input import as_text, load_timeline, panel_keys, panel_series, read_window, seconds_text

TIMELINE_FILE = "timeline.json"
SUMMARY_FILE = "summary.txt"

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


# --- figures -------------------------------------------------------------------------------------------------


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


def figures(summary: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(what, value, unit) rows of the summary figures, known ones first."""
    rows = [(label, _num(summary.get(key)), unit) for key, (label, unit) in SUMMARY_FIGURES.items()]
    for key, value in summary.items():
        if key not in SUMMARY_FIGURES:
            unit = next((u for suffix, u in _SUFFIX_UNITS if key.endswith(suffix)), "")
            rows.append((key, _num(value), unit))
    return rows


# --- plain text ----------------------------------------------------------------------------------------------


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool], indent: str) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(r: Sequence[str]) -> str:
        cells = [c.rjust(w) if rt else c.ljust(w) for c, w, rt in zip(r, widths, right, strict=True)]
        return (indent + "  ".join(cells)).rstrip()

    return [line(header), *(line(r) for r in rows)]


def render_summary(timeline: Mapping[str, Any]) -> str:
    """Plain text for an incident: host, window, figures with units, each panel's series, notes, artifacts."""
    w = read_window(timeline)
    lines = [
        f"evidence timeline: host {as_text(timeline.get('host'))}, container {as_text(timeline.get('container'))}",
        f"window: {w.start_wall} -> {w.end_wall} ({seconds_text(w.seconds)})",
        "",
        "summary:",
    ]
    summary = timeline.get("summary") or {}
    figure_rows = figures(summary if isinstance(summary, Mapping) else {})
    lines.extend(_table(("figure", "value", "unit"), figure_rows, (False, True, False), "  "))
    lines.extend(["", "panels (min / median / max over the samples in the window):"])
    panels = timeline.get("panels") or {}
    for key in panel_keys(timeline):
        panel = panels.get(key) if isinstance(panels, Mapping) else None
        if not isinstance(panel, Mapping):
            lines.append(f"  {key}: MISSING from timeline.json")
            continue
        unit = as_text(panel.get("unit"), "")
        status = as_text(panel.get("status"), "missing")
        head = f"  {as_text(panel.get('title'), key)}" + (f" ({unit})" if unit else "") + f": {status}"
        if status != "successful":
            head += f": {as_text(panel.get('reason'), 'no reason given')}"
        lines.append(head)
        lines.append(f"    source: {as_text(panel.get('source'), 'not recorded')}")
        if status != "successful":
            continue
        series = panel_series(panel, w.seconds)
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
        lines.append(f"  {i}. {seconds_text(ev.get('t_s'))}: {as_text(ev.get('label'), '')}")
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


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file beside it, so no reader sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_summary(bundle_dir: Path) -> Path:
    """Read BUNDLE_DIR/timeline.json; write summary.txt next to it; return its path."""
    if not bundle_dir.is_dir():
        raise ReportInputError(f"{bundle_dir}: not a directory")
    path = bundle_dir / SUMMARY_FILE
    write_atomic(path, render_summary(load_timeline(bundle_dir / TIMELINE_FILE)))
    return path
