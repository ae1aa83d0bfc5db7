"""A capture bundle as one trace in the Chrome trace-event JSON format: trace.json, which the Perfetto UI
(https://ui.perfetto.dev, "Open trace file"; it runs in the browser, the file is not uploaded) and chrome://tracing
open. Everything in it is on CLOCK_MONOTONIC, which every container on the host shares, in microseconds: the
timestamps are the bundle's own readings, so a slow request lines up with what the host's threads were doing.

What it holds (each from the bundle file named, which stays the record):
- "capture client (requests)": each request the capture sent (requests/requests.jsonl) a slice on its client's
  track, split into "to first token" and "decode", with a "first token" mark and every streamed token's arrival;
- "host samplers": every series of the timeline's panels (timeline.json: GPU, CPU, I/O, latency, queue, KV cache)
  a counter track;
- the vLLM processes under their own pids: each thread's kernel wait (kernel/wchan.json's transitions) as slices
  on that thread, and each py-spy dump (stacks/result.json, stacks/dump-*.json) an instant on the thread it caught,
  with its stack;
- each worker rank's engine steps (ranks/, the patched runtime's rank trace where the profile turns it on), a track
  inside that worker's process: a "step N" slice with its receive, preparation, forward, sampling and send nested
  (serving/evidence/rank_trace.py);
- "capture": the window, every perf recording's span (kernel/perf-*.result.json, a track each) and the timeline's
  events.

Format facts (the Trace Event Format document): `ts`/`dur` in microseconds; `ph` X (complete slice), i (instant;
`s` t = thread, p = process, g = global), C (counter: one track per name and arg), M (process_name and
thread_name metadata).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from probes.capture.report_input import ReportInputError, finite, load_timeline
from probes.capture.summary import write_atomic
from probes.readers.rank_steps import RANKS_DIR
from serving.evidence import rank_trace

TRACE_FILE = "trace.json"
TIMELINE_FILE = "timeline.json"
# Tracks that are not a process of the host get pids no Linux PID namespace hands out (pid_max <= 2^22).
PID_CLIENT = 1 << 23
PID_SAMPLERS = PID_CLIENT + 1
PID_CAPTURE = PID_CLIENT + 2
STACK_FRAMES = 16


def us(mono_s: float) -> int:
    """Whole microseconds: a slice's end is its start plus its duration exactly, so back-to-back slices (a request's
    phases, a thread's waits) never overlap by a rounding (Perfetto drops a slice that overlaps its sibling)."""
    return round(mono_s * 1e6)


def span(start: float, end: float) -> dict[str, int]:
    a = us(start)
    return {"ts": a, "dur": max(0, us(end) - a)}


def meta(pid: int, name: str, tid: int | None = None) -> dict[str, Any]:
    if tid is None:
        return {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}
    return {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}


def read_json(path: Path) -> Any:
    """A JSON file's content, or None where it is missing or not JSON (a part that did not run)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            yield row


def request_events(bundle: Path) -> list[dict[str, Any]]:
    """Each request a slice on its client's track, with its phases, first token and token arrivals."""
    out: list[dict[str, Any]] = []
    clients: set[int] = set()
    for r in _jsonl(bundle / "requests" / "requests.jsonl"):
        t0, end = finite(r.get("t0_mono_s")), finite(r.get("end_mono_s"))
        if t0 is None or end is None:
            continue
        tid = int(r.get("client") or 0) + 1
        clients.add(tid)
        first = finite(r.get("first_token_mono_s"))
        tokens = [t for t in (finite(x) for x in r.get("token_mono_s") or []) if t is not None]
        args = {k: r.get(k) for k in ("id", "status", "ok", "prompt_tokens", "completion_tokens", "error")}
        args["ttft_ms"] = None if first is None else round((first - t0) * 1000, 3)
        args["tokens_streamed"] = len(tokens)
        base = {"pid": PID_CLIENT, "tid": tid, "cat": "request"}
        out.append({**base, "ph": "X", "name": f"request {r.get('id')}", **span(t0, end), "args": args})  # fmt: skip
        if first is not None:
            out.append({**base, "ph": "X", "name": "to first token", **span(t0, first)})
            last = tokens[-1] if tokens else first
            out.append({**base, "ph": "X", "name": "decode", **span(first, last)})
            out.append({**base, "ph": "i", "s": "t", "name": "first token", "ts": us(first)})
        out.extend({**base, "ph": "i", "s": "t", "name": "token", "ts": us(t), "args": {"n": i}}
                   for i, t in enumerate(tokens[1:], start=2))  # fmt: skip
    if out:
        out.append(meta(PID_CLIENT, "capture client (requests)"))
        out.extend(meta(PID_CLIENT, f"client {tid - 1}", tid) for tid in sorted(clients))
    return out


def counter_events(timeline: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every series of the timeline's panels a counter track, named panel: series (unit)."""
    t0 = finite((timeline.get("window") or {}).get("start_mono_s"))
    if t0 is None:
        return []
    out: list[dict[str, Any]] = []
    for key, panel in (timeline.get("panels") or {}).items():
        if not isinstance(panel, Mapping) or panel.get("status") != "successful":
            continue
        unit = panel.get("unit") or ""
        for name, points in (panel.get("series") or {}).items():
            track = f"{key}: {name}" + (f" ({unit})" if unit else "")
            for p in points:
                t, v = finite(p[0]), finite(p[1])
                if t is not None and v is not None:
                    out.append({"ph": "C", "pid": PID_SAMPLERS, "tid": 0, "name": track, "ts": us(t0 + t),
                                "args": {"value": v}})  # fmt: skip
    if out:
        out.append(meta(PID_SAMPLERS, "host samplers (timeline.json)"))
    return out


def _split_thread_key(key: str) -> tuple[int, str, int] | None:
    """wchan.json's thread key 'PID ROLE/COMM TID' -> (pid, 'ROLE/COMM', tid)."""
    head, _, tid = key.rpartition(" ")
    pid, _, name = head.partition(" ")
    try:
        return int(pid), name, int(tid)
    except ValueError:
        return None


def wchan_events(bundle: Path, window_end_mono: float) -> list[dict[str, Any]]:
    """Each thread's kernel waits as slices on that thread: a state lasts from its transition to the next (the
    last one to the window's end). A thread that renamed itself in the window has a key per name; its
    transitions are merged, so its slices stay one sequence."""
    w = read_json(bundle / "kernel" / "wchan.json")
    if not isinstance(w, dict) or not isinstance(w.get("transitions"), dict):
        return []
    threads: dict[tuple[int, int], tuple[str, list[tuple[float, str]]]] = {}
    for key, changes in w["transitions"].items():
        parsed = _split_thread_key(str(key))
        if parsed is None or not isinstance(changes, list):
            continue
        pid, name, tid = parsed
        pts = [(t, str(s)) for t, s in ((finite(c[0]), c[1]) for c in changes if isinstance(c, list) and len(c) == 2)
               if t is not None]  # fmt: skip
        threads.setdefault((pid, tid), (name, []))[1].extend(pts)
    out: list[dict[str, Any]] = []
    for (pid, tid), (name, pts) in threads.items():
        out.append(meta(pid, f"{name.split('/')[-1]} {tid}", tid))
        pts.sort()
        for (t, state), nxt in zip(pts, [*pts[1:], (window_end_mono, "")], strict=True):
            out.append({"ph": "X", "pid": pid, "tid": tid, "cat": "wchan", "name": f"wchan {state}",
                        **span(t, nxt[0])})  # fmt: skip
    return out


def stack_events(bundle: Path) -> list[dict[str, Any]]:
    """Each py-spy dump an instant on every thread it caught, with that thread's stack (innermost first)."""
    result = read_json(bundle / "stacks" / "result.json")
    out: list[dict[str, Any]] = []
    for d in (result or {}).get("dumps") or [] if isinstance(result, dict) else []:
        t = finite(d.get("mono_s"))
        threads = read_json(bundle / "stacks" / str(d.get("file"))) if d.get("file") else None
        if t is None or not isinstance(threads, list):
            continue
        for th in threads:
            frames = [f"{f.get('name')} ({f.get('short_filename')}:{f.get('line')})" for f in th.get("frames") or []]
            tid = th.get("os_thread_id") or th.get("thread_id")
            out.append({"ph": "i", "s": "t", "pid": d.get("pid"), "tid": tid, "cat": "py-spy",
                        "name": f"py-spy: {frames[0] if frames else 'no Python frame'}", "ts": us(t),
                        "args": {"thread": th.get("thread_name"), "active": th.get("active"),
                                 "owns_gil": th.get("owns_gil"), "stack": frames[:STACK_FRAMES],
                                 "file": f"stacks/{d.get('file')}"}})  # fmt: skip
    return out


def capture_events(bundle: Path, timeline: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The window, each perf recording's span and the timeline's events, on the capture's own track."""
    w = timeline.get("window") or {}
    t0, t1 = finite(w.get("start_mono_s")), finite(w.get("end_mono_s"))
    if t0 is None or t1 is None:
        return []
    base = {"pid": PID_CAPTURE, "tid": 1}
    out = [meta(PID_CAPTURE, "capture"), meta(PID_CAPTURE, "window", 1), meta(PID_CAPTURE, "events", 2),
           {**base, "ph": "X", "name": "capture window", **span(t0, t1),
            "args": {"start_wall": w.get("start_wall"), "end_wall": w.get("end_wall")}}]  # fmt: skip
    # Each perf recording on a track of its own: one that started late runs past the window's end, and a slice
    # that is not inside the window's on the same track is dropped by the importer.
    for i, f in enumerate(sorted((bundle / "kernel").glob("perf-*.result.json")), start=3):
        r = read_json(f)
        rec = r.get("recorded_mono_s") if isinstance(r, dict) else None
        if isinstance(rec, list) and len(rec) == 2 and all(finite(x) is not None for x in rec):
            name = f"perf record pid {r.get('pid')}"
            out.append(meta(PID_CAPTURE, name, i))
            out.append({"pid": PID_CAPTURE, "tid": i, "ph": "X", "name": name, **span(rec[0], rec[1]),
                        "args": {"file": f"kernel/{f.name}"}})  # fmt: skip
    for ev in timeline.get("events") or []:
        t = finite(ev.get("t_s")) if isinstance(ev, Mapping) else None
        if t is not None:
            out.append({"pid": PID_CAPTURE, "tid": 2, "ph": "i", "s": "p", "name": str(ev.get("label")),
                        "ts": us(t0 + t)})  # fmt: skip
    return out


def memory_events(bundle: Path, t0: float, t1: float) -> list[dict[str, Any]]:
    """Each worker's memory rows logged in the window (memory-phases.json, patch 0003) as a counter on its
    process, in GiB: RSS, and PSS anon and file."""
    doc = read_json(bundle / "memory-phases.json")
    rows = (doc.get("rows") if isinstance(doc, dict) else None) or []
    out = []
    for row in rows:
        t = finite(row.get("mono")) if isinstance(row, dict) else None
        if t is None or not t0 <= t <= t1 or not isinstance(row.get("pid"), int):
            continue
        vals = {k: round(row[k] / 2**30, 4) for k in ("rss", "pss_anon", "pss_file") if isinstance(row.get(k), int)}
        out.append({"pid": row["pid"], "tid": row["pid"], "ph": "C", "name": "memory GiB (patch 0003)", "ts": us(t),
                    "args": vals})  # fmt: skip
    return out


def process_names(bundle: Path) -> list[dict[str, Any]]:
    b = read_json(bundle / "bundle.json")
    procs = b.get("processes") if isinstance(b, dict) else None
    return [meta(int(p["pid"]), f"{p.get('role')} {p.get('title') or ''}".strip()[:80]) for p in procs or []
            if isinstance(p, dict) and isinstance(p.get("pid"), int)]  # fmt: skip


def build_trace(bundle: Path) -> dict[str, Any]:
    """The bundle's trace: its traceEvents, sorted by time (metadata first), and what it was built from."""
    timeline = load_timeline(bundle / TIMELINE_FILE)
    start, end = (finite((timeline.get("window") or {}).get(k)) for k in ("start_mono_s", "end_mono_s"))
    if end is None:
        raise ReportInputError(f"{bundle / TIMELINE_FILE}: window.end_mono_s is missing; the trace needs the clock")
    events = [
        *process_names(bundle),
        *capture_events(bundle, timeline),
        *request_events(bundle),
        *counter_events(timeline),
        *wchan_events(bundle, end),
        *stack_events(bundle),
        *memory_events(bundle, start if start is not None else end, end),
        # The capture cut them: from the window's start until its requests ended.
        *rank_trace.rank_events(rank_trace.read_steps(bundle / RANKS_DIR)[0]),
    ]
    return trace_document(
        events,
        {
            "host": timeline.get("host"),
            "container": timeline.get("container"),
            "window_start_wall": (timeline.get("window") or {}).get("start_wall"),
            "built_from": "timeline.json, requests/requests.jsonl, kernel/wchan.json, kernel/perf-*.result.json, "
            "stacks/result.json, bundle.json, memory-phases.json, ranks/rank*.steps.jsonl",
        },
    )


def trace_document(events: list[dict[str, Any]], other_data: Mapping[str, Any]) -> dict[str, Any]:
    """The trace-event document: its events sorted by time (metadata first), and what it is, on which clock
    (every trace this project writes is on CLOCK_MONOTONIC, in microseconds)."""
    events.sort(key=lambda e: (e.get("ph") != "M", e.get("ts", 0.0)))
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"clock": "CLOCK_MONOTONIC, microseconds", **other_data},
    }


def write_document(path: Path, document: Mapping[str, Any]) -> Path:
    """A trace document written compactly and atomically (a reader never sees half a trace); its path."""
    write_atomic(path, json.dumps(document, separators=(",", ":")) + "\n")
    return path


def write_trace(bundle: Path) -> Path:
    """BUNDLE/trace.json from the bundle's files; its path."""
    return write_document(bundle / TRACE_FILE, build_trace(bundle))
