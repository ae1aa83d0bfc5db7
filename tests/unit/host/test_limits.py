from __future__ import annotations

from pathlib import Path

import pytest

from serving.host.limits import UNLIMITED, docker_size_bytes, parse_cgroup_limits, parse_proc_limits
from serving.host.numa import parse_cpulist


def test_proc_limits_from_a_real_container(vllm_cpu_fixtures: Path) -> None:
    limits = parse_proc_limits((vllm_cpu_fixtures / "proc-1-limits.txt").read_text())
    assert limits["Max open files"] == (16384, 16384)
    assert limits["Max locked memory"] == (8388608, 8388608)
    assert limits["Max cpu time"] == (UNLIMITED, UNLIMITED)
    assert limits["Max stack size"] == (8388608, UNLIMITED)


def test_cgroup_v1_and_v2_readings_normalise_alike() -> None:
    v1 = parse_cgroup_limits(
        {
            "cpuset/cpuset.effective_cpus": "0-1\n",
            "cpuset/cpuset.mems": "0\n",
            "memory/memory.limit_in_bytes": "8589934592\n",
        }
    )
    v2 = parse_cgroup_limits({"cpuset.cpus.effective": "0-1", "cpuset.mems.effective": "0", "memory.max": "8589934592"})
    for reading in (v1, v2):
        assert reading["cpuset_cpus"] == "0-1"
        assert reading["cpuset_mems"] == "0"
        assert reading["memory_limit_bytes"] == 8589934592
    assert (v1["cgroup_version"], v2["cgroup_version"]) == (1, 2)


def test_no_memory_limit_reads_as_unlimited_in_both_versions() -> None:
    assert parse_cgroup_limits({"memory.max": "max"})["memory_limit_bytes"] == UNLIMITED
    assert (
        parse_cgroup_limits({"memory/memory.limit_in_bytes": "9223372036854771712"})["memory_limit_bytes"] == UNLIMITED
    )


@pytest.mark.parametrize(("text", "value"), [("8g", 8 << 30), ("512m", 512 << 20), ("1024", 1024), ("4k", 4096)])
def test_docker_sizes_are_binary(text: str, value: int) -> None:
    assert docker_size_bytes(text) == value


def test_cpulists_expand() -> None:
    assert parse_cpulist("0-2,8,10-11") == [0, 1, 2, 8, 10, 11]
    assert parse_cpulist("0-1\n") == [0, 1]
