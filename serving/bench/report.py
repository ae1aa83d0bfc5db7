"""A bench's report: summary.json (every figure), report.txt (for an incident) and report.html (plots).

Reads a bench directory as `make bench` leaves it (runs/<host>/<ts>/bench/): manifest.json, the client's
plan.json and client.json, runs/<id>/ (status.json, result.json, the /metrics pair), gauges.log and the sidecar
samplers' window in samplers/. Every figure is computed from those raw artifacts (serving/bench/summary.py, with
serving/bench/runs.py for each run), so each one can be traced back to the file it came from; report.txt is
written by serving/bench/text.py, the knee figure by serving/bench/knee_plot.py, and the Benchmark Report
documents by serving/bench/br_export.py.

The HTML page is one file of inline SVG, no scripts, drawn by serving/evidence/plots.py in the capture timeline's
colours (serving/bench/page.py): latency CDFs per run, chunk (or token) intervals over time, concurrency scaling,
and the samplers' and gauges' series on the bench's timeline with the runs marked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from serving.bench import trace_events as bench_trace
from serving.bench.page import render_html
from serving.bench.summary import INVALID, KNEE_SVG, build_summary, write_cgroup_readings
from serving.bench.summary_schema import BenchSummary
from serving.bench.text import render_text
from serving.record import memory_phases

SUMMARY_JSON = "summary.json"
REPORT_TXT = "report.txt"
REPORT_HTML = "report.html"


def write_report(bench_dir: Path, lead: Callable[[Path], str] | None = None) -> dict[str, Any]:
    """summary.json, report.txt, report.html, trace.json and the field's export of a fetched bench. `lead`, given
    the bench directory once summary.json is written, returns what report.html opens with (the bench's diagnosis:
    serving/diagnose/, which this floor does not import)."""
    # Through the schema: a figure it does not name, or of the wrong type, fails here, not in a reader of the file.
    summary = BenchSummary.model_validate(build_summary(bench_dir))
    (bench_dir / SUMMARY_JSON).write_text(summary.dumps())
    (bench_dir / REPORT_TXT).write_text(render_text(summary))
    if summary.knee and summary.knee["result"]:
        from serving.bench.knee_plot import draw_knee

        draw_knee(summary.knee["result"], summary.knee["runs"], bench_dir / KNEE_SVG)
    (bench_dir / REPORT_HTML).write_text(render_html(summary, bench_dir, lead(bench_dir) if lead else ""))
    s = summary.dump()
    bench_trace.write_trace(bench_dir)
    # The field's format last: its documents reference the files above (serving/bench/br_export.py).
    from serving.bench import br_export

    try:
        written = br_export.export_bench(bench_dir, summary)
        line = (
            f"Benchmark Report v{br_export.BR_VERSION} (llm-d, validated): "
            + (", ".join(f"{br_export.BR_DIR}/{p.name}" for p in written) or "no point had a valid run")
            + f"; {br_export.BR_DIR}/{br_export.INDEX_FILE} says which runs each pools"
        )
    except br_export.ReportInvalid as e:
        line = f"Benchmark Report not written: {e}"
    s["benchmark_report"] = line
    with (bench_dir / REPORT_TXT).open("a") as f:
        f.write(line + "\n")
    return s


# The client's exits (images/vllm/bench_client.py) and timeout(1)'s.
CLIENT_EXITS = {1: "a run failed", 2: "bad plan"}


def report_bench(
    bench_dir: Path, settings: Mapping[str, Any], lead: Callable[[Path], str] | None = None
) -> dict[str, Any]:
    """Write a fetched bench's summary and reports, and say whether the bench completed: {"ok", "lines", "line"}.

    settings: host, client_rc (the client container's exit), timeout_s (its bound), change (the serving
    container's change in the window, serving.evidence.continuity), cgroup (the readings of the server's cgroups before
    and after: rc, stdout, stderr of each), memory_log (the engine log's memory rows, patch 0003). `lines` is what
    the operator is shown: the report, where it is, and the change; `line` the one line a bench that did not
    complete stops on. `lead`: as write_report's."""
    if "cgroup" in settings:
        write_cgroup_readings(bench_dir, settings.get("cgroup"))
    if settings.get("memory_log") is not None:
        memory_phases.write_bench_memory(bench_dir, [str(x) for x in settings["memory_log"]])
    summary = write_report(bench_dir, lead)
    lines = (bench_dir / REPORT_TXT).read_text().splitlines()
    lines += [f"report: {bench_dir / REPORT_TXT}", f"page:   {bench_dir / REPORT_HTML}"]
    change = settings.get("change") or {}
    rc = int(settings.get("client_rc", 0))
    if change.get("changed"):
        lines.append(str(change["line"]))
    ok = rc == 0 and summary["status"] == "ok" and not change.get("changed")
    if ok:
        return {"ok": True, "lines": lines, "line": ""}
    timeout = f"it ran past {settings.get('timeout_s')} s and was stopped"
    why = "" if rc == 0 else CLIENT_EXITS.get(rc, timeout if rc == 124 else f"client exit {rc}")
    reason = summary.get("reason") if summary["status"] != "ok" else None
    line = (
        (f"{change['line']}; " if change.get("changed") else "")
        + f"the bench on {settings['host']} "
        + ("measured NOTHING VALID" if summary["status"] == INVALID else "FAILED")
        + (f" ({why})" if why else "")
        + (f": {reason}" if reason else "")
        + f"; partial data kept in {bench_dir}/"
    )
    return {"ok": False, "lines": lines, "line": line}
