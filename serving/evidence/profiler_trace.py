"""`make profile`'s trace.json: every rank's torch profiler trace and the profiled requests on one clock.

The torch profiler (Kineto) writes its events' `ts` in microseconds from `baseTimeNanoseconds`, so `ts +
baseTimeNanoseconds / 1000` is wall-clock time (seen here: the first event of a rank 0.8 s after the
`/start_profile` the client sent). The requests and the profiler's start and stop are on CLOCK_MONOTONIC
(probes/senders/profiler_run.py), the clock of the capture's and the bench's traces. The client read both clocks
together when it sent `/start_profile` and `/stop_profile` (`profile-run.json`: `mono_s` and `wall`); their difference
moves the profiler's events onto CLOCK_MONOTONIC. Both clocks are the host's (containers share them), so the only
error is the step between the two reads and any wall-clock step (NTP) during the profile, which the two pairs
bound: `otherData.clock_alignment` gives the offset taken and how far the two pairs disagree.

The merged file is a Chrome trace-event document like the capture's: the Perfetto UI opens it. Each rank's events
keep their own pid (the worker's, as the profiler wrote it). Where the engine writes the patched runtime's rank
trace, each rank's engine steps between /start_profile and /stop_profile (ranks/) are a track in the same process.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from probes.readers.rank_steps import RANKS_DIR
from serving.errors import InputError
from serving.evidence import rank_trace
from serving.evidence.capture_trace import PID_CAPTURE, meta, request_events, trace_document, us, write_document
from serving.evidence.profiler_summary import TRACE_GLOB, rank_name, read_trace

TRACE_FILE = "trace.json"
RUN_FILE = "profile-run.json"


def _pair(mark: Any) -> tuple[float, float] | None:
    """(mono_s, wall epoch s) of a /start_profile or /stop_profile reading."""
    if not isinstance(mark, dict):
        return None
    mono, wall = mark.get("mono_s"), mark.get("wall")
    if not isinstance(mono, int | float) or not isinstance(wall, str):
        return None
    try:
        return float(mono), datetime.fromisoformat(wall).timestamp()
    except ValueError:
        return None


def clock_offset(run: dict[str, Any]) -> dict[str, Any]:
    """CLOCK_MONOTONIC minus wall-clock time, in seconds, from the client's readings at start and stop; and how
    far apart the two are (a wall-clock step during the profile shows here)."""
    pairs = [p for p in (_pair(run.get("start_profile")), _pair(run.get("stop_profile"))) if p is not None]
    if not pairs:
        raise InputError(f"{RUN_FILE}: no /start_profile reading with mono_s and wall: the traces cannot be aligned")
    offsets = [mono - wall for mono, wall in pairs]
    return {"mono_minus_wall_s": offsets[0], "start_stop_disagree_ms": round(abs(offsets[-1] - offsets[0]) * 1e3, 3),
            "from": "profile-run.json start_profile (mono_s, wall)"}  # fmt: skip


def rank_events(path: Path, offset_s: float) -> tuple[list[dict[str, Any]], int]:
    """One torch profiler trace's events moved onto CLOCK_MONOTONIC; and how many it had. Kineto's own tracks
    (pid "Spans", "Traces", "": the profiler's span and marks in every rank's file) are named after the rank, or
    every rank's "PyTorch Profiler" span would land on one track and overlap."""
    data = read_trace(path)
    base_ns = data.get("baseTimeNanoseconds")
    if not isinstance(base_ns, int):
        raise InputError(f"{path}: no baseTimeNanoseconds: the events' clock is unknown")
    # One shift for every event (whole microseconds), so siblings that touch still touch after it.
    shift_us = round(base_ns / 1000 + offset_s * 1e6)
    rank = rank_name(path)
    out = []
    for e in data["traceEvents"]:
        if not isinstance(e, dict):
            continue
        ts = e.get("ts")
        if isinstance(ts, int | float):
            e = {**e, "ts": round(ts + shift_us, 3)}
        if isinstance(e.get("pid"), str):
            e = {**e, "pid": f"{rank} {e['pid']}".strip()}
        out.append(e)
    return out, len(data["traceEvents"])


def profile_marks(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The profiler's window on the capture track: from /start_profile to the end of /stop_profile."""
    start, stop = run.get("start_profile") or {}, run.get("stop_profile") or {}
    out = [meta(PID_CAPTURE, "make profile"), meta(PID_CAPTURE, "profiler", 1)]
    t0, t1 = start.get("mono_s"), stop.get("mono_s")
    if isinstance(t0, int | float) and isinstance(t1, int | float):
        a = us(t0)
        out.append({"pid": PID_CAPTURE, "tid": 1, "ph": "X", "name": "profiler on (/start_profile to /stop_profile)",
                    "ts": a, "dur": max(0, us(t1) - a)})  # fmt: skip
    return out


def build_trace(directory: Path) -> dict[str, Any]:
    try:
        run = json.loads((directory / RUN_FILE).read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"{directory / RUN_FILE}: {e}") from None
    alignment = clock_offset(run)
    events = [*profile_marks(run), *request_events(directory)]
    # Each rank's engine steps under the profiler, where the engine writes a rank trace (patch 0004): beside its
    # operators, in its worker's process.
    window = [(run.get(k) or {}).get("mono_s") for k in ("start_profile", "stop_profile")]
    if all(isinstance(t, int | float) for t in window):
        events += rank_trace.rank_events(rank_trace.read_steps(directory / RANKS_DIR, *window)[0])
    merged = {}
    for path in sorted(directory.glob(TRACE_GLOB)):
        evs, n = rank_events(path, alignment["mono_minus_wall_s"])
        events += evs
        merged[rank_name(path)] = {"file": path.name, "events": n}
    if not merged:
        raise InputError(f"{directory}: no torch profiler trace to merge")
    return trace_document(
        events,
        {
            "clock_alignment": alignment,
            "merged": merged,
            "profiled": "figures taken under the profiler are not results",
            "built_from": f"{RUN_FILE}, requests/requests.jsonl, {TRACE_GLOB}, {RANKS_DIR}/ (a rank trace)",
        },
    )


def write_trace(directory: Path) -> Path:
    return write_document(directory / TRACE_FILE, build_trace(directory))
