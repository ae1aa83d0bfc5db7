"""What `make profile` fetched, summarised per rank: the torch profiler's traces (seed 000 §6).

vLLM writes one trace per profiled process when the profiler stops: `rank<N>.<id>.pt.trace.json.gz` for each
worker rank and `<host>_<n>.async_llm.<id>.pt.trace.json.gz` for the API server's engine client, in the Chrome
trace-event format (Kineto's: `ts` and `dur` in microseconds since `baseTimeNanoseconds`, which is wall time), with
`<prefix>.profiler_out.txt`, torch's own table of the operators. For each rank this reads:

- the span the trace covers and how much of it operators ran in (the union of `cpu_op` and `kernel` events);
- the operators with the most self time (their time less their children's, per thread, as torch's table counts
  it), CPU operators and, where the engine is CUDA, GPU kernels apart;
- the gaps: stretches of 1 ms or more on the rank's busiest thread in which no operator ran. A rank that waits
  on another (a pipeline stage, a collective) shows it here; so does the Python between steps.

The figures are the profiler's and carry its overhead: they locate where the time goes, they are not results
("do not report profiled tok/s as the final result", seed 000 §6). summary.txt says so at its top.

  python -m serving.evidence.profiler_summary DIR      writes DIR/summary.txt and DIR/summary.json, prints the text
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from serving.errors import InputError

TRACE_GLOB = "*.pt.trace.json*"
GAP_MIN_US = 1000.0
TOP_N = 10
GAPS_N = 5
OP_CATEGORIES = ("cpu_op", "kernel", "gpu_memcpy", "gpu_memset")
SUMMARY_TXT = "summary.txt"
SUMMARY_JSON = "summary.json"
NOT_RESULTS = (
    "PROFILED: these figures were taken with the torch profiler running and carry its overhead. They say where "
    "the time goes; they are not results (seed 000 §6): bench without the profiler for figures."
)


@dataclass
class RankSummary:
    rank: str
    file: str
    events: int
    span_ms: float
    busy_pct: float
    top_cpu_ops: list[dict[str, Any]] = field(default_factory=list)
    top_kernels: list[dict[str, Any]] = field(default_factory=list)
    main_thread: int | None = None
    gaps: int = 0
    gap_ms: float = 0.0
    largest_gaps: list[dict[str, Any]] = field(default_factory=list)
    base_time_ns: int | None = None


def rank_name(path: Path) -> str:
    """`rank0.<id>.pt.trace.json.gz` -> rank0; `<host>_1.async_llm.<id>...` -> async_llm (the API server's)."""
    parts = path.name.split(".")
    if parts[0].startswith("rank"):
        return parts[0]
    return parts[1] if len(parts) > 2 and not re.fullmatch(r"\d+", parts[1]) else parts[0]


def read_trace(path: Path) -> dict[str, Any]:
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            data = json.load(f)
    except (OSError, ValueError, EOFError) as e:
        raise InputError(f"{path}: not a readable torch profiler trace ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise InputError(f"{path}: no traceEvents: not a Chrome trace")
    return data


def _complete(events: Iterable[Any]) -> list[dict[str, Any]]:
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("dur"), int | float)]


def self_times(events: Sequence[Mapping[str, Any]], categories: Sequence[str]) -> dict[str, list[float]]:
    """name -> [self time in us, calls] over the events of `categories`: each event's duration less its direct
    children's (events of the same categories nested in it on the same thread)."""
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    by_thread: dict[tuple[Any, Any], list[Mapping[str, Any]]] = defaultdict(list)
    for e in events:
        if e.get("cat") in categories:
            by_thread[(e.get("pid"), e.get("tid"))].append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[tuple[float, str, float]] = []  # (end, name, its children's time so far)
        ordered: list[Mapping[str, Any] | None] = [*evs, None]  # None closes what is still open
        for ev in ordered:
            start = float(ev["ts"]) if ev is not None else float("inf")
            while stack and stack[-1][0] <= start:
                _, name, child = stack.pop()
                out[name][0] -= child
            if ev is None:
                break
            dur, name = float(ev["dur"]), str(ev.get("name"))
            if stack:
                stack[-1] = (stack[-1][0], stack[-1][1], stack[-1][2] + dur)
            out[name][0] += dur
            out[name][1] += 1
            stack.append((start + dur, name, 0.0))
    return out


def _union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _top(times: Mapping[str, list[float]], total_us: float) -> list[dict[str, Any]]:
    rows = sorted(times.items(), key=lambda kv: -kv[1][0])[:TOP_N]
    return [
        {
            "name": n,
            "self_ms": round(t / 1000, 3),
            "calls": int(c),
            "pct": round(100 * t / total_us, 1) if total_us else 0,
        }
        for n, (t, c) in rows
    ]


def summarise_rank(path: Path) -> RankSummary:
    data = read_trace(path)
    events = _complete(data["traceEvents"])
    if not events:
        return RankSummary(rank_name(path), path.name, 0, 0.0, 0.0)
    t0 = min(float(e["ts"]) for e in events)
    t1 = max(float(e["ts"]) + float(e["dur"]) for e in events)
    span = max(t1 - t0, 1e-9)
    ops = [e for e in events if e.get("cat") in OP_CATEGORIES]
    busy = _union((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in ops)
    cpu = self_times(events, ("cpu_op",))
    kernels = self_times(events, ("kernel",))
    threads: dict[Any, int] = defaultdict(int)
    for e in ops:
        threads[e.get("tid")] += 1
    main = max(threads, key=lambda t: threads[t]) if threads else None
    gaps: list[tuple[float, float]] = []
    if main is not None:
        mine = _union((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in ops if e.get("tid") == main)
        gaps = [(a[1], b[0]) for a, b in itertools.pairwise(mine) if b[0] - a[1] >= GAP_MIN_US]
    largest = sorted(gaps, key=lambda g: g[0] - g[1])[:GAPS_N]
    base = data.get("baseTimeNanoseconds")
    return RankSummary(
        rank=rank_name(path),
        file=path.name,
        events=len(events),
        span_ms=round(span / 1000, 3),
        busy_pct=round(100 * sum(b - a for a, b in busy) / span, 1),
        top_cpu_ops=_top(cpu, sum(t for t, _ in cpu.values())),
        top_kernels=_top(kernels, sum(t for t, _ in kernels.values())),
        main_thread=int(main) if isinstance(main, int) else None,
        gaps=len(gaps),
        gap_ms=round(sum(b - a for a, b in gaps) / 1000, 3),
        largest_gaps=[{"at_ms": round((a - t0) / 1000, 3), "ms": round((b - a) / 1000, 3)} for a, b in largest],
        base_time_ns=int(base) if isinstance(base, int) else None,
    )


def summarise(directory: Path) -> list[RankSummary]:
    files = sorted(directory.glob(TRACE_GLOB))
    if not files:
        raise InputError(f"{directory}: no torch profiler trace (*.pt.trace.json.gz): the profiler wrote none")
    return [summarise_rank(f) for f in files]


def render(ranks: Sequence[RankSummary], run: Mapping[str, Any] | None = None) -> str:
    lines = [NOT_RESULTS, ""]
    if run:
        req = run.get("requests") or {}
        stop = run.get("stop_profile") or {}
        lines.append(f"profiled: {req.get('sent')} requests ({req.get('failed')} failed); the profiler's stop took "
                     f"{stop.get('seconds')} s (writing the traces)")  # fmt: skip
        lines.append("")
    lines.append(f"traces: {len(ranks)} ({', '.join(r.rank for r in ranks)})")
    for r in ranks:
        lines += ["", f"{r.rank} ({r.file}): {r.events:,} events over {r.span_ms:,.1f} ms; operators ran "
                  f"{r.busy_pct:.1f}% of it"]  # fmt: skip
        if r.main_thread is not None:
            lines.append(f"  gaps of {GAP_MIN_US / 1000:g} ms or more with no operator on thread {r.main_thread}: "
                         f"{r.gaps} ({r.gap_ms:,.1f} ms in all)")  # fmt: skip
            lines += [f"    at {g['at_ms']:,.1f} ms: {g['ms']:,.1f} ms" for g in r.largest_gaps]
        for title, rows in (("CPU operators", r.top_cpu_ops), ("GPU kernels", r.top_kernels)):
            if rows:
                lines.append(f"  top {title} by self time:")
                width = max(len(x["name"][:60]) for x in rows)
                lines += [
                    f"    {x['name'][:60]:<{width}}  {x['self_ms']:>10,.3f} ms  {x['pct']:>5.1f}%  {x['calls']:>7,} "
                    "calls"
                    for x in rows
                ]
    return "\n".join(lines) + "\n"


def write_summary(directory: Path) -> str:
    ranks = summarise(directory)
    run_file = directory / "profile-run.json"
    run = json.loads(run_file.read_text()) if run_file.is_file() else None
    text = render(ranks, run)
    (directory / SUMMARY_TXT).write_text(text)
    doc = {"schema_version": 1, "profiled": True, "note": NOT_RESULTS, "ranks": [asdict(r) for r in ranks]}
    (directory / SUMMARY_JSON).write_text(json.dumps(doc, indent=2) + "\n")
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m serving.evidence.profiler_summary", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("directory", type=Path)
    a = ap.parse_args(argv)
    try:
        print(write_summary(a.directory), end="")
    except InputError as e:
        print(f"torch_profile: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
