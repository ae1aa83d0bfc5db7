"""A bench's report.html: one file of inline SVG, no scripts, drawn by serving/evidence/plots.py in the capture
timeline's colours. It opens with the answer: the verdict, each point's figures pooled over its valid runs, and the
flags (runs left out, a profiled or stand-in engine, buffered streams). Then the plots in a grid (the knee figure,
latency CDFs per run, chunk (or token) intervals over time, concurrency scaling, the samplers' and gauges' series on
the bench's timeline with the runs marked), and report.txt last, folded. Nothing is wider than the window: the plots
scale down to their grid cell and the text wraps (tests/integration/test_report_screenshot.py holds both).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from probes.readers.sampler_logs import parse_vmstat, read_log
from serving.bench import protocol as bench
from serving.bench import runs as bench_runs
from serving.bench.summary import KNEE_SVG, load_json
from serving.bench.summary_schema import BenchSummary, PointSummary, Stat
from serving.bench.text import point_label, render_text, stat
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


def render_html(s: BenchSummary, bench_dir: Path, lead: str = "") -> str:
    manifest = s.manifest
    panels: list[str] = []
    for p in s.points:
        measured = [r for r in s.runs if r.point == p.point and r.phase == "measured"]
        results = {r.id: load_json(bench_dir / "runs" / r.id / bench.RESULT_FILE) or {} for r in measured}
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
            if p.grouped_streaming
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
    # A described figure with n > 0 has its median, min and max (serving/bench/stats.py describe).
    conc = [(float(c), p) for p in s.points if (c := p.max_concurrency) is not None and p.output_tok_s.n]
    if conc:
        agg = [(c, v) for c, p in conc if (v := p.output_tok_s.median) is not None]
        lo = [(c, v) for c, p in conc if (v := p.output_tok_s.min) is not None]
        hi = [(c, v) for c, p in conc if (v := p.output_tok_s.max) is not None]
        per = [(c, v) for c, p in conc if p.decode_tok_s.n and (v := p.decode_tok_s.median) is not None]
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
    if s.knee and knee_svg.is_file():
        # Inline, as every panel here: the page is one file to attach to an incident.
        svg = knee_svg.read_text()
        panels.insert(0, '<div id="knee">' + svg[svg.find("<svg") :] + "</div>")
    m = manifest
    # `lead`: the bench's diagnosis, where it has one (serving/diagnose/engine.py findings_html), before the answer.
    head = f"<h1>bench {escape(m['workload']['name'])} on {escape(m['host'])}</h1>" + lead + _answer(s)
    body = '<div id="plots">' + "".join(f"<figure>{p}</figure>" for p in panels) + "</div>"
    text = f'<details id="report-text"><summary>report.txt</summary><pre>{escape(render_text(s))}</pre></details>'
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>bench report</title>'
        f"<style>{_CSS}</style></head>"
        f'<body style="background:{BACKGROUND};color:{TEXT}">{head}{body}{text}</body></html>\n'
    )


# The plots' SVGs are 900 px wide (serving/evidence/plots.py XY_WIDTH): a grid cell of at least 560 px holds one at
# 62% or more, where its 10 px tick labels stay readable; two columns from a 1,140 px window. Wrapped text, so no
# line of a run's flags can widen the page.
_CSS = (
    "body{font-family:sans-serif;margin:16px;max-width:100%}"
    "#answer table{border-collapse:collapse;margin:8px 0}"
    "#answer td,#answer th{padding:2px 10px;text-align:right;border-bottom:1px solid #ddd}"
    "#answer td:first-child,#answer th:first-child{text-align:left}"
    "#answer .table{overflow-x:auto;max-width:100%}"
    ".verdict{display:inline-block;padding:2px 10px;color:#fff;font-weight:bold}"
    ".verdict.ok{background:#1a7f37}.verdict.bad{background:#c62828}"
    "#flags li{overflow-wrap:anywhere}"
    "#plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:8px 16px}"
    "#plots figure{margin:0;min-width:0}#plots svg{width:100%;height:auto}"
    "pre{white-space:pre-wrap;overflow-wrap:anywhere}"
)
_ANSWER_FIGURES: tuple[tuple[str, Callable[[PointSummary], Stat]], ...] = (
    ("TTFT ms", lambda p: p.ttft_ms), ("TPOT ms", lambda p: p.tpot_ms), ("decode tok/s/req", lambda p: p.decode_tok_s),
    ("e2e ms", lambda p: p.e2el_ms), ("aggregate tok/s", lambda p: p.output_tok_s),
)  # fmt: skip


def _answer(s: BenchSummary) -> str:
    """The first screen: the verdict, each point's figures over its valid runs (median [min-max] n), the flags."""
    ok = s.status == "ok"
    verdict = (
        f'<p><span class="verdict {"ok" if ok else "bad"}">{escape(s.status.upper())}</span> {escape(s.reason)}</p>'
    )
    head = "".join(f"<th>{escape(h)}</th>" for h in ("point", "valid runs", *(h for h, _ in _ANSWER_FIGURES)))
    rows = "".join(
        f"<tr><td>{escape(point_label(p))}</td><td>{p.runs_valid} of {p.runs}</td>"
        + "".join(f"<td>{escape(stat(figure(p)))}</td>" for _, figure in _ANSWER_FIGURES)
        + "</tr>"
        for p in s.points
    )
    table = f'<div class="table"><table><tr>{head}</tr>{rows}</table></div>'
    flags = [escape(f) for f in _flags(s)]
    listed = "".join(f"<li>{f}</li>" for f in flags) if flags else "<li>none</li>"
    return (
        f'<section id="answer">{verdict}<p>pooled over the valid measured runs (median [min-max] n)</p>{table}'
        f'<ul id="flags">{listed}</ul></section>'
    )


def _flags(s: BenchSummary) -> list[str]:
    """What qualifies the figures, in the words report.txt uses."""
    m = s.manifest
    out = []
    if m.get("profiler"):
        out.append(f"PROFILED: the engine ran with the {m['profiler']} profiler configured: not results")
    if (m.get("stand_in") or {}).get("what"):
        out.append(f"a STAND-IN engine ran, not the profile's: {m['stand_in']['what']}")
    if s.grouped_streaming:
        out.append("chunks carried several tokens in some runs: chunk intervals are not inter-token latency")
    out += [f"left out of the pool: {x}" for p in s.points for x in p.left_out]
    return out


def _timeline(s: BenchSummary, bench_dir: Path) -> str:
    """vmstat CPU and the load gauges on the bench's clock (seconds since the client started), runs as bands."""
    client = s.client or {}
    t0 = client.get("started_mono_s")
    if not isinstance(t0, int | float):
        return xy_panel("samplers and gauges over the bench", [], "s", "", message="no client.json: no timeline")
    bands = []
    for r in s.runs:
        st = load_json(bench_dir / "runs" / r.id / "status.json") or {}
        a, b = st.get("started_mono_s"), st.get("ended_mono_s")
        if isinstance(a, int | float) and isinstance(b, int | float):
            bands.append((a - t0, b - t0, r.id))
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
