"""A bench as one trace in the Chrome trace-event JSON format: bench/trace.json, beside the report, in the same
format and on the same clock (CLOCK_MONOTONIC, whole microseconds) as a capture's (serving/evidence/capture_trace.py),
so the two open side by side in the Perfetto UI.

`vllm bench serve` times its requests with time.perf_counter(), which on Linux is CLOCK_MONOTONIC, the clock every
container on the host reads: its `start_times` (result.json, --save-detailed) are on the samplers' clock as they
are (seen here: run c1-m1 ran 15148.56-15151.00 s by its status.json, its first request was sent at 15149.50 s).

What it holds, each from the bench file named:
- "bench client": each run a slice (runs/<id>/status.json), and each request a slice on a lane of its own while
  it is in flight (requests of one run overlap at a concurrency above 1; a lane holds one at a time), split into
  "to first token" and "decode", with the first token and every later streamed chunk marked (result.json's
  ttfts, itls, latencies);
- "host samplers": vmstat's CPU columns (samplers/vmstat.log) and the server's gauges (gauges.log) as counters.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from probes.readers.sampler_logs import parse_vmstat, read_log
from serving.evidence.capture_trace import (
    PID_CLIENT,
    PID_SAMPLERS,
    meta,
    read_json,
    span,
    trace_document,
    us,
    write_document,
)

TRACE_FILE = "trace.json"
RUNS_TID = 1


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _at(result: Mapping[str, Any], key: str, i: int) -> Any:
    v = result.get(key)
    return v[i] if isinstance(v, list) and i < len(v) else None


def run_events(
    run_id: str, status: Mapping[str, Any], result: Mapping[str, Any], lanes: list[float]
) -> list[dict[str, Any]]:
    """One run's slice and its requests' slices; `lanes` holds each lane's last end (monotonic s), shared by the
    runs so their lanes are reused."""
    out: list[dict[str, Any]] = []
    a, b = _num(status.get("started_mono_s")), _num(status.get("ended_mono_s"))
    if a is not None and b is not None:
        out.append({"pid": PID_CLIENT, "tid": RUNS_TID, "ph": "X", "name": f"run {run_id}", "cat": "run",
                    **span(a, b), "args": {"status": status.get("status")}})  # fmt: skip
    raw = result.get("start_times")
    starts: list[Any] = raw if isinstance(raw, list) else []
    order = sorted((float(s), i) for i, s in enumerate(starts) if _num(s) is not None)
    for start, i in order:
        e2el, ttft = _num(_at(result, "latencies", i)), _num(_at(result, "ttfts", i))
        error = _at(result, "errors", i) or ""
        end = start + e2el if e2el is not None else start
        lane = next((k for k, last in enumerate(lanes) if last <= start), len(lanes))
        if lane == len(lanes):
            lanes.append(end)
        lanes[lane] = end
        base = {"pid": PID_CLIENT, "tid": RUNS_TID + 1 + lane, "cat": "request"}
        args = {"run": run_id, "index": i, "ttft_ms": None if ttft is None else round(ttft * 1000, 3),
                "output_tokens": _at(result, "output_lens", i), "error": error or None}  # fmt: skip
        out.append({**base, "ph": "X", "name": f"{run_id} request {i}", **span(start, end), "args": args})
        if ttft is None or e2el is None or error:
            continue
        first = start + ttft
        out.append({**base, "ph": "X", "name": "to first token", **span(start, first)})
        out.append({**base, "ph": "X", "name": "decode", **span(first, end)})
        out.append({**base, "ph": "i", "s": "t", "name": "first token", "ts": us(first)})
        t = first
        itls = _at(result, "itls", i)
        for n, dt in enumerate(itls if isinstance(itls, list) else [], start=2):
            if _num(dt) is None:
                continue
            t += float(dt)
            out.append({**base, "ph": "i", "s": "t", "name": "chunk", "ts": us(min(t, end)), "args": {"n": n}})
    return out


def counter_events(bench_dir: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    vm = parse_vmstat(read_log(bench_dir / "samplers" / "vmstat.log", include_rotated=False))
    for col in ("us", "sy", "wa"):
        for t, v in vm.get(col, []):
            out.append({"ph": "C", "pid": PID_SAMPLERS, "tid": 0, "name": f"vmstat {col} (%)", "ts": us(t),
                        "args": {"value": v}})  # fmt: skip
    for ln in read_log(bench_dir / "gauges.log", include_rotated=False):
        parts = ln.text.split()
        if len(parts) != 2 or ln.text.startswith("#"):
            continue
        try:
            value = float(parts[1])
        except ValueError:
            continue
        name = parts[0].removeprefix("vllm:")  # with its labels: waiting_by_reason has one series per reason
        out.append({"ph": "C", "pid": PID_SAMPLERS, "tid": 0, "name": f"server {name}", "ts": us(ln.mono_s),
                    "args": {"value": value}})  # fmt: skip
    if out:
        out.append(meta(PID_SAMPLERS, "host samplers and server gauges (samplers/, gauges.log)"))
    return out


def build_trace(bench_dir: Path) -> dict[str, Any]:
    manifest = read_json(bench_dir / "manifest.json") or {}
    events: list[dict[str, Any]] = []
    lanes: list[float] = []
    for run in manifest.get("runs") or []:
        d = bench_dir / "runs" / str(run.get("id"))
        status, result = read_json(d / "status.json"), read_json(d / "result.json")
        if isinstance(status, dict) and isinstance(result, dict):
            events += run_events(str(run["id"]), status, result, lanes)
    if events:
        events.append(meta(PID_CLIENT, "bench client (vllm bench serve)"))
        events.append(meta(PID_CLIENT, "runs", RUNS_TID))
        events += [meta(PID_CLIENT, f"in flight {k + 1}", RUNS_TID + 1 + k) for k in range(len(lanes))]
    events += counter_events(bench_dir)
    return trace_document(
        events,
        {
            "host": manifest.get("host"),
            "workload": (manifest.get("workload") or {}).get("name"),
            "profiler": manifest.get("profiler"),
            "built_from": "manifest.json, runs/<id>/status.json and result.json, samplers/vmstat.log, gauges.log",
        },
    )


def write_trace(bench_dir: Path) -> Path:
    return write_document(bench_dir / TRACE_FILE, build_trace(bench_dir))
