"""The evidence bundle's timeline, for people: a self-contained HTML page and a plain-text summary.

An evidence capture writes `timeline.json` into its bundle: the window it watched, five panels of series
sampled in it (GPU, CPU, I/O, latency, queue; each `successful`, `skipped` or `failed`, with the reason),
events such as py-spy dumps, the window's summary figures, notes, and the bundle's other artifacts.
`write_report` turns it into `timeline.html` and `summary.txt`. The page is one file: inline SVG, no scripts,
fonts, stylesheets or anything else fetched, so it opens offline from a copied bundle. The panels share one
time axis, seconds since the window start, so a GPU stall lines up with the queue it built. Each panel draws
in colours no other panel uses (`PANEL_COLOURS`) and everything else is grey, so a screenshot shows which plots
were drawn. A skipped or failed panel keeps its frame and says why. `summary.txt` is what an SRE pastes into an
incident: the figures with units, each panel's status and per-series min/median/max, the notes, and where the
raw artifacts are.

This module lays out the page and writes the text; probes/report_svg.py draws each panel, and
probes/report_input.py reads and checks timeline.json for both.

  python -m probes.report BUNDLE_DIR

Exit status: 0 written (the two paths on stdout), 1 could not write them, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# Re-exported (`X as X`) as the report's own names: capture.py catches report.ReportInputError, and
# serving/bench_report.py and the screenshot tests take the palette and the panel keys from here.
from probes.report_input import PANEL_KEYS as PANEL_KEYS
from probes.report_input import ReportInputError as ReportInputError
from probes.report_input import as_text, load_timeline, panel_series, read_window, seconds_text
from probes.report_svg import AXIS as AXIS
from probes.report_svg import BACKGROUND as BACKGROUND
from probes.report_svg import FRAME as FRAME
from probes.report_svg import GRID as GRID
from probes.report_svg import MUTED as MUTED
from probes.report_svg import PANEL_COLOURS as PANEL_COLOURS
from probes.report_svg import TEXT as TEXT
from probes.report_svg import escape, panel_caption, panel_svg

TIMELINE_FILE = "timeline.json"
HTML_FILE = "timeline.html"
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
    w = read_window(timeline)
    host = as_text(timeline.get("host"))
    container = as_text(timeline.get("container"))
    panels = timeline.get("panels") or {}
    events = timeline.get("events") or []
    summary = timeline.get("summary") or {}
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>timeline {escape(host)} {escape(w.start_wall)}</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        "<body>",
        "<header>",
        f"<h1>Evidence timeline: {escape(host)}, container {escape(container)}</h1>",
        f"<p>window: {escape(w.start_wall)} &rarr; {escape(w.end_wall)} ({escape(seconds_text(w.seconds))})</p>",
        "</header>",
        "<h2>Summary</h2>",
        '<table class="summary">',
        "<tr><th>figure</th><th>value</th><th>unit</th></tr>",
    ]
    for label, value, unit in _figures(summary if isinstance(summary, Mapping) else {}):
        out.append(f'<tr><td>{escape(label)}</td><td class="num">{escape(value)}</td><td>{escape(unit)}</td></tr>')
    out.append("</table>")
    out.append("<h2>Panels</h2>")
    out.append(
        f'<p class="muted">x axis, shared by every panel: seconds since the window start, {escape(w.start_wall)}. '
        "Dashed lines are events, numbered as in the list below.</p>"
    )
    for key in PANEL_KEYS:
        panel = panels.get(key) if isinstance(panels, Mapping) else None
        out.append(f'<figure id="panel-{key}">')
        out.append(panel_svg(key, panel, w, events))
        out.append(f"<figcaption>{escape(panel_caption(panel, w))}</figcaption>")
        out.append("</figure>")
    out.append("<h2>Events</h2>")
    if events:
        out.append("<ol>")
        for ev in events:
            ev = ev if isinstance(ev, Mapping) else {}
            out.append(f"<li>{escape(seconds_text(ev.get('t_s')))}: {escape(as_text(ev.get('label'), ''))}</li>")
        out.append("</ol>")
    else:
        out.append('<p class="muted">none</p>')
    out.append("<h2>Notes</h2>")
    notes = timeline.get("notes") or []
    out.extend(["<ul>", *(f"<li>{escape(n)}</li>" for n in notes), "</ul>"] if notes else ['<p class="muted">none</p>'])
    out.append("<h2>Artifacts</h2>")
    artifacts = timeline.get("artifacts") or {}
    if artifacts:
        out.append('<table class="artifacts">')
        for name, path in artifacts.items():
            href = _artifact_href(str(path))
            cell = f'<a href="{escape(href)}">{escape(path)}</a>' if href else escape(path)
            out.append(f"<tr><td>{escape(name)}</td><td>{cell}</td></tr>")
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
    w = read_window(timeline)
    lines = [
        f"evidence timeline: host {as_text(timeline.get('host'))}, container {as_text(timeline.get('container'))}",
        f"window: {w.start_wall} -> {w.end_wall} ({seconds_text(w.seconds)})",
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
