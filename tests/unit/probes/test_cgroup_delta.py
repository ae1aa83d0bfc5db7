"""Deltas between two cgroup snapshots (probes/readers/cgroup_delta.py): throttling, OOM kills, pressure stalls,
a changed level set and counter resets."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import pytest

from probes.capture.timeline import cgroup_notes
from probes.readers.cgroup_delta import cgroup_delta
from probes.readers.cgroups import cgroup_snapshot
from probes.readers.hoststate import format_summary, snapshot
from tests.helpers.cgroup_trees import (
    CID,
    NEW_CID,
    V2_SCOPE,
    build_proc,
    cgroup_lines_v1,
    pressure,
    set_v1_counters,
    set_v2_counters,
    write,
)


def test_v1_delta_throttling_oom_kill_and_pressure(v1: tuple[Path, Path]) -> None:
    proc, cg = v1
    before = cgroup_snapshot(1, proc, cg)
    set_v1_counters(
        cg,
        usage_ns=50_433_533_520 + 3_500_000_000,
        nr_periods=1400,
        nr_throttled=180,
        throttled_ns=5_500_000_000,
        failcnt=5,
        oom_kill=2,
        cpu_some_us=5_670_541 + 2_000_000,
        io_full_us=1_250_000,
    )
    after = cgroup_snapshot(1, proc, cg)
    d = cgroup_delta(before, after)
    assert not d.levels_changed and not d.reset_detected
    assert d.window_s >= 0
    assert [lv.path for lv in d.levels] == [f"/docker/{CID}", "/docker", "/"]
    inner = d.levels[0]
    assert inner.cpu_usage_s == pytest.approx(3.5)
    assert (inner.nr_periods, inner.nr_throttled) == (400, 80)
    assert inner.throttled_s == pytest.approx(3.5)
    assert inner.throttled_share == pytest.approx(0.2)
    assert inner.memory_failcnt_increase == 5
    assert inner.oom_kill_increase == 2
    assert inner.memory_events_increase is None  # v1 has no memory.events
    assert inner.memory_max_usage_bytes == 2596503552
    assert inner.cpu_some_stall_s == pytest.approx(2.0)
    assert inner.io_full_stall_s == pytest.approx(0.25) and inner.io_some_stall_s == pytest.approx(0.5)
    assert inner.memory_some_stall_s == 0.0
    root = d.levels[2]
    assert root.cpu_usage_s == 0.0 and root.nr_periods == 0
    assert root.throttled_share is None  # no period elapsed


def test_v2_delta_memory_events_and_pressure(v2: tuple[Path, Path]) -> None:
    proc, cg = v2
    before = cgroup_snapshot(1, proc, cg)
    set_v2_counters(
        cg,
        usage_usec=50_433_836 + 1_250_000,
        nr_periods=600,
        nr_throttled=25,
        throttled_usec=400_000,
        events="low 0\nhigh 10\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n",
        memory_full_us=750_000,
    )
    d = cgroup_delta(before, cgroup_snapshot(1, proc, cg))
    inner = d.levels[0]
    assert inner.path == V2_SCOPE
    assert inner.cpu_usage_s == pytest.approx(1.25)
    assert inner.throttled_s == pytest.approx(0.4) and inner.throttled_share == pytest.approx(0.25)
    assert inner.memory_events_increase == {"low": 0, "high": 7, "max": 3, "oom": 1, "oom_kill": 1, "oom_group_kill": 0}
    assert inner.oom_kill_increase == 1
    assert inner.memory_failcnt_increase is None  # v2 has no failcnt
    assert inner.memory_full_stall_s == pytest.approx(0.75) and inner.memory_some_stall_s == pytest.approx(1.5)


def test_delta_flags_a_changed_level_set(v1: tuple[Path, Path]) -> None:
    proc, cg = v1
    before = cgroup_snapshot(1, proc, cg)
    # The container comes back under a new ID; the old cgroup is still there (Docker removes it a little later).
    for sub in ("cpu,cpuacct", "cpuset", "memory", "pids", "unified"):
        shutil.copytree(cg / sub / "docker" / CID, cg / sub / "docker" / NEW_CID)
    write(proc / "1" / "cgroup", cgroup_lines_v1(NEW_CID))
    after = cgroup_snapshot(1, proc, cg)
    d = cgroup_delta(before, after)
    assert d.levels_changed
    assert d.levels_only_before == [f"/docker/{CID}"]
    assert d.levels_only_after == [f"/docker/{NEW_CID}"]
    assert [lv.path for lv in d.levels] == ["/docker", "/"]
    assert any("restarted or moved" in n for n in d.notes)


def test_delta_counter_that_went_down_is_a_reset(v1: tuple[Path, Path]) -> None:
    proc, cg = v1
    before = cgroup_snapshot(1, proc, cg)
    set_v1_counters(cg, usage_ns=1_000_000_000, nr_periods=10, nr_throttled=1, throttled_ns=5_000_000)
    d = cgroup_delta(before, cgroup_snapshot(1, proc, cg))
    inner = d.levels[0]
    assert d.reset_detected and inner.reset_detected and not d.levels_changed
    assert inner.cpu_usage_s == pytest.approx(1.0)  # the count since the cgroup was made anew
    assert (inner.nr_periods, inner.nr_throttled) == (10, 1)
    assert any("cpu usage_ns went down" in n for n in inner.notes)
    assert not d.levels[1].reset_detected


def test_delta_refuses_snapshots_in_the_wrong_order(v1: tuple[Path, Path]) -> None:
    proc, cg = v1
    first, second = cgroup_snapshot(1, proc, cg), cgroup_snapshot(1, proc, cg)
    with pytest.raises(ValueError, match="taken before"):
        cgroup_delta(second, first)


def _gpu_host_tree(root: Path, slice_periods: int, slice_throttled: int, slice_throttled_usec: int) -> None:
    """cgroup v2 as a GPU host has it: the CPU quota on refdeploy.slice (the serving_slice role's CPUQuota),
    the container's scope under it without one."""
    write(root / "cgroup.controllers", "cpuset cpu io memory pids\n")
    levels = {"refdeploy.slice": "400000 100000\n", f"refdeploy.slice/docker-{CID}.scope": "max 100000\n"}
    for rel, cpu_max in levels.items():
        d = root / rel
        write(d / "cpu.max", cpu_max)
        write(d / "memory.max", "68719476736\n" if rel == "refdeploy.slice" else "max\n")
        # The scope's own counters do not move: with no quota it has no periods.
        periods, throttled, usec = (
            (slice_periods, slice_throttled, slice_throttled_usec) if rel == "refdeploy.slice" else (0, 0, 0)
        )
        write(d / "cpu.stat", f"usage_usec 9000000\nnr_periods {periods}\nnr_throttled {throttled}\n"
                              f"throttled_usec {usec}\n")  # fmt: skip
        write(d / "cpu.pressure", pressure(1_000_000, 0))


def test_a_throttled_ancestor_slice_is_named_where_the_containers_own_level_reads_no_throttling(tmp_path: Path) -> None:
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    build_proc(proc, 1, f"0::/refdeploy.slice/docker-{CID}.scope\n")
    _gpu_host_tree(cg, 200, 0, 0)
    before = cgroup_snapshot(1, proc, cg)
    _gpu_host_tree(cg, 400, 30, 1_500_000)
    d = cgroup_delta(before, cgroup_snapshot(1, proc, cg))
    inner, slice_ = d.levels[0], d.levels[1]
    assert (inner.cpu_quota_cpus, inner.nr_throttled) == (None, 0)
    assert (slice_.path, slice_.cpu_quota_cpus, slice_.memory_limit_bytes) == ("/refdeploy.slice", 4.0, 64 << 30)
    notes = cgroup_notes(asdict(d))
    assert notes[0].startswith(f"cgroup /refdeploy.slice/docker-{CID}.scope (no limit): ")
    assert "throttled 0 of 0 periods" in notes[0]
    assert (
        "cgroup ancestor /refdeploy.slice (CPU quota 4 CPUs; memory limit 65,536 MiB): throttled 30 of 200 periods "
        "(1.50 s), memory events none, pressure cpu some 0.00 s, memory some n/a"
    ) in notes
    # The root (no limit) has no line of its own.
    assert not [n for n in notes if n.startswith("cgroup ancestor / ")]
    # The host-state summary names the level that sets the quota.
    text = format_summary(snapshot([1], [], proc, cg))
    assert "cpu quota 4 CPUs at /refdeploy.slice: throttled in 30 of 400 periods (1.500 s)" in text


def test_the_bench_report_names_a_throttled_ancestor_slice_over_the_bench(tmp_path: Path) -> None:
    # The bench reads the server's cgroups before and after it with `python -m probes.readers.cgroups` in a probe
    # container (serving/bench/protocol.py cgroup_argv); its JSON goes through the report as the role passes it.
    import subprocess
    import sys

    from serving.bench import report as bench_report
    from tests.helpers.bench_dirs import make_bench

    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    build_proc(proc, 1, f"0::/refdeploy.slice/docker-{CID}.scope\n")

    def read() -> dict[str, object]:
        argv = [
            sys.executable,
            "-m",
            "probes.readers.cgroups",
            "--pid",
            "1",
            "--proc-root",
            str(proc),
            "--cgroup-root",
            str(cg),
        ]
        r = subprocess.run(argv, capture_output=True, text=True, check=False)
        return {"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr}

    _gpu_host_tree(cg, 200, 0, 0)
    before = read()
    _gpu_host_tree(cg, 400, 30, 1_500_000)
    after = read()
    assert before["rc"] == after["rc"] == 0, before
    d = make_bench(tmp_path / "runs", "b", 1000)
    out = bench_report.report_bench(d, {"host": "gpu1", "client_rc": 0, "timeout_s": 60, "change": {},
                                        "cgroup": {"before": before, "after": after}})  # fmt: skip
    text = "\n".join(out["lines"])
    assert "the server's cgroups over the bench (cgroup-before.json, cgroup-after.json):" in text
    assert (
        "  cgroup ancestor /refdeploy.slice (CPU quota 4 CPUs; memory limit 65,536 MiB): throttled 30 of 200 periods "
        "(1.50 s)"
    ) in text
    assert json.loads((d / "cgroup-after.json").read_text())["levels"][1]["path"] == "/refdeploy.slice"
    # A reading that failed is said, and the bench is still reported.
    out = bench_report.report_bench(d, {"host": "gpu1", "client_rc": 0, "timeout_s": 60, "change": {},
                                        "cgroup": {"before": {"rc": 125, "stdout": "", "stderr": "docker: boom"},
                                                   "after": after}})  # fmt: skip
    assert "  server cgroup: not read: the cgroup reading exited 125: docker: boom" in out["lines"]
