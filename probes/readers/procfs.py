"""/proc files, parsed and read: a process's limits, its memory split (smaps_rollup) and where its memory is
(numa_maps: bytes per NUMA node), and the host's /proc/meminfo. /proc/<pid>/limits has its one parser here
(probes/readers/hoststate.py and serving/host/limits.py use it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from probes.base.rawtext import read_raw, why
from probes.readers.cgroups import DEFAULT_PROC_ROOT, SCHEMA_VERSION, Status

NEEDS_PTRACE = "needs CAP_SYS_PTRACE"


@dataclass(frozen=True)
class ProcLimit:
    soft: int | None  # None: unlimited
    hard: int | None
    units: str | None  # None where the kernel prints none (nice and realtime priority)


def parse_limits(text: str) -> dict[str, ProcLimit]:
    """/proc/<pid>/limits: fixed-width columns under a header; the row name runs to the 'Soft Limit' column."""
    lines = text.splitlines()
    if not lines or "Soft Limit" not in lines[0]:
        raise ValueError("no 'Limit  Soft Limit  Hard Limit  Units' header")
    soft_col = lines[0].index("Soft Limit")

    def num(v: str) -> int | None:
        return None if v == "unlimited" else int(v)

    out: dict[str, ProcLimit] = {}
    for line in lines[1:]:
        if not line.strip():
            continue
        name, values = line[:soft_col].strip(), line[soft_col:].split()
        if not name or len(values) not in (2, 3):
            raise ValueError(f"unexpected limits row {line!r}")
        out[name] = ProcLimit(num(values[0]), num(values[1]), values[2] if len(values) == 3 else None)
    return out


@dataclass(frozen=True)
class LimitsReading:
    schema_version: int
    pid: int
    status: Status
    reason: str | None
    path: str
    limits: dict[str, ProcLimit]  # by the kernel's row name: "Max open files", "Max locked memory", ...
    raw: dict[str, str | None]


@dataclass(frozen=True)
class PssSplit:
    """Proportional set size: each page counted once across the processes that map it, split by kind.

    pss_anon_kb + pss_file_kb + pss_shmem_kb == pss_kb; the split is absent before Linux 5.7.
    """

    pss_kb: int
    pss_anon_kb: int | None
    pss_file_kb: int | None
    pss_shmem_kb: int | None


@dataclass(frozen=True)
class SmapsRollupReading:
    schema_version: int
    pid: int
    status: Status
    reason: str | None
    path: str
    fields_kb: dict[str, int]  # every "Name: N kB" line: Rss, Pss, Pss_Anon, Swap, Locked, ...
    pss: PssSplit | None
    raw: dict[str, str | None]


@dataclass(frozen=True)
class MeminfoReading:
    schema_version: int
    status: Status
    reason: str | None
    path: str
    values_kb: dict[str, int]  # lines in kB: MemTotal, MemAvailable, Cached, Dirty, Shmem, Mlocked, Hugepagesize, ...
    counts: dict[str, int]  # lines without a unit: HugePages_Total, HugePages_Free, HugePages_Rsvd, HugePages_Surp
    raw: dict[str, str | None]


def parse_smaps_rollup(text: str) -> tuple[dict[str, int], PssSplit | None]:
    """The 'Name: N kB' lines of /proc/<pid>/smaps_rollup (the address-range header line is skipped)."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        parts = rest.split()
        if sep and len(parts) == 2 and parts[1] == "kB" and " " not in name:
            fields[name] = int(parts[0])
    if "Pss" not in fields:
        return fields, None
    return fields, PssSplit(fields["Pss"], fields.get("Pss_Anon"), fields.get("Pss_File"), fields.get("Pss_Shmem"))


@dataclass(frozen=True)
class NumaMapsReading:
    """Where a process's resident pages are: the allowed lists (Mems_allowed) say where they may be, this says
    where they are. Each mapping's per-node page counts (N<node>=pages) times its kernelpagesize_kB, summed."""

    schema_version: int
    pid: int
    status: Status
    reason: str | None
    path: str
    node_bytes: dict[str, int]  # "N0": bytes resident on node 0
    policies: dict[str, int]  # mappings by memory policy: default, bind:0, interleave:0-1, prefer:1, ...
    raw: dict[str, str | None]


def parse_numa_maps(text: str) -> tuple[dict[str, int], dict[str, int]]:
    """/proc/<pid>/numa_maps -> (bytes per node, mappings per policy). A line is `ADDRESS POLICY key=value ...`
    (kernel docs, numa_memory_policy and proc(5)); the page size is the mapping's own (huge pages count as such)."""
    node_bytes: dict[str, int] = {}
    policies: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        policies[fields[1]] = policies.get(fields[1], 0) + 1
        kv = dict(f.split("=", 1) for f in fields[2:] if "=" in f)
        page = int(kv.get("kernelpagesize_kB", "4")) * 1024
        for key, value in kv.items():
            if key[:1] == "N" and key[1:].isdigit() and value.isdigit():
                node_bytes[key] = node_bytes.get(key, 0) + int(value) * page
    return dict(sorted(node_bytes.items(), key=lambda kv: int(kv[0][1:]))), policies


def parse_meminfo(text: str) -> tuple[dict[str, int], dict[str, int]]:
    """/proc/meminfo -> (values in kB, unitless counts such as HugePages_Total). Lines that do not parse
    (a truncated last line) are left out."""
    values_kb: dict[str, int] = {}
    counts: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        parts = rest.split()
        if not sep or not parts or not parts[0].isdigit():
            continue
        if len(parts) == 2 and parts[1] == "kB":
            values_kb[name.strip()] = int(parts[0])
        elif len(parts) == 1:
            counts[name.strip()] = int(parts[0])
    return values_kb, counts


def read_limits(pid: int, proc_root: Path = DEFAULT_PROC_ROOT) -> LimitsReading:
    """/proc/<pid>/limits parsed: {row name: ProcLimit(soft, hard, units)}, 'unlimited' as None."""
    path = proc_root / str(pid) / "limits"
    raw: dict[str, str | None] = {str(path): None}

    def result(status: Status, reason: str | None, limits: dict[str, ProcLimit] | None = None) -> LimitsReading:
        return LimitsReading(SCHEMA_VERSION, pid, status, reason, str(path), limits or {}, raw)

    try:
        text = raw[str(path)] = read_raw(path)
    except OSError as e:
        return result("failed", f"cannot read {path}: {why(e)}")
    try:
        return result("successful", None, parse_limits(text))
    except ValueError as e:
        return result("failed", f"cannot parse {path}: {e}")


def read_smaps_rollup(pid: int, proc_root: Path = DEFAULT_PROC_ROOT) -> SmapsRollupReading:
    """/proc/<pid>/smaps_rollup in kB, with the PSS split. Reading another user's (or a non-dumpable) process
    needs CAP_SYS_PTRACE: without it the reading is skipped, with the reason."""
    path = proc_root / str(pid) / "smaps_rollup"
    raw: dict[str, str | None] = {str(path): None}

    def result(
        status: Status, reason: str | None, fields: dict[str, int] | None = None, pss: PssSplit | None = None
    ) -> SmapsRollupReading:
        return SmapsRollupReading(SCHEMA_VERSION, pid, status, reason, str(path), fields or {}, pss, raw)

    try:
        text = raw[str(path)] = read_raw(path)
    except PermissionError as e:
        return result(
            "skipped",
            f"reading {path} {NEEDS_PTRACE} ({why(e)}): run the probe container with --cap-add SYS_PTRACE",
        )
    except FileNotFoundError:
        return result("failed", f"{path} is absent: process {pid} exited, or the kernel predates smaps_rollup (4.14)")
    except OSError as e:
        return result("failed", f"cannot read {path}: {why(e)}")
    fields, pss = parse_smaps_rollup(text)
    if pss is None:
        return result("failed", f"{path} has no Pss line (a kernel thread or an exiting process)", fields)
    return result("successful", None, fields, pss)


def read_numa_maps(pid: int, proc_root: Path = DEFAULT_PROC_ROOT) -> NumaMapsReading:
    """/proc/<pid>/numa_maps summed per node. Like smaps_rollup, another user's process needs CAP_SYS_PTRACE;
    a kernel without NUMA support has no such file."""
    path = proc_root / str(pid) / "numa_maps"
    raw: dict[str, str | None] = {str(path): None}

    def result(status: Status, reason: str | None, nodes: dict[str, int] | None = None,
               policies: dict[str, int] | None = None) -> NumaMapsReading:  # fmt: skip
        return NumaMapsReading(SCHEMA_VERSION, pid, status, reason, str(path), nodes or {}, policies or {}, raw)

    try:
        text = raw[str(path)] = read_raw(path)
    except PermissionError as e:
        return result(
            "skipped", f"reading {path} {NEEDS_PTRACE} ({why(e)}): run the probe container with --cap-add SYS_PTRACE"
        )
    except FileNotFoundError:
        return result("failed", f"{path} is absent: process {pid} exited, or the kernel has no NUMA support")
    except OSError as e:
        return result("failed", f"cannot read {path}: {why(e)}")
    nodes, policies = parse_numa_maps(text)
    return result("successful", None, nodes, policies)


def read_meminfo(proc_root: Path = DEFAULT_PROC_ROOT) -> MeminfoReading:
    """/proc/meminfo: kB values and the unitless HugePages_* counts."""
    path = proc_root / "meminfo"
    raw: dict[str, str | None] = {str(path): None}
    try:
        text = raw[str(path)] = read_raw(path)
    except OSError as e:
        return MeminfoReading(SCHEMA_VERSION, "failed", f"cannot read {path}: {why(e)}", str(path), {}, {}, raw)
    values_kb, counts = parse_meminfo(text)
    if "MemTotal" not in values_kb:
        return MeminfoReading(
            SCHEMA_VERSION, "failed", f"{path} has no MemTotal line", str(path), values_kb, counts, raw
        )
    return MeminfoReading(SCHEMA_VERSION, "successful", None, str(path), values_kb, counts, raw)
