"""A bench's report.html: one file of inline SVG, no scripts, drawn by serving/evidence/plots.py in the capture
timeline's colours: latency CDFs per run, chunk (or token) intervals over time, concurrency scaling, and the samplers'
and gauges' series on the bench's timeline with the runs marked; the knee figure inline, and report.txt below the title.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from probes.samplers import parse_vmstat, read_log
from serving.bench import protocol as bench
from serving.bench import runs as bench_runs
from serving.bench.summary import KNEE_SVG, load_json
from serving.bench.text import point_label, render_text
from serving.evidence.plots import BACKGROUND, PANEL_COLOURS, TEXT, escape, xy_panel


def _cdf(values: Sequence[float]) -> list[tuple[float, float]]:
    xs = sorted(values)
    n = len(xs)
    out: list[tuple[float, float]] = []
    for i, x in enumerate(xs):
        out += [(x, i / n), (x, (i + 1) / n)]
    return out


def _colour(panel: str, i: int) -> str:
    cols = PANEL_COLOURS[panel]
    return cols[i % len(cols)]


def render_html(s: Mapping[str, Any], bench_dir: Path) -> str:
    manifest = s["manifest"]
    panels: list[str] = []
    for p in s["points"]:
        measured = [r for r in s["runs"] if r["point"] == p["point"] and r["phase"] == "measured"]
        results = {r["id"]: load_json(bench_dir / "runs" / r["id"] / bench.RESULT_FILE) or {} for r in measured}
        obs = {rid: [o for o in bench_runs.parse_requests(res) if o.success] for rid, res in results.items()}
        label = point_label(p)
        for title, axis, field, colours in (
            ("end-to-end latency", "e2e latency (ms)", "e2el_s", "latency"),
            ("TTFT", "TTFT (ms)", "ttft_s", "io"),
        ):
            series = []
            for i, (r, os) in enumerate(obs.items()):
                values = [v * 1000 for v in (getattr(o, field) for o in os) if v is not None]
                series.append((r, _cdf(values), _colour(colours, i)))
            panels.append(xy_panel(f"{label}: {title} CDF per run", series, axis, "fraction of requests"))
        itl_title = (
            f"{label}: chunk intervals over time (chunks carried several tokens: NOT inter-token latency)"
            if p["grouped_streaming"]
            else f"{label}: inter-token latency over time (one token per chunk)"
        )
        series = []
        for i, (r, os) in enumerate(obs.items()):
            pts: list[tuple[float, float]] = []
            for o in os:
                t = (o.start_s or 0.0) + (o.ttft_s or 0.0)
                for dt in o.chunk_intervals_s:
                    t += dt
                    pts.append((t, dt * 1000))
            series.append((r, pts, _colour("queue", i)))
        panels.append(
            xy_panel(itl_title, series, "seconds since the run's first request", "interval (ms)", mode="dots")
        )
    conc = [p for p in s["points"] if p.get("max_concurrency") is not None and p["output_tok_s"]["n"]]
    if conc:
        agg = [(float(p["max_concurrency"]), p["output_tok_s"]["median"]) for p in conc]
        lo = [(float(p["max_concurrency"]), p["output_tok_s"]["min"]) for p in conc]
        hi = [(float(p["max_concurrency"]), p["output_tok_s"]["max"]) for p in conc]
        per = [(float(p["max_concurrency"]), p["decode_tok_s"]["median"]) for p in conc if p["decode_tok_s"]["n"]]
        panels.append(
            xy_panel(
                "concurrency scaling: aggregate output tok/s (median, min, max over runs) and per-request decode rate",
                [("aggregate median", agg, _colour("gpu", 0)), ("aggregate min", lo, _colour("gpu", 3)),
                 ("aggregate max", hi, _colour("gpu", 2)), ("per request (median)", per, _colour("cpu", 0))],
                "max concurrency", "tokens/s",
            )
        )  # fmt: skip
    panels.append(_timeline(s, bench_dir))
    knee_svg = bench_dir / KNEE_SVG
    if s.get("knee") and knee_svg.is_file():
        # Inline, as every panel here: the page is one file to attach to an incident.
        svg = knee_svg.read_text()
        panels.insert(0, '<div id="knee">' + svg[svg.find("<svg") :] + "</div>")
    m = manifest
    head = (
        f"<h1>bench {escape(m['workload']['name'])} on {escape(m['host'])}</h1>"
        f"<p>status <b>{escape(s['status'])}</b> {escape(s['reason'])}</p>"
        f'<pre style="overflow-x:auto">{escape(render_text(s))}</pre>'
    )
    body = "".join(f"<div>{p}</div>" for p in panels)
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>bench report</title></head>'
        f'<body style="background:{BACKGROUND};color:{TEXT};font-family:sans-serif">{head}{body}</body></html>\n'
    )


def _timeline(s: Mapping[str, Any], bench_dir: Path) -> str:
    """vmstat CPU and the load gauges on the bench's clock (seconds since the client started), runs as bands."""
    client = s.get("client") or {}
    t0 = client.get("started_mono_s")
    if not isinstance(t0, int | float):
        return xy_panel("samplers and gauges over the bench", [], "s", "", message="no client.json: no timeline")
    bands = []
    for r in s["runs"]:
        st = load_json(bench_dir / "runs" / r["id"] / "status.json") or {}
        a, b = st.get("started_mono_s"), st.get("ended_mono_s")
        if isinstance(a, int | float) and isinstance(b, int | float):
            bands.append((a - t0, b - t0, r["id"]))
    series: list[tuple[str, Sequence[tuple[float, float]], str]] = []
    vm = parse_vmstat(read_log(bench_dir / "samplers" / "vmstat.log", include_rotated=False))
    for i, col in enumerate(("us", "sy", "wa")):
        if col in vm:
            series.append((f"vmstat {col} %", [(t - t0, v) for t, v in vm[col]], _colour("cpu", i)))
    gauges: dict[str, list[tuple[float, float]]] = {}
    for ln in read_log(bench_dir / "gauges.log", include_rotated=False):
        parts = ln.text.split()
        if len(parts) == 2 and not ln.text.startswith("#"):
            name = parts[0].split("{")[0].removeprefix("vllm:")
            try:
                gauges.setdefault(name, []).append((ln.mono_s - t0, float(parts[1])))
            except ValueError:
                continue
    for i, name in enumerate(("num_requests_running", "num_requests_waiting")):
        if name in gauges:
            series.append((f"{name} (x10)", [(t, v * 10) for t, v in gauges[name]], _colour("queue", i)))
    return xy_panel(
        "samplers and server gauges on the bench's timeline (grey: runs)",
        series,
        "seconds since the client started",
        "% CPU / requests x10",
        bands=bands,
        message="no sampler or gauge lines in the window",
    )
