"""`make capture`, `make probe` and the samplers sidecar against the real CPU deployment.

Runs after test_deploy.py (which ends undeployed): the first test checks the refusal with no vLLM running,
then the module deploys and captures under a real burst of requests.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from probes.readers import sampler_logs
from serving.diagnose.model import Diagnosis
from serving.evidence.plots import PANEL_COLOURS
from tests.helpers.machine import perf_refused_here
from tests.helpers.perfetto import TraceProcessor, require_node
from tests.helpers.screenshots import MIN_PIXELS, pixels_of, read_png, screenshot
from tests.integration.conftest import (
    CONTAINER,
    REPO,
    WINDOW_OPEN,
    BackgroundMake,
    complete,
    docker,
    inspect,
    make,
    probe_runs,
)

pytestmark = pytest.mark.integration
ENGINE_STARTS = 0
# What probe-runs/ held when this lane collected the module: an earlier run's kept directory is not this module's.
KEPT_BEFORE = probe_runs()

SIDECAR = "refdeploy-vllm-samplers"
REQUESTS = 12
# Three at a time under the capture's perf, py-spy and wchan, about 10 ms a token here: ~2.7 s a request, which
# the running gauge, sampled each second, sees. With 64 tokens (0.1 s) a run once saw none, and the queue plot
# had nothing to draw; with 512 (5.3 s) only one request a sender fitted the window.
TOKENS = 256


def _bundle_dir(output: str) -> Path:
    m = re.search(r"bundle: (\S+?)/?['\"]?$", output, re.M)
    assert m, f"no 'bundle:' line in:\n{output[-3000:]}"
    path = Path(m.group(1))
    assert path.is_relative_to(REPO / "runs" / "localhost"), path
    return path


def _complete(max_tokens: int) -> None:
    assert complete("def main():", max_tokens)["usage"]["completion_tokens"] == max_tokens


def test_the_deploy_starts_the_samplers_sidecar_in_vllms_pid_namespace(deployed: None) -> None:
    c = inspect(SIDECAR)
    assert c is not None and c["State"]["Status"] == "running"
    serving = inspect("refdeploy-vllm")
    assert serving is not None
    hc = c["HostConfig"]
    assert hc["PidMode"] == "container:refdeploy-vllm" or hc["PidMode"] == f"container:{serving['Id']}"
    assert hc["NetworkMode"] == "none"
    assert hc["CapDrop"] == ["ALL"] and not hc["CapAdd"]
    assert hc["ReadonlyRootfs"] is True
    assert c["Config"]["Labels"]["org.refdeploy.target-id"] == serving["Id"]
    # The probe image's user, not root; its log directory that user's, of the runtime's group, closed to others.
    assert c["Config"]["User"] == "10003:10003"
    log_dir = Path("/var/lib/refdeploy/samplers/refdeploy-vllm")
    st = log_dir.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (10003, 10001, 0o750)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (log_dir / "pidstat.log").exists():
        time.sleep(1)
    time.sleep(3)
    rows = sampler_logs.parse_pidstat(sampler_logs.read_log(log_dir / "pidstat.log", include_rotated=False))
    # Only vLLM's processes (API server PID 1, EngineCore, Worker) and their threads: never the whole host.
    tgids = {r.tgid for r in rows}
    assert 1 in tgids and len(tgids) == 3, tgids
    # pidstat prints the 15-character comm of each process.
    assert {r.command for r in rows if r.tid is None} == {"vllm", "VLLM::EngineCor", "VLLM::Worker"}
    vm = sampler_logs.parse_vmstat(sampler_logs.read_log(log_dir / "vmstat.log"))
    assert len(vm["us"]) >= 2
    # Written by the sidecar's user: every log and samplers.json, a root sidecar's earlier files made over too.
    assert {(f.name, f.stat().st_uid) for f in log_dir.iterdir()} == {(f.name, 10003) for f in log_dir.iterdir()}


@dataclass
class Capture:
    bundle: Path
    sent: int  # requests sent, each answered before the window closed


@pytest.fixture(scope="module")
def capture(deployed: None) -> Iterator[Capture]:
    """`make capture SECONDS=20` with up to REQUESTS requests sent once the window has opened.

    A sender starts a request only if it can finish inside the window: under perf, py-spy and wchan a request took
    up to 5 s here, not 1 s, and a CI run counted 9 of 12 because 3 were still decoding when the window closed."""
    run = BackgroundMake("capture", "SECONDS=20")
    run.wait_for(WINDOW_OPEN)
    window_end = time.monotonic() + 20 - 2  # the window opened a little before its samplers wrote; 2 s of margin
    time.sleep(1)
    sent: list[float] = []  # each request's duration, in seconds
    late: list[float] = []  # by how much a request outlived the window (a thread's assert would only warn)
    lock = threading.Lock()

    # Spread over the window, so the per-second latency series has points to draw.
    def send(n: int) -> None:
        for _ in range(n):
            with lock:
                longest = max(sent, default=1.0)
            if time.monotonic() + 2 * longest > window_end:
                return
            t0 = time.monotonic()
            _complete(TOKENS)
            done = time.monotonic()
            with lock:
                sent.append(done - t0)
                if done > window_end + 2:
                    late.append(done - window_end - 2)
            time.sleep(0.5)

    senders = [threading.Thread(target=send, args=(REQUESTS // 3,)) for _ in range(3)]
    for s in senders:
        s.start()
    for s in senders:
        s.join()
    r = run.result()
    assert r.rc == 0, r.output[-5000:]
    # Fewer than two rounds of three would not be a burst worth counting.
    assert len(sent) >= 6, f"only {len(sent)} requests fitted the window (durations {sent})"
    assert not late, f"requests ended {late} s after the window closed: the server's delta cannot count them"
    yield Capture(_bundle_dir(r.output), len(sent))


@pytest.mark.timing(
    margin=(
        "12 requests fitted the 20 s window (the cap) against >= 6; KV in use in 3 of 22 scrapes, 1 needed "
        "(CI-like run 2026-12-04)"
    )
)
def test_capture_metrics_delta_counts_exactly_the_requests_sent(capture: Capture) -> None:
    bundle = capture.bundle
    delta = json.loads((bundle / "metrics" / "delta.json").read_text())
    success = [c for c in delta["counters"] if c["name"] == "vllm:request_success_total"]
    assert sum(c["delta"] for c in success) == capture.sent
    gen = [c for c in delta["counters"] if c["name"] == "vllm:generation_tokens_total"]
    assert sum(c["delta"] for c in gen) == capture.sent * TOKENS
    timeline = json.loads((bundle / "timeline.json").read_text())
    assert timeline["summary"]["requests"] == capture.sent
    # KV-cache usage over the window's scrapes: three senders kept requests decoding through most of the window,
    # so some scrape saw the cache hold their tokens (a tiny share of 1 GiB: hundredths of a percent here).
    kv_mean, kv_max = timeline["summary"]["kv_cache_usage_mean_pct"], timeline["summary"]["kv_cache_usage_max_pct"]
    assert 0.0 < kv_max <= 100.0 and 0.0 < kv_mean <= kv_max, (kv_mean, kv_max)
    # ... and plotted: its own panel, a point per scrape, on the same percent scale.
    cache = timeline["panels"]["cache"]
    assert cache["status"] == "successful" and cache["unit"] == "%"
    kv = cache["series"]["KV cache used"]
    assert len(kv) >= 3 and max(v for _t, v in kv) == pytest.approx(kv_max, abs=1e-6)
    assert "requests" in (bundle / "summary.txt").read_text()


def test_capture_has_stacks_for_every_vllm_process(capture: Capture) -> None:
    bundle = capture.bundle
    index = json.loads((bundle / "bundle.json").read_text())
    roles = sorted(p["role"] for p in index["processes"])
    assert roles == ["api_server", "engine_core", "worker"]
    res = json.loads((bundle / "stacks" / "result.json").read_text())
    assert res["status"] == "successful", res["reason"]
    dumped = {d["pid"] for d in res["dumps"] if d["status"] == "successful"}
    assert dumped == {p["pid"] for p in index["processes"]}
    for d in res["dumps"]:
        if d["status"] != "successful":
            # py-spy's --nonblocking read of a running process can fail ("Bad address (os error 14)" for a busy
            # worker, in a CI-like run): the dump says so, keeps py-spy's stderr, and counts no threads.
            stderr = bundle / "stacks" / d["file"].replace(".json", ".stderr.txt")
            assert d["reason"] and d["threads"] == 0 and stderr.read_text().strip(), d
            continue
        threads = json.loads((bundle / "stacks" / d["file"]).read_text())
        assert any(t["thread_name"] == "MainThread" for t in threads)
    agg = (bundle / "stacks" / "aggregate.txt").read_text()
    assert "(engine_core)" in agg and "(worker)" in agg and "(api_server)" in agg


def test_capture_parts_and_one_clock(capture: Capture) -> None:
    bundle = capture.bundle
    index = json.loads((bundle / "bundle.json").read_text())
    parts = index["parts"]
    for name in ("samplers", "metrics", "stacks", "wchan", "hoststate"):
        assert parts[name]["status"] == "successful", (name, parts[name])
    # perf: where this machine's kernel allows it (read from the machine), it records; where it refuses, it says why.
    refused = perf_refused_here()
    if refused:
        assert parts["perf"]["status"] == "skipped" and "perf_event_paranoid" in parts["perf"]["reason"], refused
    else:
        assert parts["perf"]["status"] == "successful", parts["perf"]
    assert parts["record"]["status"] == "skipped"
    window = index["window"]
    lines = sampler_logs.read_log(bundle / "samplers" / "vmstat.log")
    assert lines, "vmstat wrote nothing"
    assert all(window["start_mono_s"] - 1 <= ln.mono_s <= window["end_mono_s"] + 1 for ln in lines)
    wchan = json.loads((bundle / "kernel" / "wchan.json").read_text())
    assert any(k.split()[1].startswith("worker/") for k in wchan["counts"])
    # Each thread's waits are timestamped on the same clock, inside the window.
    worker = [v for k, v in wchan["transitions"].items() if k.split()[1].startswith("worker/")]
    assert worker and wchan["clock"] == "CLOCK_MONOTONIC"
    assert all(window["start_mono_s"] - 1 <= t <= window["end_mono_s"] + 1 for changes in worker for t, _ in changes)


def test_capture_reads_the_real_containers_cgroup_and_limits(capture: Capture) -> None:
    bundle = capture.bundle
    serving = inspect("refdeploy-vllm")
    assert serving is not None
    state = json.loads((bundle / "host-state" / "after" / "host-state.json").read_text())
    text = json.dumps(state)
    assert serving["Id"] in text  # the container's own cgroup, by its ID
    delta = json.loads((bundle / "host-state" / "cgroup-delta.json").read_text())
    inner = delta["levels"][0]
    assert serving["Id"] in inner["path"]
    assert inner["cpu_usage_s"] > 0
    assert inner["memory_usage_after_bytes"] > 100 * 2**20
    limits_files = list((bundle / "host-state" / "after" / "raw" / "proc").glob("*/limits"))
    assert limits_files
    assert any(re.search(r"Max open files\s+16384\s+16384", f.read_text()) for f in limits_files)
    memory_limits = list((bundle / "host-state" / "after" / "raw").rglob("memory.limit_in_bytes")) + list(
        (bundle / "host-state" / "after" / "raw").rglob("memory.max")
    )
    assert any(f.read_text().strip() == str(8 * 2**30) for f in memory_limits)


def test_capture_timeline_page_shows_its_plots(capture: Capture, tmp_path: Path) -> None:
    bundle = capture.bundle
    png = tmp_path / "timeline.png"
    screenshot(bundle / "timeline.html", png, tmp_path / "chromium-profile")
    counts = read_png(png.read_bytes()).rgb_counts()
    # GPU is skipped on this host (no nvidia-smi): its panel says why instead of drawing.
    html = (bundle / "timeline.html").read_text()
    assert "nvidia-smi not found" in html
    # A panel without lines shows its colours only in the legend swatches (28 px each); a drawn series has
    # hundreds. (TTFT, the latency panel's first series, is a few ms beside a ~1 s e2e: drawn on the axis.)
    for panel in ("cpu", "io", "latency", "queue", "cache"):
        drawn = max(pixels_of(counts, colour) for colour in PANEL_COLOURS[panel])
        assert drawn >= 100, f"the {panel} plot is missing"


@pytest.fixture(scope="module")
def workload_capture(deployed: None) -> tuple[Path, Any]:
    """`make capture SECONDS=15 WORKLOAD=smoke`: the capture sends the smoke workload's requests itself."""
    r = make("capture", "SECONDS=15", "WORKLOAD=smoke")
    assert r.rc == 0, r.output[-5000:]
    return _bundle_dir(r.output), r


@pytest.mark.timing(margin="the worker thread at 86% of a CPU against the rule's 75 (the recorded capture, 2026-12-05)")
def test_a_workload_captures_diagnosis_finds_decode_bound_by_its_worker_thread(
    workload_capture: tuple[Path, Any],
) -> None:
    """The capture diagnoses itself at its end (serving/diagnose/): on this healthy light run, the one true finding
    is the CPU build's, decode bound by its worker thread's CPU; every other rule rules its cause out."""
    bundle, r = workload_capture
    d = Diagnosis.model_validate_json((bundle / "diagnosis.json").read_text())
    said = "\n".join(f"{f.verdict}: {f.rule}: {f.title}" for f in d.findings)
    assert [f.rule for f in d.findings if f.verdict == "consistent with"] == ["interval", "threads"], said
    assert d.slow_interval.startswith("decode"), d.slow_interval
    # The bundle records the serving container's labels (the capture role's reading): no profiler, no stand-in.
    assert json.loads((bundle / "bundle.json").read_text())["engine"] == {"profiler": "", "stand_in": ""}
    [voiding] = [f for f in d.findings if f.rule == "voiding"]
    assert voiding.verdict == "rules out" and voiding.title == "nothing voids the figures: no profiler, no stand-in"
    assert "diagnosis (" in r.output and "execution-bound decode" in r.output
    # The page leads with it: before the summary table and the panels.
    page = (bundle / "timeline.html").read_text()
    assert 0 < page.index('<section id="diagnosis">') < page.index("<h2>Summary</h2>")


def test_a_workload_capture_holds_every_request_it_sent(workload_capture: tuple[Path, Any]) -> None:
    bundle, _ = workload_capture
    result = json.loads((bundle / "requests" / "requests.json").read_text())
    rows = [json.loads(line) for line in (bundle / "requests" / "requests.jsonl").read_text().splitlines()]
    assert result["spec"]["workload"] == "smoke" and result["spec"]["output_len"] == 32
    assert result["sent"] == result["claimed"] == len(rows) > 0
    assert result["completed"] == len(rows) and result["failed"] == 0
    # The server counted exactly those: nothing else sent a request in the window, and the closing scrape comes
    # after the last of them ended.
    delta = json.loads((bundle / "metrics" / "delta.json").read_text())
    success = sum(c["delta"] for c in delta["counters"] if c["name"] == "vllm:request_success_total")
    assert success == len(rows)
    index = json.loads((bundle / "bundle.json").read_text())
    window = index["window"]
    assert index["requests"]["sent"] == len(rows)
    for r in rows:
        # Sent inside the window; every chunk streamed back on the same clock, in order.
        assert window["start_mono_s"] <= r["t0_mono_s"] <= window["end_mono_s"]
        # A chunk per token, but for a server whose API process fell behind: it then puts several in one chunk
        # (a CI run: 32 tokens in 31 chunks).
        assert r["completion_tokens"] == 32 and 1 <= len(r["token_mono_s"]) <= 32
        assert r["t0_mono_s"] < r["first_token_mono_s"] == r["token_mono_s"][0] <= r["token_mono_s"][-1]
        assert r["token_mono_s"] == sorted(r["token_mono_s"]) and r["token_mono_s"][-1] <= r["end_mono_s"]
    timeline = json.loads((bundle / "timeline.json").read_text())
    assert timeline["summary"]["capture_requests_sent"] == len(rows)
    assert len(timeline["panels"]["requests"]["spans"]) == len(rows)
    assert "capture_requests_sent" in (bundle / "summary.txt").read_text()


@pytest.mark.timing(
    margin=(
        "a 15 s window against the 10 s memory-row cadence (1.5 at worst): rows landed at +0.10 and +10.10 s "
        "(CI-like run 2026-12-04)"
    )
)
def test_a_workload_capture_keeps_the_workers_memory_while_decoding(workload_capture: tuple[Path, Any]) -> None:
    """The worker logs its memory while it decodes (patch 0003, every 10 s): a 15 s window of requests holds a
    row, which the bundle keeps, the output shows and the trace draws on the worker's process."""
    bundle, r = workload_capture
    doc = json.loads((bundle / "memory-phases.json").read_text())
    window = json.loads((bundle / "bundle.json").read_text())["window"]
    kept = doc["at_decode"]["ranks"]["0"]
    assert kept["in_window"] and window["start_mono_s"] <= kept["mono"] <= window["end_mono_s"], kept
    assert kept["phase"] == "decode" and kept["process"] == "Worker" and kept["rss"] > kept["pss_file"] > 0
    assert "memory at decode, rank 0: rss " in r.output and "(logged in the window)" in r.output
    trace = json.loads((bundle / "trace.json").read_text())
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == "memory GiB (patch 0003)"]
    assert counters and all(e["pid"] == kept["pid"] for e in counters), counters


def test_each_request_is_a_span_in_the_trace_as_perfetto_reads_it(
    workload_capture: tuple[Path, Any], tmp_path: Path
) -> None:
    require_node()
    bundle, _ = workload_capture
    rows = [json.loads(line) for line in (bundle / "requests" / "requests.jsonl").read_text().splitlines()]
    with TraceProcessor.start(tmp_path / "trace-processor.stderr") as tp:
        tp.load((bundle / "trace.json").read_bytes())
        errors = tp.query("select name, value from stats where severity in ('error', 'data_loss') and value > 0")
        spans = tp.query("select name, ts, dur from slice where category = 'request' and name like 'request %'")
        firsts = tp.query("select count(*) as n from slice where name = 'first token'")
        threads = tp.query("select count(distinct t.tid) as n from slice s join thread_track tt on s.track_id = tt.id "
                           "join thread t using (utid) where s.category = 'wchan'")  # fmt: skip
    assert errors == []
    got = {s["name"]: (s["ts"], s["dur"]) for s in spans}
    assert got == {
        f"request {r['id']}": (
            round(r["t0_mono_s"] * 1e6) * 1000,
            (round(r["end_mono_s"] * 1e6) - round(r["t0_mono_s"] * 1e6)) * 1000,
        )
        for r in rows
    }
    assert firsts[0]["n"] == len(rows)
    assert threads[0]["n"] >= 3  # the API server's, the EngineCore's and the worker's threads at least


def test_each_request_is_a_bar_in_the_timeline_page(workload_capture: tuple[Path, Any], tmp_path: Path) -> None:
    bundle, _ = workload_capture
    n = json.loads((bundle / "requests" / "requests.json").read_text())["sent"]
    html = (bundle / "timeline.html").read_text()
    assert f'data-spans="{n}"' in html
    assert all(f'id="requests-bar-{i}"' in html for i in range(n))
    png = tmp_path / "timeline.png"
    screenshot(bundle / "timeline.html", png, tmp_path / "chromium-profile")
    counts = read_png(png.read_bytes()).rgb_counts()
    bar, first, _ = PANEL_COLOURS["requests"]
    assert pixels_of(counts, bar) + pixels_of(counts, first) >= MIN_PIXELS


def test_make_probe_runs_one_part(deployed: None) -> None:
    r = make("probe", "PROBE=stacks", "SECONDS=3")
    assert r.rc == 0, r.output[-4000:]
    bundle = _bundle_dir(r.output)
    assert bundle.name == "stacks"
    index = json.loads((bundle / "bundle.json").read_text())
    assert index["requested_parts"] == ["stacks"]
    assert index["parts"]["stacks"]["status"] == "successful"
    assert index["parts"]["samplers"]["status"] == "skipped"
    assert not (bundle / "samplers").exists()


def test_the_page_cache_reading_sees_an_evicted_file(deployed: None) -> None:
    """mincore(2) reports every page resident to a reader that neither owns the file nor holds FOWNER: before the
    capture container had FOWNER, this read 100% right after the eviction."""
    weights = Path("/var/lib/refdeploy/models/tiny-llama/model.safetensors")
    fd = os.open(weights, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    r = make("probe", "PROBE=hoststate", "SECONDS=2")
    assert r.rc == 0, r.output[-4000:]
    state = json.loads((_bundle_dir(r.output) / "host-state" / "before" / "host-state.json").read_text())
    (reading,) = state["page_cache"]["files"]
    assert reading["path"] == str(weights)
    assert reading["resident_pct"] < 10, reading


def test_make_probe_rejects_an_unknown_probe(deployed: None) -> None:
    # The operator's one line, before Ansible starts (make echoes no command line before it: no playbook ran).
    r = make("probe", "PROBE=flamegraph")
    assert r.rc == 2 and r.output.strip().splitlines()[0] == (
        "make probe: PROBE=flamegraph is not a probe: choose io, samplers, metrics, stacks, wchan, perf, hoststate "
        "or record"
    ), r.output[-2000:]
    assert "ansible-playbook" not in r.output
    r = make("probe")
    assert r.rc == 2
    assert "make probe: set PROBE=" in r.output


def test_switching_the_sidecar_off_removes_it_and_on_brings_it_back(deployed: None, tmp_path: Path) -> None:
    import yaml

    profile = yaml.safe_load((REPO / "serving" / "profiles" / "cpu-tiny.yaml").read_text())
    profile["probes"] = {"sidecar_samplers": []}
    off = tmp_path / "no-sidecar.yaml"
    off.write_text(yaml.safe_dump(profile))
    serving_id = inspect("refdeploy-vllm")["Id"]  # type: ignore[index]
    r = make("deploy", f"PROFILE={off}")
    assert r.rc == 0, r.output[-4000:]
    assert inspect(SIDECAR) is None
    assert inspect("refdeploy-vllm")["Id"] == serving_id  # type: ignore[index]  # vLLM untouched
    r = make("deploy")
    assert r.rc == 0, r.output[-4000:]
    assert inspect(SIDECAR)["State"]["Status"] == "running"  # type: ignore[index]
    r = make("deploy")
    assert r.recap_changed == 0


def test_no_probe_container_is_left_behind(deployed: None) -> None:
    names = docker("ps", "-a", "--format", "{{.Names}}").split()
    assert not [n for n in names if n.startswith(f"{CONTAINER}-probe")]
    # The scratch output on the host is removed once fetched.
    assert probe_runs() == KEPT_BEFORE


def test_make_probe_record_writes_a_speedscope_profile_of_every_process(deployed: None) -> None:
    r = make("probe", "PROBE=record", "SECONDS=4")
    assert r.rc == 0, r.output[-4000:]
    bundle = _bundle_dir(r.output)
    index = json.loads((bundle / "bundle.json").read_text())
    part = index["parts"]["record"]
    assert part["status"] == "successful", part
    profile = json.loads((bundle / part["files"][0]).read_text())
    assert "speedscope" in profile["$schema"]
    # --subprocesses from the API server: one profile per process recorded (API server, EngineCore, Worker).
    assert len(profile["profiles"]) >= 3, [p["name"] for p in profile["profiles"]]
