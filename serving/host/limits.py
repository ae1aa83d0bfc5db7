"""Parse the limits a process and its container actually run under.

Sources are the kernel's own text: /proc/<pid>/limits and cgroup files (v1 and
v2).  Docker's notation ("8g") is converted with Docker's rules (binary units).
"""

from __future__ import annotations

import re

from probes.readers.procfs import parse_limits

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
# /proc/<pid>/limits row names, by the ulimit names Docker uses.
LIMIT_ROWS = {
    "nofile": "Max open files",
    "memlock": "Max locked memory",
    "nproc": "Max processes",
    "stack": "Max stack size",
    "core": "Max core file size",
}
UNLIMITED = -1


def docker_size_bytes(text: str) -> int:
    m = re.fullmatch(r"([0-9]+)([bkmg]?)", text.strip().lower())
    if not m:
        raise ValueError(f"not a Docker size: {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2)]


def parse_proc_limits(text: str) -> dict[str, tuple[int, int]]:
    """{row name: (soft, hard)}, 'unlimited' as UNLIMITED (probes/readers/procfs.py parses the format); {} for no
    reading or one that is not /proc/<pid>/limits."""
    try:
        rows = parse_limits(text)
    except ValueError:
        return {}
    return {
        name: (UNLIMITED if r.soft is None else r.soft, UNLIMITED if r.hard is None else r.hard)
        for name, r in rows.items()
    }


def parse_cgroup_limits(values: dict[str, str]) -> dict[str, int | str | None]:
    """Normalise cgroup v1/v2 readings into cpuset_cpus, cpuset_mems and memory_limit_bytes.

    `values` maps cgroup file names (as read inside the container) to their contents.
    """

    def first(*names: str) -> str | None:
        for name in names:
            v = values.get(name)
            if v is not None and v.strip() != "":
                return v.strip()
        return None

    mem = first("memory.max", "memory/memory.limit_in_bytes")
    memory: int | None
    if mem is None:
        memory = None
    elif mem == "max":
        memory = UNLIMITED
    else:
        memory = int(mem)
        # v1 reports "no limit" as a huge page-aligned number.
        if memory >= (1 << 62):
            memory = UNLIMITED
    return {
        "cgroup_version": 2 if "memory.max" in values or "cpuset.cpus.effective" in values else 1,
        "cpuset_cpus": first("cpuset.cpus.effective", "cpuset/cpuset.effective_cpus", "cpuset/cpuset.cpus"),
        "cpuset_mems": first("cpuset.mems.effective", "cpuset/cpuset.effective_mems", "cpuset/cpuset.mems"),
        "memory_limit_bytes": memory,
    }
