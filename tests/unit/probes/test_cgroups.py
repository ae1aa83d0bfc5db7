"""cgroup v1/v2 snapshots (probes/readers/cgroups.py): /proc/<pid>/cgroup, pressure lines, and every level of the
trees built by tests/helpers/cgroup_trees.py, innermost first."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.readers import cgroups
from probes.readers.cgroups import (
    Limit,
    cgroup_ancestors,
    cgroup_snapshot,
    parse_pressure,
    parse_proc_cgroup,
    v1_mount_dir,
)
from tests.helpers.cgroup_trees import CID, V2_SCOPE, build_proc, build_v1, build_v2, cgroup_lines_v1, write

# --- parsers ----------------------------------------------------------------------------------------------


def test_parse_proc_cgroup_hybrid_and_pure_v2() -> None:
    hybrid = parse_proc_cgroup(cgroup_lines_v1(CID))
    assert hybrid[0].controllers == ["name=systemd"]
    comounted = next(m for m in hybrid if m.hierarchy_id == 2)
    assert comounted.controllers == ["cpu", "cpuacct"] and comounted.path == f"/docker/{CID}"
    assert hybrid[-1].hierarchy_id == 0 and hybrid[-1].controllers == []
    [only] = parse_proc_cgroup(f"0::{V2_SCOPE}\n")
    assert (only.hierarchy_id, only.controllers, only.path) == (0, [], V2_SCOPE)


def test_pressure_lines_and_ancestors() -> None:
    p = parse_pressure("some avg10=2.06 avg60=1.85 avg300=1.06 total=5670541\n")
    assert p.some is not None and p.some.avg10_pct == 2.06 and p.some.total_us == 5670541
    assert p.full is None  # cpu.pressure before Linux 5.13
    with pytest.raises(ValueError):
        parse_pressure("some avg10=1.00 total=3\n")
    assert cgroup_ancestors(f"/docker/{CID}") == [f"/docker/{CID}", "/docker", "/"]
    assert cgroup_ancestors("/") == ["/"]


# --- cgroup v1 --------------------------------------------------------------------------------------------


def test_v1_snapshot_reads_every_level_innermost_first(v1: tuple[Path, Path]) -> None:
    proc, cg = v1
    snap = cgroup_snapshot(1, proc, cg)
    assert snap.status == "successful", snap.reason
    assert snap.version == "v1"
    assert [lv.path for lv in snap.levels] == [f"/docker/{CID}", "/docker", "/"]
    inner, docker, root = snap.levels
    assert inner.cpu is not None
    assert inner.cpu.quota_us == Limit(200000, False)
    assert inner.cpu.period_us == 100000 and inner.cpu.shares == 1024
    assert inner.cpu.usage_ns == 50_433_533_520  # cpuacct.usage, from the co-mounted directory
    assert (inner.cpu.nr_periods, inner.cpu.nr_throttled, inner.cpu.throttled_ns) == (1000, 100, 2_000_000_000)
    assert inner.dirs["cpu"] == str(cg / "cpu" / "docker" / CID)  # the symlinks to the co-mount
    assert Path(inner.dirs["cpuacct"]).resolve() == (cg / "cpu,cpuacct" / "docker" / CID).resolve()
    assert docker.cpu is not None and docker.cpu.quota_us == Limit(None, True)  # cfs_quota_us -1
    m = inner.memory
    assert m is not None
    assert m.limit_bytes == Limit(8589934592, False)
    assert m.usage_bytes == 2557116416 and m.max_usage_bytes == 2596503552
    assert (m.failcnt, m.oom_kill, m.under_oom) == (0, 0, False)
    assert m.stat is not None and m.stat["total_rss"] == 2410037248 and m.stat["pgmajfault"] == 523
    assert root.memory is not None and root.memory.limit_bytes == Limit(None, True)  # page-aligned LONG_MAX
    assert inner.cpuset == cgroups.CpusetReading("0-1", "0", "0-1", "0")
    assert inner.pids == cgroups.PidsReading(Limit(None, True), 72)
    assert root.pids == cgroups.PidsReading(None, 72)  # the root pids cgroup has no pids.max
    assert inner.cpu_pressure is not None and inner.cpu_pressure.some is not None
    assert inner.cpu_pressure.some.total_us == 5_670_541 and inner.cpu_pressure.some.avg10_pct == 2.06
    assert inner.dirs["pressure"] == str(cg / "unified" / "docker" / CID)
    assert snap.errors == []


def test_v1_missing_file_is_recorded_as_none_not_an_error(v1: tuple[Path, Path]) -> None:
    proc, cg = v1
    snap = cgroup_snapshot(1, proc, cg)
    memory = snap.levels[0].memory
    assert memory is not None and memory.memsw_limit_bytes is None
    memsw = cg / "memory" / "docker" / CID / "memory.memsw.limit_in_bytes"
    assert str(memsw) in snap.raw and snap.raw[str(memsw)] is None
    assert snap.raw[str(cg / "memory" / "docker" / CID / "memory.limit_in_bytes")] == "8589934592\n"
    assert snap.errors == []


def test_v1_comount_found_without_the_symlinks(tmp_path: Path) -> None:
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    build_proc(proc, 1, cgroup_lines_v1(CID))
    build_v1(cg, symlinks=False)
    assert v1_mount_dir(cg, "cpuacct") == cg / "cpu,cpuacct"
    assert v1_mount_dir(cg, "hugetlb") is None
    inner = cgroup_snapshot(1, proc, cg).levels[0]
    assert inner.cpu is not None and inner.cpu.usage_ns == 50_433_533_520 and inner.cpu.shares == 1024


def test_unparsable_file_reads_as_none_with_an_error(v1: tuple[Path, Path]) -> None:
    proc, cg = v1
    write(cg / "memory" / "docker" / CID / "memory.usage_in_bytes", "n/a\n")
    snap = cgroup_snapshot(1, proc, cg)
    assert snap.status == "successful"
    assert snap.levels[0].memory is not None and snap.levels[0].memory.usage_bytes is None
    assert any("memory.usage_in_bytes: cannot parse 'n/a'" in e for e in snap.errors)


def test_cgroup_snapshot_refusals(v1: tuple[Path, Path]) -> None:
    proc, cg = v1
    assert cgroup_snapshot(99, proc, cg).status == "failed"
    skipped = cgroup_snapshot(1, proc, cg / "nowhere")
    assert skipped.status == "skipped" and "--cgroup-root" in (skipped.reason or "")
    write(proc / "2" / "cgroup", "4:memory:/../..\n0::/\n")
    namespaced = cgroup_snapshot(2, proc, cg)
    assert namespaced.status == "failed" and "--cgroupns host" in (namespaced.reason or "")


# --- cgroup v2 --------------------------------------------------------------------------------------------


def test_pure_v2_snapshot(v2: tuple[Path, Path]) -> None:
    proc, cg = v2
    snap = cgroup_snapshot(1, proc, cg)
    assert snap.status == "successful", snap.reason
    assert snap.version == "v2"
    assert [lv.path for lv in snap.levels] == [V2_SCOPE, "/system.slice", "/"]
    inner, slice_, root = snap.levels
    assert inner.cpu is not None
    assert (inner.cpu.quota_us, inner.cpu.period_us) == (Limit(150000, False), 100000)
    assert inner.cpu.usage_ns == 50_433_836_000 and inner.cpu.nr_periods == 500
    assert slice_.cpu is not None and slice_.cpu.quota_us == Limit(None, True)  # "max 100000"
    m = inner.memory
    assert m is not None
    assert (m.usage_bytes, m.max_usage_bytes) == (2557116416, 2596503552)
    assert m.limit_bytes == Limit(8589934592, False) and m.high_bytes == Limit(None, True)
    assert m.swap_max_bytes == Limit(0, False)
    assert m.events == {"low": 0, "high": 3, "max": 1, "oom": 0, "oom_kill": 0, "oom_group_kill": 0}
    assert m.oom_kill == 0
    assert m.stat is not None and m.stat["file_mapped"] == 20246528
    assert inner.cpuset is not None and inner.cpuset.cpus == "" and inner.cpuset.cpus_effective == "0-1"
    assert inner.pids == cgroups.PidsReading(Limit(4096, False), 72)
    assert inner.cpu_pressure is not None and inner.cpu_pressure.full is not None
    assert inner.cpu_pressure.full.total_us == 2_028_288
    # The root has no cpu.max, memory.current or memory.max: absent, recorded as None.
    assert root.cpu is not None and root.cpu.quota_us is None and root.cpu.usage_ns == 11_322_109_052_000
    assert root.memory is not None and root.memory.usage_bytes is None and root.memory.limit_bytes is None
    assert snap.raw[str(cg / "memory.max")] is None
    assert snap.errors == []


def test_v2_under_unified_of_a_hybrid_host(tmp_path: Path) -> None:
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    build_proc(proc, 1, f"0::{V2_SCOPE}\n")
    build_v2(cg / "unified")
    (cg / "memory").mkdir()
    snap = cgroup_snapshot(1, proc, cg)
    assert snap.version == "v2"
    assert snap.levels[0].dirs == {"cgroup2": str(cg / "unified" / V2_SCOPE.lstrip("/"))}
    assert snap.levels[0].memory is not None and snap.levels[0].memory.usage_bytes == 2557116416
