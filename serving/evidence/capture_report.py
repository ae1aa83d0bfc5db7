"""The evidence capture's timeline page, drawn on the controller from a fetched bundle's timeline.json.

A capture (probes/capture/bundle.py, in the probe image) writes `timeline.json` and `summary.txt`; once the bundle is
fetched, the capture role has `timeline.html` drawn here (ansible/action_plugins/refdeploy_capture_report.py).
The page is one file: inline SVG, no scripts, fonts, stylesheets or anything else fetched, so it opens offline
from a copied bundle. The panels (serving/evidence/plots.py draws them: GPU, CPU, I/O, latency, queue and, in captures
since it was added, the KV cache with the preemptions marked) share one time axis, seconds since the window
start, so a GPU stall lines up with the queue it built. A skipped or failed panel keeps its frame and says why.

  python -m serving.evidence.capture_report BUNDLE_DIR    # timeline.html and summary.txt again, from timeline.json

Exit status: 0 written (the two paths on stdout), 1 could not write them, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from probes.capture.report_input import (
    ReportInputError,
    Window,
    as_text,
    finite,
    load_timeline,
    panel_keys,
    panel_series,
    read_window,
    seconds_text,
)
from probes.capture.summary import TIMELINE_FILE, figures, write_atomic, write_summary
from serving.evidence.plots import BACKGROUND, MUTED, TEXT, escape, request_lane_panel, timeline_panel

HTML_FILE = "timeline.html"


def _artifact_href(path: str) -> str | None:
    """A link for a relative path inside the bundle; None for anything that could leave it."""
    if not path or path.startswith(("/", "\\")) or ":" in path.split("/", 1)[0] or ".." in path.split("/"):
        return None
    return path


def panel_svg(key: str, panel: Mapping[str, Any] | None, window: Window, events: Sequence[Any]) -> str:
    """One panel's <svg>: its lines over the window with the events marked, or the frame and why it has none."""
    panel = panel if isinstance(panel, Mapping) else {}
    unit = as_text(panel.get("unit"), "")
    status = as_text(panel.get("status"), "missing")
    title = as_text(panel.get("title"), key)
    heading = f"{title} ({unit})" if unit else title
    marks = [
        (i, t)
        for i, ev in enumerate(events, start=1)
        if isinstance(ev, Mapping) and (t := finite(ev.get("t_s"))) is not None
    ]
    if key == "requests":
        spans = panel.get("spans")
        spans = [s for s in spans if isinstance(s, Mapping)] if isinstance(spans, list) else []
        lane_heading = as_text(panel.get("title"), key)
        if status == "successful":
            return request_lane_panel(lane_heading, status, window.seconds, spans, marks)
    if status == "successful":
        series = [(s.name, s.segments) for s in panel_series(panel, window.seconds)]
        return timeline_panel(key, heading, status, window.seconds, unit, series, marks)
    reason = panel.get("reason")
    if not panel:
        message = "MISSING: this panel is not in timeline.json"
    else:
        message = f"{status.upper()}: {reason}" if reason else f"{status.upper()} (no reason given)"
    if key == "requests":
        return request_lane_panel(as_text(panel.get("title"), key), status, window.seconds, [], marks, message)
    return timeline_panel(key, heading, status, window.seconds, unit, [], marks, message)


def panel_caption(panel: Mapping[str, Any] | None, window: Window) -> str:
    """The line under a panel: where its data came from, and how many samples fell outside the window."""
    panel = panel if isinstance(panel, Mapping) else {}
    parts = [f"source: {as_text(panel.get('source'), 'not recorded')}"]
    if panel.get("status") == "successful":
        outside = sum(s.outside for s in panel_series(panel, window.seconds))
        if outside:
            parts.append(f"{outside} samples outside the window not drawn")
    return "; ".join(parts)


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


def render_html(timeline: Mapping[str, Any], lead: str = "") -> str:
    """The timeline as one self-contained HTML page: header, `lead` (the capture's diagnosis, where it has one:
    serving/diagnose/engine.py findings_html), summary table, the panels, events, notes."""
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
        lead,
        "<h2>Summary</h2>",
        '<table class="summary">',
        "<tr><th>figure</th><th>value</th><th>unit</th></tr>",
    ]
    for label, value, unit in figures(summary if isinstance(summary, Mapping) else {}):
        out.append(f'<tr><td>{escape(label)}</td><td class="num">{escape(value)}</td><td>{escape(unit)}</td></tr>')
    out.append("</table>")
    out.append("<h2>Panels</h2>")
    out.append(
        f'<p class="muted">x axis, shared by every panel: seconds since the window start, {escape(w.start_wall)}. '
        "Dashed lines are events, numbered as in the list below.</p>"
    )
    for key in panel_keys(timeline):
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


def write_page(bundle_dir: Path, lead: str = "") -> Path:
    """Read BUNDLE_DIR/timeline.json; write timeline.html next to it, `lead` first; return its path."""
    if not bundle_dir.is_dir():
        raise ReportInputError(f"{bundle_dir}: not a directory")
    path = bundle_dir / HTML_FILE
    write_atomic(path, render_html(load_timeline(bundle_dir / TIMELINE_FILE), lead))
    return path


def write_report(bundle_dir: Path) -> tuple[Path, Path, Path]:
    """timeline.html and summary.txt, both from BUNDLE_DIR/timeline.json, and trace.json; their paths."""
    from serving.evidence.capture_trace import write_trace

    return write_page(bundle_dir), write_summary(bundle_dir), write_trace(bundle_dir)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line on stderr, exit 2
        print(f"{self.prog}: {message}", file=sys.stderr)
        raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    p = _Parser(
        prog="python -m serving.evidence.capture_report",
        description="write an evidence bundle's timeline.html, summary.txt and trace.json",
    )
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
