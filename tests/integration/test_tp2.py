"""A multi-rank engine on this machine: profile cpu-tiny-tp2, vLLM's CPU build serving the tiny model with tensor
parallel 2, one rank per CPU (VLLM_CPU_OMP_THREADS_BIND='0|1'). The per-rank code runs for real: the deploy
verifies each rank's CPU binding and the manifest lists it; a capture under load takes stacks and perf of
every worker and pidstat of every thread; a bench counts the server's tokens; the torch profiler runs on every rank.

Two engine starts (issue 48; four before): the profiled engine first, then `make profile` against it, which puts the
normal spec back; every other test reads that engine (its deploy changes nothing). The default deploy is not put
back here: the modules after this one in make test deploy what they need (test_pp2 its own profile, the probes'
modules the default), and conftest's session end puts the default back where a run left another profile.
"""

from __future__ import annotations

import gzip
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from probes.readers import sampler_logs
from tests.helpers.perfetto import TraceProcessor
from tests.integration.conftest import (
    CONTAINER,
    WINDOW_OPEN,
    BackgroundMake,
    MakeResult,
    bundle_dir,
    complete,
    inspect,
    make,
    manifest_of,
    ran_bench,
)

pytestmark = pytest.mark.integration
ENGINE_STARTS = 2

PROFILE = "cpu-tiny-tp2"


@dataclass(frozen=True)
class Profiled:
    container: dict[str, Any]  # the profiled engine's container, inspected
    bench: Path  # a bench of it
    profile: MakeResult  # `make profile` against it


@pytest.fixture(scope="module")
def profiled() -> Profiled:
    """The profiled engine first (PROFILER=torch deploys it, as KEEP=1 leaves it), a bench of it, then `make profile`
    against it, which finds the profiler configured (its deploy changes nothing), profiles, and without KEEP=1 puts
    the normal spec back: the engine every other test here reads."""
    r = make("deploy", f"PROFILE={PROFILE}", "PROFILER=torch")
    assert r.rc == 0, r.output[-3000:]
    c = inspect(CONTAINER)
    assert c is not None
    # Its run ran (ran_bench: a burst stream on two shared cores is flagged, and a bench of none valid says so).
    bench = ran_bench(make("bench", f"PROFILE={PROFILE}", "PROFILER=torch", "WORKLOAD=smoke", "RUNS=1", timeout=900))
    return Profiled(c, bench, make("profile", f"PROFILE={PROFILE}", "REQUESTS=2", timeout=1200))


@pytest.fixture(scope="module")
def tp2_manifest(profiled: Profiled) -> dict[str, Any]:
    """The TP=2 profile's manifest, from a deploy of the normal spec `make profile` put back: it starts nothing. Not
    conftest's `deployed`: another profile, and the manifest is what the tests read."""
    r = make("deploy", f"PROFILE={PROFILE}")
    assert r.rc == 0, r.output[-4000:]
    assert "changed=0" in r.output, r.output[-4000:]
    _, manifest = manifest_of(r)
    return manifest


def test_make_profile_fetches_a_trace_per_rank_and_a_profiled_bench_is_not_compared(
    profiled: Profiled, tp2_bench: Path
) -> None:
    """The profiled engine says so on its container; a bench of it records the profiler and compare refuses it
    beside an unprofiled bench; `make profile` fetched a trace per rank and put the normal spec back."""
    c = profiled.container
    assert c["Config"]["Labels"]["org.refdeploy.profiler"] == "torch"
    assert "--profiler-config" in c["Config"]["Cmd"]
    assert json.loads((profiled.bench / "manifest.json").read_text())["profiler"] == "torch"
    r = make("compare", f"A={tp2_bench}", f"B={profiled.bench}", "VARIABLE=profiler")
    assert r.rc != 0
    assert "refusing to compare: profiler: A=None B='torch'" in " ".join(r.output.split())

    r = profiled.profile
    assert r.rc == 0, r.output[-5000:]
    assert c["Id"] != (inspect(CONTAINER) or {}).get("Id")  # the normal spec is another container
    m = re.search(r"profile: (\S+/profile)/", r.output)
    assert m, r.output[-3000:]
    profile = Path(m.group(1))
    summary = json.loads((profile / "summary.json").read_text())
    assert summary["profiled"] is True
    ranks = {x["rank"]: x for x in summary["ranks"]}
    # One trace per worker rank, and the API server's engine client's.
    assert set(ranks) == {"rank0", "rank1", "async_llm"}, sorted(ranks)
    assert all(len(list(profile.glob(f"{rk}.*.pt.trace.json.gz"))) == 1 for rk in ("rank0", "rank1"))
    for rk in ("rank0", "rank1"):
        assert ranks[rk]["events"] > 1000 and 0 < ranks[rk]["busy_pct"] <= 100
        assert ranks[rk]["top_cpu_ops"] and ranks[rk]["top_cpu_ops"][0]["self_ms"] > 0
    text = (profile / "summary.txt").read_text()
    assert text.startswith("PROFILED:") and "rank1 (rank1." in text
    run = json.loads((profile / "profile-run.json").read_text())
    assert run["ok"] and run["requests"]["sent"] == 2 and run["stop_profile"]["status"] == 200
    _check_merged_trace(profile, run)
    # Without KEEP=1 the engine is back on its normal spec.
    c = inspect(CONTAINER)
    assert c is not None and "org.refdeploy.profiler" not in c["Config"]["Labels"]
    assert "--profiler-config" not in c["Config"]["Cmd"]
    assert c["Config"]["Labels"]["org.refdeploy.profile"] == PROFILE


def test_each_rank_runs_on_its_own_cpu_and_the_manifest_lists_it(tp2_manifest: dict[str, Any]) -> None:
    m = tp2_manifest
    assert m["verified"] is True, [c for c in m["verification"] if not c["ok"]]
    assert m["plan"]["profile"]["name"] == PROFILE
    ranks = m["placement"]["ranks"]
    assert [(r["rank"], r["title"], r["cpus_allowed"], r["expected_cpus"], r["ok"]) for r in ranks] == [
        (0, "VLLM::Worker_TP0", "0", "0", True),
        (1, "VLLM::Worker_TP1", "1", "1", True),
    ]
    assert m["effective_config"]["mismatches"] == []
    # Memory by phase for each rank, from inside each worker (patch 0003): each holds its own KV cache share.
    mem = m["memory_by_phase"]["ranks"]
    assert {k: v["process"] for k, v in mem.items()} == {"0": "Worker_TP0", "1": "Worker_TP1"}
    for v in mem.values():
        assert {"weights_loaded", "kv_cache_allocated", "warmed_up"} <= set(v["phases"]), v["not_logged"]
    tp = next(c for c in m["effective_config"]["checks"] if c["setting"] == "tensor_parallel_size")
    assert (tp["requested"], tp["effective"], tp["status"]) == (2, 2, "ok")
    # The same greedy text as one rank (the first request compiles a kernel with torch inductor: g++ is in the image).
    out = complete("def main(", 16)
    assert out["usage"]["completion_tokens"] == 16 and out["choices"][0]["text"]


def _perf_sampling() -> int:
    """How many perf records here are sampling: perf execs its workload (a `sleep`, or python3 sleeping until a
    moment on CLOCK_MONOTONIC) only once its events are enabled; until then its child is still named perf."""
    n = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            head, tail = stat.read_text().rsplit(")", 1)
            parent = Path("/proc") / tail.split()[1] / "comm"
            n += head.split("(", 1)[1] != "perf" and parent.read_text().strip() == "perf"
        except (OSError, IndexError):
            continue
    return n


@pytest.fixture(scope="module")
def capture(tp2_manifest: dict[str, Any]) -> Path:
    """`make capture SECONDS=8` while requests flow: both ranks busy while perf samples them."""
    run = BackgroundMake("capture", "SECONDS=8")
    run.wait_for(WINDOW_OPEN)
    # No load until both ranks' perf records sample, then 4 s of it (perf samples for 8 s); then stop. perf
    # opens its data file at once but samples only once its events are enabled, and under load that set-up
    # took 5 to 17 s here, or never finished: with both CPUs busy (the two ranks busy-poll under load), perf
    # record did not reach its workload within its 38 s bound. Loading until it sampled kept it from ever
    # sampling (a CI run), and a fixed burst from the window's start ended before it sampled (another).
    deadline = time.monotonic() + 60
    while run.running and _perf_sampling() < 2:
        assert time.monotonic() < deadline, "perf record did not start sampling both ranks within 60 s"
        time.sleep(0.1)
    stop, sent = time.monotonic() + 4, 0
    while run.running and time.monotonic() < stop:
        complete("import os", 32)
        sent += 1
        time.sleep(0.3)
    r = run.result()
    assert r.rc == 0, r.output[-5000:]
    # A CI run sent none: the wait above looked for a `sleep` child after perf's workload became python3.
    assert sent >= 3, f"{sent} request(s) sent while perf sampled both ranks"
    return bundle_dir(r)


@pytest.mark.timing(margin="9 requests completed while perf sampled both ranks, 3 needed (CI-like run 2026-12-04)")
def test_capture_takes_stacks_and_perf_of_every_rank(capture: Path) -> None:
    index = json.loads((capture / "bundle.json").read_text())
    workers = {p["pid"]: p["title"] for p in index["processes"] if p["role"] == "worker"}
    assert sorted(workers.values()) == ["VLLM::Worker_TP0", "VLLM::Worker_TP1"]
    stacks = json.loads((capture / "stacks" / "result.json").read_text())
    assert stacks["status"] == "successful", stacks["reason"]
    assert {d["pid"] for d in stacks["dumps"] if d["status"] == "successful"} >= set(workers)
    assert any(f.startswith("dump-01-worker_TP1-") for f in (d["file"] for d in stacks["dumps"]) if f)
    aggregate = (capture / "stacks" / "aggregate.txt").read_text()
    assert "(worker_TP0)" in aggregate and "(worker_TP1)" in aggregate
    assert index["parts"]["perf"]["status"] == "successful", index["parts"]["perf"]
    perf = {
        json.loads(f.read_text())["pid"]: json.loads(f.read_text())
        for f in (capture / "kernel").glob("perf-*.result.json")
    }
    assert set(perf) == set(workers)
    # The span each sampled, watched (from its workload's exec to its end) and placed on the timeline.
    window = index["window"]
    spans = {p: r["recorded_mono_s"] for p, r in perf.items()}
    assert all(s and window["start_mono_s"] <= s[0] < s[1] <= window["end_mono_s"] for s in spans.values()), spans
    assert all(r["samples"] for r in perf.values()), {p: r["samples"] for p, r in perf.items()}
    wchan = json.loads((capture / "kernel" / "wchan.json").read_text())
    assert {k.split()[1].split("/")[0] for k in wchan["counts"]} >= {"worker_TP0", "worker_TP1"}


@pytest.mark.timing(margin="rank %CPU medians 85 and 83 against > 5 (CI-like run 2026-12-04)")
def test_pidstat_covers_every_thread_of_both_ranks(capture: Path) -> None:
    index = json.loads((capture / "bundle.json").read_text())
    workers = {p["pid"] for p in index["processes"] if p["role"] == "worker"}
    rows = sampler_logs.parse_pidstat(sampler_logs.read_log(capture / "samplers" / "pidstat.log"))
    threads = {pid: {r.tid for r in rows if r.tgid == pid and r.tid is not None} for pid in workers}
    assert all(len(t) > 1 for t in threads.values()), threads  # per thread, not only per process
    busy = {r.tgid for r in rows if r.tid is None and r.tgid in workers and r.values.get("%CPU", 0) > 5}
    assert busy == workers  # both ranks worked while the requests flowed


@pytest.fixture(scope="module")
def tp2_bench(tp2_manifest: dict[str, Any]) -> Path:
    # Its runs' flags are judged below: two shared cores may deliver every stream in a burst (nothing valid).
    return ran_bench(make("bench", f"PROFILE={PROFILE}", "WORKLOAD=smoke", "RUNS=2"))


def test_a_bench_of_the_tp2_engine_counts_the_servers_tokens(tp2_bench: Path) -> None:
    """One bench of the TP=2 engine: every measured run's tokens are the server's. Comparing two such benches
    was dropped (issue 27): it exercised the same compare as the default engine's benches in test_bench.py, and
    its rendering of left-out runs and points not compared is tests/unit/bench/test_compare.py's."""
    s = json.loads((tp2_bench / "summary.json").read_text())
    measured = [r for r in s["runs"] if r["phase"] == "measured"]
    assert s["status"] == ("ok" if any(r["valid"] for r in measured) else "invalid")
    assert s["manifest"]["profile"]["name"] == PROFILE
    # Valid, but for a stream that reached the client in one burst (2 shared cores), which compare leaves out.
    assert measured and all(r["valid"] or all(f.startswith("buffered stream:") for f in r["flags"])
                            for r in measured), [r["flags"] for r in measured]  # fmt: skip
    assert all(r["server"]["generation_tokens"] == r["output_tokens"] for r in measured)
    assert inspect(CONTAINER)["Config"]["Labels"]["org.refdeploy.profile"] == PROFILE  # type: ignore[index]
    # The inventory's profile is not what runs: bench says so, and benches nothing.
    r = make("bench", "WORKLOAD=smoke")
    assert r.rc != 0 and "runs profile cpu-tiny-tp2, not cpu-tiny" in " ".join(r.output.split())


def _check_merged_trace(profile: Path, run: dict[str, Any]) -> None:
    """trace.json: both ranks' profiler events on CLOCK_MONOTONIC, inside the profiler's window, beside the requests
    that ran under it; Perfetto imports it and drops no slice that it would not drop from the ranks' own traces."""
    trace = json.loads((profile / "trace.json").read_text())
    assert set(trace["otherData"]["merged"]) == {"rank0", "rank1", "async_llm"}
    assert trace["otherData"]["clock_alignment"]["start_stop_disagree_ms"] < 50
    start_us = run["start_profile"]["mono_s"] * 1e6
    stop_us = (run["stop_profile"]["mono_s"] + run["stop_profile"]["seconds"]) * 1e6
    workers = {
        e["pid"]
        for e in trace["traceEvents"]
        if e.get("ph") == "M" and str((e.get("args") or {}).get("name", "")).startswith("VLLM::Worker_TP")
    }
    assert len(workers) == 2, workers
    ops = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("pid") in workers]
    assert ops and all(start_us <= e["ts"] and e["ts"] + e["dur"] <= stop_us for e in ops)
    requests = [e for e in trace["traceEvents"] if e.get("cat") == "request" and e["name"].startswith("request ")]
    assert len(requests) == 2 and all(start_us <= e["ts"] <= stop_us for e in requests)
    merged = _import_errors(profile.parent, profile / "trace.json")
    # Each rank's own trace alone: Kineto writes a few overlapping siblings itself (14 in a rank here).
    own: dict[str, int] = {}
    for f in sorted(profile.glob("*.pt.trace.json.gz")):
        for name, value in _import_errors(profile.parent, f).items():
            own[name] = own.get(name, 0) + value
    assert merged == own, (merged, own)


def _import_errors(scratch: Path, trace: Path) -> dict[str, int]:
    data = trace.read_bytes()
    with TraceProcessor.start(scratch / "tp-stderr.txt") as tp:
        tp.load(gzip.decompress(data) if trace.suffix == ".gz" else data)
        rows = tp.query("select name, value from stats where severity in ('error', 'data_loss') and value > 0")
    return {str(r["name"]): int(r["value"]) for r in rows}
