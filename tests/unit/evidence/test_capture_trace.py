"""trace.json (serving/evidence/capture_trace.py) read by Perfetto's own trace processor (tests/helpers/perfetto/):
each request a slice with its first token, the samplers as counter tracks, wchan and py-spy on their threads, the
capture's window and perf spans; and the importer reports no error.

The bundle is built here from the files a capture writes, in their formats (the integration test reads a real
capture's). Perfetto runs in Node.js: without node the tests skip, except under CI (CI set), where it is installed
(serving/standalone/prereqs.py) and its absence is a failure.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from serving.evidence.capture_trace import PID_CLIENT, build_trace, write_trace
from tests.helpers.perfetto import TraceProcessor, require_node

T0 = 5000.0  # the window's start on CLOCK_MONOTONIC, in seconds


@pytest.fixture(scope="module")
def tp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TraceProcessor]:
    require_node()
    yield from _processor(tmp_path_factory.mktemp("tp"))


def _processor(d: Path) -> Iterator[TraceProcessor]:
    with TraceProcessor.start(d / "stderr.txt") as t:
        yield t


def _bundle(d: Path) -> Path:
    """A capture bundle's files: timeline.json, two clients' requests (one failed), wchan, a py-spy dump, perf."""
    d.mkdir(parents=True, exist_ok=True)
    timeline = {
        "schema_version": 1, "host": "localhost", "container": "refdeploy-vllm",
        "window": {"start_wall": "2026-12-02T12:00:00+00:00", "end_wall": "2026-12-02T12:00:10+00:00",
                   "start_mono_s": T0, "end_mono_s": T0 + 10, "seconds": 10.0},
        "panels": {
            **{k: {"title": k, "unit": "%", "status": "skipped", "reason": "test", "series": {}}
               for k in ("gpu", "io", "latency", "queue")},
            "cpu": {"title": "CPU", "unit": "%", "status": "successful", "reason": None, "source": "test",
                    "series": {"host us": [[0.0, 10.0], [1.0, 55.5], [2.0, 20.0]]}},
        },
        "events": [{"t_s": 2.5, "label": "py-spy dumps x1"}],
        "summary": {}, "notes": [], "artifacts": {},
    }  # fmt: skip
    (d / "timeline.json").write_text(json.dumps(timeline))
    (d / "requests").mkdir()
    rows = [
        {"id": "capture-0", "index": 0, "client": 0, "t0_mono_s": T0 + 1.0, "status": 200,
         "first_token_mono_s": T0 + 1.02, "token_mono_s": [T0 + 1.02, T0 + 1.03, T0 + 1.04],
         "end_mono_s": T0 + 1.041, "prompt_tokens": 32, "completion_tokens": 3, "error": None, "ok": True},
        {"id": "capture-1", "index": 1, "client": 1, "t0_mono_s": T0 + 1.01, "status": 200,
         "first_token_mono_s": T0 + 1.05, "token_mono_s": [T0 + 1.05, T0 + 1.06, T0 + 1.07],
         "end_mono_s": T0 + 1.0701, "prompt_tokens": 32, "completion_tokens": 3, "error": None, "ok": True},
        {"id": "capture-2", "index": 2, "client": 0, "t0_mono_s": T0 + 1.05, "status": 500,
         "first_token_mono_s": None, "token_mono_s": [], "end_mono_s": T0 + 1.06, "prompt_tokens": None,
         "completion_tokens": None, "error": "HTTP 500: boom", "ok": False},
    ]  # fmt: skip
    (d / "requests" / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "kernel").mkdir()
    waits = [[T0 + 0.1, "futex_do_wait"], [T0 + 4.0, "running"]]
    wchan = {"schema_version": 1, "clock": "CLOCK_MONOTONIC", "status": "successful",
             "transitions": {"154 worker/VLLM::Worker 160": waits}}  # fmt: skip
    (d / "kernel" / "wchan.json").write_text(json.dumps(wchan))
    perf = {"pid": 154, "status": "successful", "recorded_mono_s": [T0 + 0.2, T0 + 8.2]}
    (d / "kernel" / "perf-154.result.json").write_text(json.dumps(perf))
    (d / "stacks").mkdir()
    frames = [{"name": "Worker.execute_model", "short_filename": "worker.py", "line": 12},
              {"name": "main", "short_filename": "run.py", "line": 3}]  # fmt: skip
    dump = [{"pid": 154, "thread_id": 1, "os_thread_id": 160, "thread_name": "MainThread", "active": True,
             "owns_gil": True, "frames": frames}]  # fmt: skip
    (d / "stacks" / "dump-01-worker-154.json").write_text(json.dumps(dump))
    result = {"status": "successful", "dumps": [{"pid": 154, "mono_s": T0 + 2.5, "file": "dump-01-worker-154.json"}]}
    (d / "stacks" / "result.json").write_text(json.dumps(result))
    (d / "bundle.json").write_text(json.dumps({"processes": [{"pid": 154, "role": "worker", "title": "VLLM::Worker"}]}))
    return d


@pytest.fixture(scope="module")
def loaded(tp: TraceProcessor, tmp_path_factory: pytest.TempPathFactory) -> TraceProcessor:
    bundle = _bundle(tmp_path_factory.mktemp("bundle") / "capture")
    tp.load(write_trace(bundle).read_bytes())
    return tp


def _ns(s: float) -> int:
    return round(s * 1e9)


def test_the_importer_reports_no_error(loaded: TraceProcessor) -> None:
    errors = loaded.query("select name, value from stats where severity in ('error', 'data_loss') and value > 0")
    assert errors == []


def test_each_request_is_a_slice_on_its_clients_track_with_its_phases(loaded: TraceProcessor) -> None:
    rows = loaded.query(
        "select s.name, s.ts, s.dur, s.depth, t.tid, p.pid from slice s join thread_track tt on s.track_id = tt.id "
        "join thread t using (utid) join process p using (upid) where s.category = 'request' and s.dur > 0 "
        "order by s.ts, s.depth"
    )
    spans = {(r["name"], r["tid"]): r for r in rows}
    req0 = spans[("request capture-0", 1)]
    assert (req0["ts"], req0["dur"], req0["depth"], req0["pid"]) == (_ns(T0 + 1.0), 41_000_000, 0, PID_CLIENT)
    assert spans[("to first token", 1)]["dur"] == 20_000_000
    assert spans[("decode", 1)]["ts"] == _ns(T0 + 1.02) and spans[("decode", 1)]["depth"] == 1
    assert spans[("request capture-1", 2)]["dur"] == 60_100_000
    # The failed request is there too, with nothing under it.
    assert ("request capture-2", 1) in spans
    names = loaded.query("select name from slice where name like 'request capture-%' order by name")
    assert [r["name"] for r in names] == ["request capture-0", "request capture-1", "request capture-2"]


def test_first_tokens_and_every_token_are_marked(loaded: TraceProcessor) -> None:
    firsts = loaded.query("select ts from slice where name = 'first token' and dur = 0 order by ts")
    assert [r["ts"] for r in firsts] == [_ns(T0 + 1.02), _ns(T0 + 1.05)]
    tokens = loaded.query("select count(*) as n from slice where name = 'token'")
    assert tokens[0]["n"] == 4  # tokens 2 and 3 of the two requests that streamed


def test_a_samplers_series_is_a_counter_track(loaded: TraceProcessor) -> None:
    rows = loaded.query(
        "select c.ts, c.value from counter c join counter_track t on c.track_id = t.id "
        "where t.name like 'cpu: host us (%)%' order by c.ts"
    )
    assert [(r["ts"], r["value"]) for r in rows] == [(_ns(T0), 10.0), (_ns(T0 + 1), 55.5), (_ns(T0 + 2), 20.0)]


def test_waits_and_stacks_sit_on_the_thread_they_were_read_from(loaded: TraceProcessor) -> None:
    rows = loaded.query(
        "select s.name, s.ts, s.dur, t.tid, p.pid from slice s join thread_track tt on s.track_id = tt.id "
        "join thread t using (utid) join process p using (upid) where s.category in ('wchan', 'py-spy') "
        "order by s.ts"
    )
    got = [(r["name"], r["ts"], r["dur"], r["tid"], r["pid"]) for r in rows]
    assert got == [
        ("wchan futex_do_wait", _ns(T0 + 0.1), 3_900_000_000, 160, 154),
        ("py-spy: Worker.execute_model (worker.py:12)", _ns(T0 + 2.5), 0, 160, 154),
        ("wchan running", _ns(T0 + 4.0), 6_000_000_000, 160, 154),
    ]
    procs = loaded.query("select name from process where pid = 154")
    assert procs == [{"name": "worker VLLM::Worker"}]


def test_the_window_and_perf_span_are_on_the_captures_track(loaded: TraceProcessor) -> None:
    rows = loaded.query("select name, ts, dur from slice where name in ('capture window', 'perf record pid 154')")
    got = {r["name"]: (r["ts"], r["dur"]) for r in rows}
    assert got == {"capture window": (_ns(T0), 10_000_000_000), "perf record pid 154": (_ns(T0 + 0.2), 8_000_000_000)}


def test_the_check_can_fail_overlapping_slices_are_reported(tmp_path: Path) -> None:
    # What the importer flags: two slices of one thread that overlap without nesting (it drops the second). The
    # exporter writes whole microseconds so a request's phases never do this by a rounding.
    require_node()
    trace: dict[str, Any] = {"traceEvents": [
        {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 5, "dur": 10},
    ]}  # fmt: skip
    for t in _processor(tmp_path):
        t.load(json.dumps(trace).encode())
        stats = t.query("select name, value from stats where severity = 'error' and value > 0")
    assert stats == [{"name": "slice_drop_overlapping_complete_event", "value": 1}]


def test_a_bundle_without_the_clock_is_refused(tmp_path: Path) -> None:
    d = _bundle(tmp_path / "capture")
    tl = json.loads((d / "timeline.json").read_text())
    del tl["window"]["end_mono_s"]
    (d / "timeline.json").write_text(json.dumps(tl))
    with pytest.raises(ValueError, match="end_mono_s is missing"):
        build_trace(d)


def test_a_perf_recording_that_ran_past_the_window_keeps_its_slice(tp: TraceProcessor, tmp_path: Path) -> None:
    # Seen on a loaded host: perf started 15 s into a 17 s window and recorded 10 s. On the window's track its
    # slice overlapped the window's and the importer dropped it.
    d = _bundle(tmp_path / "capture")
    (d / "kernel" / "perf-154.result.json").write_text(json.dumps({"pid": 154, "recorded_mono_s": [T0 + 9, T0 + 19]}))
    for t in _processor(tmp_path):
        t.load(write_trace(d).read_bytes())
        errors = t.query("select name, value from stats where severity in ('error', 'data_loss') and value > 0")
        perf = t.query("select ts, dur from slice where name = 'perf record pid 154'")
    assert errors == []
    assert perf == [{"ts": _ns(T0 + 9), "dur": 10_000_000_000}]


def test_a_benchs_trace_has_every_request_on_a_lane_of_its_own_while_in_flight(
    tp: TraceProcessor, tmp_path: Path
) -> None:
    # The real `vllm bench serve` results of the fixtures (c1: one at a time; c4: four in flight), copied into a
    # bench directory as `make bench` leaves it, whose report writes bench/trace.json (serving/bench/trace_events.py).
    from serving.bench import report as bench_report
    from tests.helpers.bench_dirs import make_bench

    d = make_bench(tmp_path, "b", 1000)
    bench_report.write_report(d)
    results = {r: json.loads((d / "runs" / r / "result.json").read_text()) for r in ("c1-m1", "c4-m1")}
    for t in _processor(tmp_path):
        t.load((d / "trace.json").read_bytes())
        errors = t.query("select name, value from stats where severity in ('error', 'data_loss') and value > 0")
        rows = t.query(
            "select s.name, s.ts, s.dur, t.tid from slice s join thread_track tt on s.track_id = tt.id "
            "join thread t using (utid) where s.category = 'request' and s.name like '% request %'"
        )
        lanes = t.query("select count(distinct t.tid) as n from slice s join thread_track tt on s.track_id = tt.id "
                        "join thread t using (utid) where s.name like 'c4-m1 request %'")  # fmt: skip
    assert errors == []
    got = {r["name"]: (r["ts"], r["dur"]) for r in rows}
    for run, res in results.items():
        for i, (start, e2el) in enumerate(zip(res["start_times"], res["latencies"], strict=True)):
            a = round(start * 1e6)
            assert got[f"{run} request {i}"] == (a * 1000, (round((start + e2el) * 1e6) - a) * 1000)
    assert lanes[0]["n"] == 4  # four in flight at once at c4, each on its own lane
