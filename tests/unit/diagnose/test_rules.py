"""Each rule at its thresholds, on evidence built in the test (serving/diagnose/evidence.py's own types): the side
that fires and the side that does not, so every test can fail both ways. The runs that made real evidence are
test_diagnose_runs.py's (recorded) and tests/integration/test_diagnose_faults.py's (faults induced for real)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from serving.diagnose.engine import diagnose
from serving.diagnose.evidence import Evidence, Src, ThreadCpu
from serving.diagnose.rules import (
    CannotRun,
    cgroup,
    contention,
    disagreement,
    kv,
    numa,
    overload,
    page_cache,
    threads,
)


def _ev(**kw: Any) -> Evidence:
    ev = Evidence(run_dir=Path("/r"), kind="capture", window_s=20.0, windows=[(100.0, 120.0)])
    ev.client = {
        "ttft_p50_ms": Src(20.0, "requests/requests.json"),
        "tpot_p50_ms": Src(5.0, "requests/requests.json"),
        "output_len": Src(33, "requests/requests.json"),
        "completed": Src(80, "requests/requests.json"),
    }
    ev.server = {"ttft_ms": Src(19.0, "metrics/delta.json"), "tpot_ms": Src(5.0, "metrics/delta.json"),
                 "queue_ms": Src(0.1, "metrics/delta.json"), "generation_tokens": Src(2640.0, "metrics/delta.json"),
                 "requests_finished": Src(80.0, "metrics/delta.json")}  # fmt: skip
    for k, v in kw.items():
        setattr(ev, k, v)
    return ev


def _level(path: str, **kw: Any) -> dict[str, Any]:
    base = {"path": path, "cpu_quota_cpus": None, "nr_periods": 200, "nr_throttled": 0, "throttled_s": 0.0,
            "throttled_share": 0.0, "cpu_usage_s": 30.0, "memory_events_increase": {}, "oom_kill_increase": 0,
            "memory_limit_bytes": None, "memory_usage_after_bytes": 1, "memory_some_stall_s": 0.0,
            "cpu_some_stall_s": 0.0}  # fmt: skip
    return {**base, **kw}


def test_decode_is_the_slow_interval_when_n_minus_one_tpots_outweigh_ttft() -> None:
    d = diagnose(_ev())
    assert d.slow_interval == "decode (89% of each request)"  # 32 x 5 ms against 20 ms
    ev = _ev()
    ev.client["ttft_p50_ms"] = Src(400.0, "requests/requests.json")
    ev.server.update(ttft_ms=Src(400.0, "m"), queue_ms=Src(300.0, "m"))
    assert diagnose(ev).slow_interval == "queueing (54% of each request)"  # 400/(400+160) x 300/400


def test_a_quota_names_its_level_the_containers_or_an_ancestors() -> None:
    own = _ev(cgroup=Src([_level("/docker/abc", nr_throttled=60, throttled_s=4.1, throttled_share=0.3,
                                 cpu_quota_cpus=0.5), _level("/docker")], "host-state/cgroup-delta.json"))  # fmt: skip
    [f] = cgroup.run(own)
    assert f.verdict == "consistent with" and "the container's own cgroup /docker/abc (0.5 CPUs)" in f.title
    assert f.explains == 0.3
    slice_ = _level("/refdeploy.slice", nr_throttled=40, throttled_s=2.0, throttled_share=0.2)
    up = _ev(cgroup=Src([_level("/docker/abc"), slice_], "host-state/cgroup-delta.json"))
    [f] = cgroup.run(up)
    assert "the ancestor cgroup /refdeploy.slice" in f.title
    below = _ev(cgroup=Src([_level("/docker/abc", nr_throttled=8, throttled_s=0.1, throttled_share=0.04)], "c"))
    assert [f.verdict for f in cgroup.run(below)] == ["rules out"]
    with pytest.raises(CannotRun):
        cgroup.run(_ev())


def test_memory_events_in_the_window_are_a_limit_reached() -> None:
    ev = _ev(cgroup=Src([_level("/docker/abc", memory_events_increase={"max": 3, "high": 0, "low": 5},
                                memory_limit_bytes=2 << 30, memory_some_stall_s=2.0)], "c"))  # fmt: skip
    [f] = cgroup.run(ev)
    assert f.title == "the memory limit of the container's own cgroup /docker/abc was reached in the window"
    assert f.symptom.startswith("memory.events max +3; memory stalled 2.000 s of the 20.0 s window (10.00%)")
    assert f.explains == 0.1
    # An OOM kill counted by v2's memory.events names itself in the title, as v1's oom_control count does.
    ev.cgroup.value[0]["memory_events_increase"] = {"oom_kill": 1}
    [f] = cgroup.run(ev)
    assert f.title.endswith("was reached in the window: a process was OOM-killed"), f.title


def test_a_v1_failcnt_rise_is_a_limit_reached_that_costs_its_stall_share() -> None:
    """The figures of this machine's cgroup v1 level under a limit 4 MiB above its anonymous memory (RECORDED,
    runs/localhost/20261206T012409Z/capture/host-state/cgroup-delta.json): hit 256 times, 8.5 ms of stall."""
    lv = _level("/docker/44ae92", memory_failcnt_increase=256, memory_limit_bytes=2447519744,
                memory_usage_after_bytes=2444259328, memory_some_stall_s=0.008475)  # fmt: skip
    ev = _ev(cgroup=Src([lv], "host-state/cgroup-delta.json"))
    ev.window_s = 15.0
    [f] = cgroup.run(ev)
    assert f.verdict == "consistent with" and f.explains == 0.001
    assert f.symptom == (
        "memory.failcnt +256; memory stalled 0.008 s of the 15.0 s window (0.06%); "
        "at the end 2.28 GiB of a 2.28 GiB limit"
    )
    lv["memory_some_stall_s"] = None  # no pressure reading (cgroup v1 without the unified hierarchy's files)
    [f] = cgroup.run(ev)
    assert f.explains == 0.0 and "no memory pressure reading: what it cost cannot be told" in f.symptom
    lv["memory_failcnt_increase"] = 0
    assert [f.verdict for f in cgroup.run(ev)] == ["rules out"]


def test_a_thread_busy_at_the_threshold_is_execution_and_below_it_waiting() -> None:
    rows = [ThreadCpu(7, 7, "VLLM::Worker", "worker", 75.0, 80.0, 20), ThreadCpu(1, 1, "vllm", "api_server", 9, 12, 20)]
    ev = _ev(threads=Src(rows, "samplers/pidstat.log"), cpuset_cpus=Src(4, "h"))
    [f] = threads.run(ev)
    assert (
        f.verdict == "consistent with"
        and f.title == "execution-bound decode: the worker's thread VLLM::Worker runs 75% of a CPU"
    )
    rows[0] = ThreadCpu(7, 7, "VLLM::Worker", "worker", 74.0, 99.0, 20)
    ev.wchan = Src({"rounds": 10, "counts": {"7 worker/VLLM::Worker": {"folio_wait_bit_common": 8, "running": 2}}}, "k")
    [f] = threads.run(ev)
    assert f.verdict == "rules out" and "page I/O 8" in f.title


def test_others_using_a_quarter_of_a_busy_host_is_contention() -> None:
    vm = {"us": [(101.0, 80.0), (110.0, 81.0)], "sy": [(101.0, 15.0), (110.0, 14.0)], "st": [(101.0, 0.0)]}
    # 4 CPUs 95% busy = 3.8 CPUs; the container 40 s over a 20 s span = 2.0: others 1.8 (45%).
    ev = _ev(vmstat=Src(vm, "samplers/vmstat.log"), host_cpus=4, cgroup_span=(100.0, 120.0),
             cgroup=Src([_level("/docker/abc", cpu_usage_s=40.0)], "c"))  # fmt: skip
    [f] = contention.run(ev)
    assert f.verdict == "consistent with" and "others used 1.8 of the host's 4 CPUs" in f.title
    ev.cgroup = Src([_level("/docker/abc", cpu_usage_s=60.0)], "c")  # 3.0 CPUs: others 0.8 (20%)
    assert [f.verdict for f in contention.run(ev)] == ["rules out"]


def test_waiting_requests_and_queue_time_are_overload_and_neither_alone_is() -> None:
    ev = _ev(gauges={"waiting": Src([0, 2, 3, 4, 4, 5, 0, 0], "metrics/gauges.json")})
    ev.server.update(queue_ms=Src(12.0, "m"), ttft_ms=Src(20.0, "m"))
    [f] = overload.run(ev)
    assert f.verdict == "consistent with" and "requests waited in 62% of the samples (at most 5)" in f.symptom
    assert f.next_steps[0].endswith("then make compare VARIABLE=workload.concurrency")  # closed-loop clients
    ev.server["queue_ms"] = Src(5.0, "m")  # 25% of TTFT
    assert [f.verdict for f in overload.run(ev)] == ["rules out"]
    short = _ev(gauges={"waiting": Src([0, 0], "g")}, load={"achieved_over_requested": Src(0.8, "summary.json")})
    assert [f.verdict for f in overload.run(short)] == ["consistent with"]


def test_preemptions_are_kv_pressure() -> None:
    ev = _ev(gauges={"kv_usage": Src([0.2, 0.5], "g")})
    ev.server["preemptions"] = Src(20.0, "metrics/delta.json")
    [f] = kv.run(ev)
    assert f.verdict == "consistent with" and f.explains == 0.25 and f.symptom.startswith("20 preemptions for 80")
    ev.server["preemptions"] = Src(0.0, "m")
    assert [f.verdict for f in kv.run(ev)] == ["rules out"]
    ev.gauges["kv_usage"] = Src([0.5, 0.95], "g")
    assert [f.verdict for f in kv.run(ev)] == ["consistent with"]


def test_a_buffered_stream_is_a_disagreement() -> None:
    ev = _ev()
    ev.client["tpot_p50_ms"] = Src(2.0, "r")  # under half the server's 5 ms
    [f] = disagreement.run(ev)
    assert f.verdict == "consistent with" and "buffered stream" in f.symptom
    assert [f.verdict for f in disagreement.run(_ev())] == ["rules out"]


def test_page_io_waits_with_io_wait_are_page_cache_misses() -> None:
    counts = {"7 worker/VLLM::Worker": {"folio_wait_bit_common": 3, "running": 27}}
    ev = _ev(wchan=Src({"rounds": 30, "counts": counts}, "kernel/wchan.json"),
             vmstat=Src({"wa": [(105.0, 14.0), (106.0, 12.0)]}, "samplers/vmstat.log"))  # fmt: skip
    [f] = page_cache.run(ev)
    assert f.verdict == "consistent with" and f.explains == 0.1
    ev.vmstat = Src({"wa": [(105.0, 1.0)]}, "samplers/vmstat.log")  # the waits alone, at 2 x the threshold
    assert [f.verdict for f in page_cache.run(ev)] == ["consistent with"]
    counts["7 worker/VLLM::Worker"] = {"folio_wait_bit_common": 2, "running": 28}  # 6.7%: one sign, not enough
    assert [f.verdict for f in page_cache.run(ev)] == ["rules out"]


def test_memory_outside_the_containers_nodes_is_misplaced_and_inside_them_cannot_be_told() -> None:
    procs = [{"pid": 7, "comm": "VLLM::Worker", "node_bytes": {"N0": 6 << 30, "N1": 2 << 30}},
             {"pid": 1, "comm": "vllm", "node_bytes": {"N0": 1 << 30}}]  # fmt: skip
    ev = _ev(
        numa=Src({"host_mems": "0-1", "mems_allowed": "0", "processes": procs}, "host-state/after/host-state.json")
    )
    [f] = numa.run(ev)
    assert f.verdict == "consistent with" and f.explains == 0.25
    assert f.title.startswith("misplaced memory: VLLM::Worker (pid 7) holds 25% of its resident memory outside")
    procs[0]["node_bytes"] = {"N0": 6 << 30, "N1": 0}
    assert [f.verdict for f in numa.run(ev)] == ["cannot tell"]
    ev.numa = Src({"host_mems": "0", "mems_allowed": "0", "processes": procs}, "h")
    assert [f.verdict for f in numa.run(ev)] == ["rules out"]


def test_a_ranks_memory_off_its_own_cpus_node_is_misplaced_even_inside_the_containers_nodes() -> None:
    """CONSTRUCTED two-node host (sysfs node0/cpulist 0-15, node1/cpulist 16-31): the worker runs on node 1's
    CPUs, its container may allocate on both nodes, and three quarters of its memory is on node 0."""
    procs = [{"pid": 7, "comm": "VLLM::Worker", "node_bytes": {"N0": 6 << 30, "N1": 2 << 30}, "cpus_allowed": "16-23"},
             {"pid": 1, "comm": "vllm", "node_bytes": {"N0": 1 << 30}, "cpus_allowed": "0-31"}]  # fmt: skip
    state = {"host_mems": "0-1", "mems_allowed": "0-1", "processes": procs, "node_cpus": {"N0": "0-15", "N1": "16-31"}}
    ev = _ev(numa=Src(state, "host-state/after/host-state.json"))
    [f] = numa.run(ev)
    assert f.verdict == "consistent with" and f.explains == 0.75, f
    assert f.title.endswith("outside its CPUs' node (1; CPUs 16-23)"), f.title
    assert f.symptom == "VLLM::Worker 75%"  # pid 1 may run anywhere: its memory is on a node of its CPUs
    procs[0]["node_bytes"] = {"N0": 0, "N1": 8 << 30}
    [f] = numa.run(ev)
    assert f.verdict == "rules out" and "VLLM::Worker 16-23" in f.symptom, f
    del procs[1]["cpus_allowed"]  # a bundle without the CPU list of one process
    [f] = numa.run(ev)
    assert f.verdict == "cannot tell" and f.symptom.endswith("no CPU list for vllm (pid 1)"), f
