"""make profile's trace.json (serving/evidence/profiler_trace.py): each rank's torch profiler trace moved from
wall-clock time onto CLOCK_MONOTONIC by the client's paired readings, beside the requests, read back by Perfetto's own
trace processor (tests/helpers/perfetto/).

The profile directory is built here in the formats `make profile` fetches: Kineto's trace (ts in µs from
baseTimeNanoseconds, its "Spans"/"Traces" tracks), profile-run.json and requests/requests.jsonl. The integration
test (test_tp2.py) merges the real traces of a two-rank engine.
"""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from serving.errors import InputError
from serving.evidence.profiler_trace import build_trace, write_trace
from tests.helpers.perfetto import TraceProcessor, require_node

MONO0 = 20000.0  # CLOCK_MONOTONIC at /start_profile, s
WALL0 = 1796227000.0  # wall-clock time at the same moment, s
BASE_NS = 1790857026 * 10**9  # Kineto's baseTimeNanoseconds


def _kineto(rank: int, pid: int) -> dict[str, Any]:
    """A rank's trace: an op 1 s after /start_profile (wall) with a child, and Kineto's own profiler span."""
    t_us = (WALL0 + 1.0) * 1e6 - BASE_NS / 1000  # ts is µs from baseTimeNanoseconds
    return {
        "schemaVersion": 1,
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": t_us,
             "args": {"name": f"VLLM::Worker_TP{rank}"}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": pid, "ts": t_us, "dur": 2000.5},
            {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": pid, "tid": pid, "ts": t_us + 2000.5, "dur": 10.0},
            {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
             "ts": t_us - 5000.0 + rank, "dur": 3e6},
            {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": t_us + 3e6},
        ],
    }  # fmt: skip


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def _profile(d: Path, stop_step_s: float = 0.0) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for rank, pid in ((0, 165), (1, 166)):
        (d / f"rank{rank}.1796227509861113328.pt.trace.json.gz").write_bytes(
            gzip.compress(json.dumps(_kineto(rank, pid)).encode())
        )
    run = {
        "clock": "CLOCK_MONOTONIC",
        "start_profile": {"path": "/start_profile", "status": 200, "mono_s": MONO0, "wall": _iso(WALL0)},
        "stop_profile": {"path": "/stop_profile", "status": 200, "mono_s": MONO0 + 5.0,
                         "wall": _iso(WALL0 + 5.0 + stop_step_s), "seconds": 1.0},
    }  # fmt: skip
    (d / "profile-run.json").write_text(json.dumps(run))
    (d / "requests").mkdir(exist_ok=True)
    req = {"id": "capture-0", "client": 0, "ok": True, "t0_mono_s": MONO0 + 0.5, "first_token_mono_s": MONO0 + 1.2,
           "token_mono_s": [MONO0 + 1.2, MONO0 + 1.3], "end_mono_s": MONO0 + 1.3}  # fmt: skip
    (d / "requests" / "requests.jsonl").write_text(json.dumps(req) + "\n")
    return d


def test_profiler_events_land_on_the_monotonic_clock_beside_the_requests(tmp_path: Path) -> None:
    trace = build_trace(_profile(tmp_path / "profile"))
    ops = {(e["pid"], e["name"]): e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"}
    # 1 s after /start_profile by the wall clock is 1 s after it on CLOCK_MONOTONIC, to the microsecond.
    assert ops[(165, "aten::mm")]["ts"] == pytest.approx((MONO0 + 1.0) * 1e6, abs=1)
    assert ops[(166, "aten::add")]["ts"] - ops[(166, "aten::mm")]["ts"] == pytest.approx(2000.5, abs=1e-3)
    req = next(e for e in trace["traceEvents"] if e.get("name") == "request capture-0")
    assert req["ts"] == (MONO0 + 0.5) * 1e6
    align = trace["otherData"]["clock_alignment"]
    assert align["mono_minus_wall_s"] == pytest.approx(MONO0 - WALL0) and align["start_stop_disagree_ms"] == 0
    assert set(trace["otherData"]["merged"]) == {"rank0", "rank1"}
    # Kineto's own tracks are named after their rank, so the two ranks' profiler spans do not share one.
    assert {e["pid"] for e in trace["traceEvents"] if e.get("name") == "PyTorch Profiler (0)"} == {
        "rank0 Spans",
        "rank1 Spans",
    }


def test_a_wall_clock_step_during_the_profile_is_stated(tmp_path: Path) -> None:
    trace = build_trace(_profile(tmp_path / "profile", stop_step_s=0.25))
    assert trace["otherData"]["clock_alignment"]["start_stop_disagree_ms"] == 250.0


def test_without_the_clients_clock_readings_the_traces_are_not_merged(tmp_path: Path) -> None:
    d = _profile(tmp_path / "profile")
    run = json.loads((d / "profile-run.json").read_text())
    run["start_profile"].pop("wall")
    run["stop_profile"].pop("wall")
    (d / "profile-run.json").write_text(json.dumps(run))
    with pytest.raises(InputError, match="cannot be aligned"):
        build_trace(d)


def test_perfetto_reads_the_merged_trace_without_error(tmp_path: Path) -> None:
    require_node()
    path = write_trace(_profile(tmp_path / "profile"))
    with TraceProcessor.start(tmp_path / "stderr.txt") as tp:
        tp.load(path.read_bytes())
        errors = tp.query("select name, value from stats where severity in ('error', 'data_loss') and value > 0")
        mm = tp.query("select ts from slice where name = 'aten::mm' order by ts")
        spans = tp.query("select count(*) as n from slice where name = 'PyTorch Profiler (0)'")
    assert errors == []
    assert [r["ts"] for r in mm] == [round((MONO0 + 1.0) * 1e9)] * 2
    assert spans == [{"n": 2}]


def test_a_rank_traces_steps_under_the_profiler_are_a_track_in_each_worker(tmp_path: Path) -> None:
    """The RECORDED steps of a PP=2 engine (tests/fixtures/rank_trace/), as `make profile` packs the trace directory
    under ranks/: the steps between /start_profile and /stop_profile, in their workers' processes."""
    d = _profile(tmp_path / "profile")
    src = Path(__file__).resolve().parents[2] / "fixtures" / "rank_trace" / "pp2-cpu-tiny" / "receive-first"
    (d / "ranks").mkdir()
    rows = [json.loads(ln) for ln in (src / "rank1.steps.jsonl").read_text().splitlines()]
    for r in (0, 1):
        (d / "ranks" / f"rank{r}.steps.jsonl").write_text((src / f"rank{r}.steps.jsonl").read_text())
    run = json.loads((d / "profile-run.json").read_text())
    run["start_profile"]["mono_s"], run["stop_profile"]["mono_s"] = rows[4]["t0"], rows[9]["t1"]  # steps 5-10
    (d / "profile-run.json").write_text(json.dumps(run))
    trace = build_trace(d)
    steps = [e for e in trace["traceEvents"] if e.get("cat") == "rank step" and e["name"].startswith("step ")]
    by_pid = {pid: sorted(e["args"]["step"] for e in steps if e["pid"] == pid) for pid in {e["pid"] for e in steps}}
    assert by_pid[214] == [5, 6, 7, 8, 9, 10] and set(by_pid) == {213, 214}  # the recorded workers' pids
