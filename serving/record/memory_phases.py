"""Memory by phase, per worker rank: the rows the patched runtime logs (images/vllm/patches/0003-*).

Each worker logs "refdeploy-memory-phase {json}" at every phase boundary (weights loaded, memory profiled, KV
cache allocated, warmed up, first prefill) and while it decodes (the 16th pure-decode step, then at most every
10 s). The deploy reads them from the engine's log into the manifest (`memory_by_phase`); the capture and the
bench keep the decode rows of their own window. Host figures are bytes from /proc/self (RSS, PSS and its
anon/file/shmem split, VmLck/VmPin, Locked); device figures exist only where CUDA does (`cuda: true`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

MARK = "refdeploy-memory-phase"
PHASES = ("weights_loaded", "memory_profiled", "kv_cache_allocated", "warmed_up", "first_prefill", "decode")
SOURCE = "the patched runtime's per-worker readings (images/vllm/patches/0003-memory-by-phase-per-worker.patch)"
_ROW_RE = re.compile(re.escape(MARK) + r" (\{.*\})\s*$")
# The worker's log prefix, e.g. "(Worker_TP1 pid=52)" or "(EngineCore pid=40)" for a single-rank engine.
_WHO_RE = re.compile(r"\((?P<who>[A-Za-z_]+[0-9]*) pid=\d+\)")
HOST_KEYS = ("rss", "rss_peak", "pss", "pss_anon", "pss_file", "pss_shmem", "locked", "pinned", "smaps_locked")
DEVICE_KEYS = ("allocated", "reserved", "allocated_peak", "reserved_peak", "pinned_host_allocated",
               "pinned_host_reserved")  # fmt: skip


def parse(lines: str | Iterable[str]) -> list[dict[str, Any]]:
    """Every well-formed row in a log, in log order; a line that only mentions the mark is skipped."""
    text_lines = lines.splitlines() if isinstance(lines, str) else lines
    rows = []
    for line in text_lines:
        m = _ROW_RE.search(line)
        if not m:
            continue
        try:
            row = json.loads(m.group(1))
        except json.JSONDecodeError:
            continue
        if not isinstance(row, dict) or row.get("phase") not in PHASES or not isinstance(row.get("pid"), int):
            continue
        who = _WHO_RE.search(line)
        row["process"] = who.group("who") if who else None
        rows.append(row)
    return rows


def _rank_key(row: Mapping[str, Any]) -> str:
    rank = row.get("rank")
    return str(rank) if rank is not None else f"pid {row['pid']}"


def table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The manifest's table: per rank, each phase's row (the latest where a phase repeats, i.e. decode, with how
    many decode rows there were); `not_logged`: the phases with no row in the log read (a deploy reads the
    start-up part, before any request: first_prefill and decode are not reached then). Only the current
    engine's processes: a restarted engine logs new pids, and the
    rows of pids that logged before the last weights_loaded of the same rank are dropped."""
    current: dict[str, int] = {}
    for row in rows:
        if row["phase"] == "weights_loaded":
            current[_rank_key(row)] = row["pid"]
    ranks: dict[str, dict[str, Any]] = {}
    for row in rows:
        key = _rank_key(row)
        if key in current and row["pid"] != current[key]:
            continue
        entry = ranks.setdefault(key, {"pid": row["pid"], "process": row.get("process"), "phases": {}})
        entry["phases"][row["phase"]] = row
        if row["phase"] == "decode":
            entry["decode_rows"] = entry.get("decode_rows", 0) + 1
    for entry in ranks.values():
        entry["not_logged"] = [p for p in PHASES if p not in entry["phases"]]
    return {"source": SOURCE, "ranks": dict(sorted(ranks.items()))}


def decode_in_window(rows: list[dict[str, Any]], start_mono: float, end_mono: float) -> dict[str, Any]:
    """What a capture or a bench keeps: per rank, the last decode row logged inside [start, end] on
    CLOCK_MONOTONIC, else the last one before the window, marked so (`in_window: false`), else nothing."""
    out: dict[str, Any] = {}
    for row in rows:
        if row["phase"] != "decode" or row.get("mono") is None:
            continue
        key = _rank_key(row)
        inside = start_mono <= row["mono"] <= end_mono
        if row["mono"] > end_mono:
            continue
        prev = out.get(key)
        if prev is None or inside or not prev["in_window"]:
            out[key] = {**row, "in_window": inside}
    return {"source": SOURCE, "window_mono": [start_mono, end_mono], "ranks": dict(sorted(out.items()))}


def _gib(v: Any) -> str:
    return f"{v / 2**30:.2f}" if isinstance(v, int) else "-"


def render(tab: Mapping[str, Any]) -> list[str]:
    """The table as text: one block per rank, a line per phase (GiB), host columns then device columns where CUDA
    is present."""
    lines = []
    for key, entry in tab.get("ranks", {}).items():
        phases = entry["phases"]
        cuda = any(r.get("cuda") for r in phases.values())
        head = f"rank {key} ({entry.get('process') or '?'}, pid {entry['pid']}), GiB:"
        cols = ["rss", "pss", "pss_anon", "pss_file", "pss_shmem", "locked"]
        if cuda:
            cols += ["allocated", "reserved", "allocated_peak", "reserved_peak"]
        lines.append(head)
        lines.append("  " + f"{'phase':<20}" + "".join(f"{c:>15}" for c in cols))
        for phase in PHASES:
            row = phases.get(phase)
            if row is None:
                lines.append(f"  {phase:<20}" + "not logged".rjust(15))
                continue
            lines.append(f"  {phase:<20}" + "".join(f"{_gib(row.get(c)):>15}" for c in cols))
    return lines


def decode_lines(kept: Mapping[str, Any]) -> list[str]:
    """One line per rank for a report: its memory while decoding, and whether the row is from the window."""
    if not kept.get("ranks"):
        return ["memory at decode: no decode row logged by the workers (runtime without patch 0003, or no decode "
                "step in or before the window)"]  # fmt: skip
    out = []
    for key, row in kept["ranks"].items():
        when = "logged in the window" if row["in_window"] else "logged before the window, none in it"
        dev = ""
        if row.get("cuda"):
            dev = f", device allocated {_gib(row.get('allocated'))} GiB, reserved {_gib(row.get('reserved'))} GiB"
        out.append(
            f"memory at decode, rank {key}: rss {_gib(row.get('rss'))} GiB, pss {_gib(row.get('pss'))} GiB "
            f"(anon {_gib(row.get('pss_anon'))}, file {_gib(row.get('pss_file'))}, "
            f"shmem {_gib(row.get('pss_shmem'))}), "
            f"locked {_gib(row.get('locked'))} GiB{dev} ({when})"
        )
    return out


FILE = "memory-phases.json"


def write_window(
    directory: Path, log_lines: list[str], span: tuple[float, float] | None, read_from: str
) -> dict[str, Any]:
    """DIRECTORY/memory-phases.json: every memory row read from the end of the engine's log, and each rank's
    memory at decode in `span` (CLOCK_MONOTONIC; None: the window is unknown, no row is kept); what was kept."""
    from probes.capture.summary import write_atomic

    rows = parse(log_lines)
    kept = decode_in_window(rows, *span) if span else {"source": SOURCE, "ranks": {}}
    doc = {"source": SOURCE, "read_from": read_from, "rows": rows, "at_decode": kept}
    write_atomic(directory / FILE, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return kept


def write_capture_memory(bundle: Path, log_lines: list[str]) -> list[str]:
    """A capture bundle's memory-phases.json, over the capture's window (timeline.json's, on CLOCK_MONOTONIC);
    the report lines."""
    from probes.capture.report_input import finite, load_timeline

    window = load_timeline(bundle / "timeline.json").get("window") or {}
    t0, t1 = finite(window.get("start_mono_s")), finite(window.get("end_mono_s"))
    span = (t0, t1) if t0 is not None and t1 is not None else None
    return decode_lines(write_window(bundle, log_lines, span, "the last lines of the engine's container log"))


def _bench_window(bench_dir: Path) -> tuple[float, float] | None:
    """The bench's span on CLOCK_MONOTONIC: its first run's start to its last run's end, as each run's
    status.json records them (the client's clock is the host's monotonic one)."""
    starts, ends = [], []
    for path in (bench_dir / "runs").glob("*/status.json"):
        try:
            status = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        a, b = status.get("started_mono_s"), status.get("ended_mono_s")
        if isinstance(a, int | float) and isinstance(b, int | float):
            starts.append(float(a))
            ends.append(float(b))
    return (min(starts), max(ends)) if starts else None


def write_bench_memory(bench_dir: Path, log_lines: list[str]) -> None:
    """A bench's memory-phases.json, over the bench's span (the report reads it: bench_lines)."""
    write_window(bench_dir, log_lines, _bench_window(bench_dir),
                 "the last lines of the engine's container log after the bench")  # fmt: skip


def bench_lines(bench_dir: Path) -> list[str]:
    """The report's lines: each rank's memory at decode during the bench, or why there are none."""
    try:
        doc = json.loads((bench_dir / FILE).read_text())
    except OSError:
        return [f"memory at decode: not read (no {FILE}: a bench made before it was)"]
    except ValueError as e:
        return [f"memory at decode: {FILE} does not parse ({e})"]
    return decode_lines(doc.get("at_decode") or {})
