"""Host-state snapshots of the serving container's processes: cgroup limits and counters, rlimits, PSS, page cache.

Why is a request slow when vLLM itself looks idle? The answer is often outside the engine: the CFS quota
throttled the container, the memory cgroup is reclaiming at its limit, a page fault waited for storage because
the weights fell out of the page cache, or a process runs under an rlimit nobody meant to set. This module
reads those facts from the kernel's own text, keeps every file it read, and parses it into typed readings:

- `cgroup_snapshot`: the cgroup of a PID (cgroup v1, hybrid or v2) and each ancestor up to the root, innermost
  first: CPU quota, usage and throttling; memory usage, limits, failcnt and OOM kills; cpuset; pids; pressure
  (PSI). `cgroup_delta` says what happened between two snapshots.
- `read_limits` (/proc/<pid>/limits), `read_smaps_rollup` (PSS split into anon, file and shmem),
  `read_meminfo` (/proc/meminfo), `fincore` (page-cache residency of the served data files, util-linux).
- `snapshot` gathers all of them; `write_host_state` writes the artifact directory.

It runs in a probe container that shares the serving container's PID namespace and sees the host's cgroup
tree read-only:

  docker run --pid container:refdeploy-vllm --cap-add SYS_PTRACE --cgroupns host \\
      -v /sys/fs/cgroup:/host/sys/fs/cgroup:ro -v /data:/data:ro ... \\
      python -m probes.hoststate --pid 1 [--pid N ...] [--data-file F ...] \\
          --cgroup-root /host/sys/fs/cgroup --out DIR

Nothing is written outside --out and every data file is opened read-only (fincore maps it without reading it).
Exit status: 0 the snapshot was written (readings that could not be taken say why, with status skipped or
failed, in host-state.json); 1 it could not be written; 2 bad input (one line on stderr).
Artifacts: OUT/host-state.json (the parsed readings; each `raw` map names the file under OUT/raw/ that holds
the text a figure was parsed from) and OUT/raw/<source path>, e.g. OUT/raw/proc/1/limits.

"No limit" is `Limit(value=None, unlimited=True)`, whatever the kernel's spelling ("max" in v2, -1 for
cpu.cfs_quota_us, a page-aligned LONG_MAX for v1 memory limits); a file that is absent reads as None. The two
never read alike: `memory.limit_bytes is None` means the file was not there, `memory.limit_bytes.unlimited`
means the kernel says there is no limit.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any, Literal, TypeVar

from probes.io import run_bounded
from probes.procfs import ProcLimit, parse_limits

SCHEMA_VERSION = 1
DEFAULT_PROC_ROOT = Path("/proc")
DEFAULT_CGROUP_ROOT = Path("/sys/fs/cgroup")
HOST_STATE_FILE = "host-state.json"
RAW_DIR = "raw"
# A raw text larger than this is cut here and the marker appended: a snapshot never fills the disk.
RAW_LIMIT_BYTES = 1 << 20
TRUNCATED_MARKER = f"\n[probes.hoststate: truncated here; only the first {RAW_LIMIT_BYTES} bytes were kept]\n"
FINCORE_NOT_FOUND = "fincore not found: apt-get install util-linux"
NEEDS_PTRACE = "needs CAP_SYS_PTRACE"
FINCORE_COLUMNS = "RES,PAGES,SIZE,FILE"
DEFAULT_FINCORE_TIMEOUT_S = 60.0
# cgroup v1 says "no memory limit" with LONG_MAX rounded down to a page (9223372036854771712 with 4 KiB
# pages); anything this large is no limit.
_V1_NO_LIMIT_FROM = 1 << 62
_V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids")
_PRESSURE_RESOURCES = ("cpu", "memory", "io")

Status = Literal["successful", "failed", "skipped"]
CgroupVersion = Literal["v1", "v2"]
_T = TypeVar("_T")


class HostStateInputError(ValueError):
    """Bad input: raised before anything is read or written."""


# --- results ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limit:
    """A limit as the kernel states it: a number, or `unlimited` (then `value` is None)."""

    value: int | None
    unlimited: bool


@dataclass(frozen=True)
class PressureLine:
    """One line of a PSI file: the share of wall time (%) tasks stalled, averaged over 10, 60 and 300 s,
    and the total stall time since the cgroup was made."""

    avg10_pct: float
    avg60_pct: float
    avg300_pct: float
    total_us: int


@dataclass(frozen=True)
class PressureReading:
    some: PressureLine | None  # at least one task stalled
    full: PressureLine | None  # all non-idle tasks stalled at once (absent from cpu.pressure before Linux 5.13)


@dataclass(frozen=True)
class CgroupMembership:
    """One line of /proc/<pid>/cgroup: `4:memory:/docker/ID`, `3:cpu,cpuacct:/docker/ID`, `0::/docker/ID`."""

    hierarchy_id: int
    controllers: list[str]  # empty for the v2 line (0::); "name=systemd" for a named v1 hierarchy
    path: str


@dataclass(frozen=True)
class CpuReading:
    """v1: cpu.cfs_quota_us, cpu.cfs_period_us, cpu.shares, cpu.stat and cpuacct.usage; v2: cpu.max and cpu.stat.

    Times are in nanoseconds in both versions (v2's microseconds times 1000), so deltas read alike.
    """

    quota_us: Limit | None
    period_us: int | None
    shares: int | None  # v1 only
    usage_ns: int | None
    nr_periods: int | None
    nr_throttled: int | None
    throttled_ns: int | None
    stat: dict[str, int] | None  # cpu.stat as read, every key


@dataclass(frozen=True)
class MemoryReading:
    usage_bytes: int | None  # v1 memory.usage_in_bytes, v2 memory.current
    max_usage_bytes: int | None  # high-water mark: v1 memory.max_usage_in_bytes, v2 memory.peak (Linux 5.19+)
    limit_bytes: Limit | None  # v1 memory.limit_in_bytes, v2 memory.max
    high_bytes: Limit | None  # v2 memory.high (reclaim is forced above it)
    memsw_limit_bytes: Limit | None  # v1 memory.memsw.limit_in_bytes: memory plus swap (absent without swapaccount)
    swap_max_bytes: Limit | None  # v2 memory.swap.max: swap alone
    failcnt: int | None  # v1 memory.failcnt: times usage hit the limit
    oom_kill: int | None  # v1 memory.oom_control oom_kill, v2 memory.events oom_kill
    under_oom: bool | None  # v1 memory.oom_control under_oom
    events: dict[str, int] | None  # v2 memory.events: low high max oom oom_kill ...
    # memory.stat as read, every key: sizes in bytes (v1 cache rss shmem mapped_file total_*, v2 anon file shmem
    # file_mapped ...), events as counts (pgmajfault ...).
    stat: dict[str, int] | None


@dataclass(frozen=True)
class CpusetReading:
    cpus: str | None  # as configured (v1 cpuset.cpus; v2 cpuset.cpus, empty when not set)
    mems: str | None
    cpus_effective: str | None  # v1 cpuset.effective_cpus, v2 cpuset.cpus.effective
    mems_effective: str | None


@dataclass(frozen=True)
class PidsReading:
    max: Limit | None
    current: int | None


@dataclass(frozen=True)
class CgroupLevel:
    """The readings of one cgroup: the PID's own, or one of its ancestors."""

    path: str  # cgroup path as /proc/<pid>/cgroup names it: "/docker/ID", "/docker", "/"
    # The directory each reading came from: v1 by controller ("cpu", "cpuacct", "cpuset", "memory", "pids",
    # and "pressure" for the unified hierarchy of a hybrid host); v2 {"cgroup2": DIR}.
    dirs: dict[str, str]
    cpu: CpuReading | None  # None: the controller is not mounted, or this path is not on its chain
    memory: MemoryReading | None
    cpuset: CpusetReading | None
    pids: PidsReading | None
    cpu_pressure: PressureReading | None
    memory_pressure: PressureReading | None
    io_pressure: PressureReading | None


@dataclass(frozen=True)
class CgroupSnapshot:
    schema_version: int
    status: Status
    reason: str | None
    version: CgroupVersion | None  # None when the cgroup could not be placed
    pid: int
    proc_root: str
    cgroup_root: str
    taken_mono_s: float  # time.monotonic() when reading began: only differences within one process mean anything
    taken_wall: str  # UTC, ISO 8601
    memberships: list[CgroupMembership]
    levels: list[CgroupLevel]  # innermost first
    errors: list[str]  # files that were there but could not be read or parsed
    raw: dict[str, str | None]  # file path -> text as read; None: the file is absent


@dataclass(frozen=True)
class LevelDelta:
    """What one cgroup counted between two snapshots."""

    path: str
    cpu_usage_s: float | None
    nr_periods: int | None
    nr_throttled: int | None
    throttled_s: float | None
    throttled_share: float | None  # nr_throttled / nr_periods; None when no period elapsed (or no quota)
    memory_failcnt_increase: int | None
    oom_kill_increase: int | None
    memory_events_increase: dict[str, int] | None  # v2 memory.events
    memory_usage_before_bytes: int | None
    memory_usage_after_bytes: int | None
    # The high-water mark at the second snapshot: since the cgroup was made (or the counter reset), not the window.
    memory_max_usage_bytes: int | None
    cpu_some_stall_s: float | None
    cpu_full_stall_s: float | None
    memory_some_stall_s: float | None
    memory_full_stall_s: float | None
    io_some_stall_s: float | None
    io_full_stall_s: float | None
    # A counter went down: the cgroup was made anew in the window (docker restart keeps the path). Every
    # figure of the level is then the count since, a lower bound.
    reset_detected: bool
    notes: list[str]


@dataclass(frozen=True)
class CgroupDelta:
    schema_version: int
    pid_before: int
    pid_after: int
    window_s: float
    before_taken_wall: str
    after_taken_wall: str
    # The two snapshots do not cover the same cgroups: the container restarted under a new ID, or moved.
    levels_changed: bool
    levels_only_before: list[str]
    levels_only_after: list[str]
    reset_detected: bool
    levels: list[LevelDelta]  # the paths in both snapshots, innermost first
    notes: list[str]


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


@dataclass(frozen=True)
class FileResidency:
    path: str
    size_bytes: int
    # Whole pages, so up to a page more than size_bytes for a fully cached file whose size is not page-aligned.
    resident_bytes: int
    resident_pages: int
    resident_pct: float | None  # min(resident, size) / size; None for an empty file


@dataclass(frozen=True)
class FincoreReading:
    schema_version: int
    status: Status
    reason: str | None
    argv: list[str]
    exit_code: int | None
    timed_out: bool
    duration_s: float
    files: list[FileResidency]
    missing: list[str]  # files asked for that fincore gave no figure for (its stderr says why)
    raw: dict[str, str | None]  # "fincore/stdout.json", "fincore/stderr.txt"


@dataclass(frozen=True)
class ProcessState:
    pid: int
    comm: str | None  # /proc/<pid>/comm: "python3", "VLLM::EngineCor"
    limits: LimitsReading
    smaps_rollup: SmapsRollupReading


@dataclass(frozen=True)
class HostState:
    schema_version: int
    taken_mono_s: float
    taken_wall: str
    proc_root: str
    cgroup_root: str
    pids: list[int]
    data_files: list[str]
    cgroup: CgroupSnapshot  # of the first PID: the container's PID 1
    processes: list[ProcessState]
    meminfo: MeminfoReading
    page_cache: FincoreReading


# --- raw text ---------------------------------------------------------------------------------------------


def bound_raw(data: bytes, limit: int = RAW_LIMIT_BYTES) -> str:
    """UTF-8 text of data (bad bytes replaced), cut at `limit` bytes with TRUNCATED_MARKER appended."""
    if len(data) <= limit:
        return data.decode("utf-8", errors="replace")
    return data[:limit].decode("utf-8", errors="replace") + TRUNCATED_MARKER


def _read_raw(path: Path) -> str:
    """A file's text, read-only, never more than RAW_LIMIT_BYTES (plus the marker)."""
    with path.open("rb") as f:
        return bound_raw(f.read(RAW_LIMIT_BYTES + 1))


def _now_wall() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _why(e: OSError) -> str:
    return e.strerror or type(e).__name__


# --- parsers ----------------------------------------------------------------------------------------------


def parse_int(text: str) -> int:
    return int(text.strip())


def parse_str(text: str) -> str:
    return text.strip()


def parse_limit(text: str, *, huge_is_unlimited: bool = False) -> Limit:
    """'max' or a negative number (cfs_quota_us's -1) is no limit; so is a v1 memory limit of 2**62 or more
    when huge_is_unlimited."""
    value = text.strip()
    if value == "max":
        return Limit(None, True)
    n = int(value)
    if n < 0 or (huge_is_unlimited and n >= _V1_NO_LIMIT_FROM):
        return Limit(None, True)
    return Limit(n, False)


def _memory_limit(text: str) -> Limit:
    return parse_limit(text, huge_is_unlimited=True)


def parse_keyed_ints(text: str) -> dict[str, int]:
    """'key value' lines (cpu.stat, memory.stat, memory.events, memory.oom_control) into a dict."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"expected 'key value', got {line!r}")
        out[parts[0]] = int(parts[1])
    return out


def parse_cpu_max(text: str) -> tuple[Limit, int]:
    """v2 cpu.max: 'max 100000' or '200000 100000' -> (quota, period_us)."""
    parts = text.split()
    if len(parts) != 2:
        raise ValueError(f"expected 'QUOTA PERIOD', got {text.strip()!r}")
    return parse_limit(parts[0]), int(parts[1])


def parse_pressure(text: str) -> PressureReading:
    """A PSI file: 'some avg10=0.00 avg60=0.00 avg300=0.00 total=0' and (mostly) a 'full ...' line."""
    lines: dict[str, PressureLine] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        kind, *pairs = line.split()
        fields = dict(pair.split("=", 1) for pair in pairs)
        try:
            lines[kind] = PressureLine(
                float(fields["avg10"]), float(fields["avg60"]), float(fields["avg300"]), int(fields["total"])
            )
        except KeyError as e:
            raise ValueError(f"pressure line without {e.args[0]}: {line!r}") from None
    unknown = sorted(set(lines) - {"some", "full"})
    if unknown or not lines:
        raise ValueError(f"expected 'some' and 'full' lines, got {sorted(lines)}")
    return PressureReading(lines.get("some"), lines.get("full"))


def parse_proc_cgroup(text: str) -> list[CgroupMembership]:
    out: list[CgroupMembership] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        hid, controllers, path = line.split(":", 2)
        out.append(CgroupMembership(int(hid), [c for c in controllers.split(",") if c], path))
    return out


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


# --- cgroup snapshot --------------------------------------------------------------------------------------


class _Reader:
    """Reads files once, keeping each text (None when absent) and an error for each unreadable or unparsable one."""

    def __init__(self) -> None:
        self.raw: dict[str, str | None] = {}
        self.errors: list[str] = []

    def text(self, path: Path) -> str | None:
        key = str(path)
        if key in self.raw:
            return self.raw[key]
        text: str | None
        try:
            text = _read_raw(path)
        except (FileNotFoundError, NotADirectoryError):
            text = None
        except OSError as e:  # EACCES, EOPNOTSUPP (PSI switched off for the cgroup), ENODEV
            text = None
            self.errors.append(f"{path}: {_why(e)}")
        self.raw[key] = text
        return text

    def parsed(self, d: Path | None, name: str, parse: Callable[[str], _T]) -> _T | None:
        if d is None:
            return None
        path = d / name
        text = self.text(path)
        if text is None:
            return None
        try:
            return parse(text)
        except ValueError as e:
            self.errors.append(f"{path}: cannot parse {text.strip()[:80]!r}: {e}")
            return None


def cgroup_ancestors(path: str) -> list[str]:
    """'/docker/ID' -> ['/docker/ID', '/docker', '/']: the cgroup and its ancestors, innermost first."""
    p = PurePosixPath("/") / path.lstrip("/")
    return [str(p), *(str(a) for a in p.parents)]


def _relative(path: str) -> str:
    return path.lstrip("/")


def v1_mount_dir(cgroup_root: Path, controller: str) -> Path | None:
    """Where a v1 controller is mounted under cgroup_root: its own name (often a symlink to a co-mount such as
    'cpu,cpuacct'), else any directory whose comma-separated name lists it."""
    direct = cgroup_root / controller
    if direct.is_dir():
        return direct
    try:
        entries = sorted(cgroup_root.iterdir())
    except OSError:
        return None
    return next((e for e in entries if controller in e.name.split(",") and e.is_dir()), None)


def v2_root(cgroup_root: Path) -> Path | None:
    """The cgroup2 mount: cgroup_root itself (pure v2) or cgroup_root/unified (hybrid)."""
    for d in (cgroup_root, cgroup_root / "unified"):
        if (d / "cgroup.controllers").is_file():
            return d
    return None


def _pressure(r: _Reader, d: Path | None) -> tuple[PressureReading | None, ...]:
    return tuple(r.parsed(d, f"{res}.pressure", parse_pressure) for res in _PRESSURE_RESOURCES)


def _v1_level(r: _Reader, path: str, dirs: dict[str, Path]) -> CgroupLevel:
    for name, d in dirs.items():
        if not d.is_dir():
            r.errors.append(f"{d}: the cgroup directory ({name}) is absent: the cgroup went away while being read")
    cpu_dir, acct_dir = dirs.get("cpu"), dirs.get("cpuacct")
    cpu: CpuReading | None = None
    if cpu_dir is not None or acct_dir is not None:
        stat = r.parsed(cpu_dir, "cpu.stat", parse_keyed_ints)
        cpu = CpuReading(
            quota_us=r.parsed(cpu_dir, "cpu.cfs_quota_us", parse_limit),
            period_us=r.parsed(cpu_dir, "cpu.cfs_period_us", parse_int),
            shares=r.parsed(cpu_dir, "cpu.shares", parse_int),
            usage_ns=r.parsed(acct_dir, "cpuacct.usage", parse_int),
            nr_periods=stat.get("nr_periods") if stat is not None else None,
            nr_throttled=stat.get("nr_throttled") if stat is not None else None,
            throttled_ns=stat.get("throttled_time") if stat is not None else None,
            stat=stat,
        )
    mem_dir = dirs.get("memory")
    memory: MemoryReading | None = None
    if mem_dir is not None:
        oom = r.parsed(mem_dir, "memory.oom_control", parse_keyed_ints)
        memory = MemoryReading(
            usage_bytes=r.parsed(mem_dir, "memory.usage_in_bytes", parse_int),
            max_usage_bytes=r.parsed(mem_dir, "memory.max_usage_in_bytes", parse_int),
            limit_bytes=r.parsed(mem_dir, "memory.limit_in_bytes", _memory_limit),
            high_bytes=None,
            memsw_limit_bytes=r.parsed(mem_dir, "memory.memsw.limit_in_bytes", _memory_limit),
            swap_max_bytes=None,
            failcnt=r.parsed(mem_dir, "memory.failcnt", parse_int),
            oom_kill=oom.get("oom_kill") if oom is not None else None,
            under_oom=bool(oom["under_oom"]) if oom is not None and "under_oom" in oom else None,
            events=None,
            stat=r.parsed(mem_dir, "memory.stat", parse_keyed_ints),
        )
    cs_dir = dirs.get("cpuset")
    cpuset = None
    if cs_dir is not None:
        cpuset = CpusetReading(
            cpus=r.parsed(cs_dir, "cpuset.cpus", parse_str),
            mems=r.parsed(cs_dir, "cpuset.mems", parse_str),
            cpus_effective=r.parsed(cs_dir, "cpuset.effective_cpus", parse_str),
            mems_effective=r.parsed(cs_dir, "cpuset.effective_mems", parse_str),
        )
    pids_dir = dirs.get("pids")
    pids = None
    if pids_dir is not None:
        pids = PidsReading(r.parsed(pids_dir, "pids.max", parse_limit), r.parsed(pids_dir, "pids.current", parse_int))
    cpu_p, mem_p, io_p = _pressure(r, dirs.get("pressure"))
    return CgroupLevel(path, {k: str(v) for k, v in dirs.items()}, cpu, memory, cpuset, pids, cpu_p, mem_p, io_p)


def _v2_level(r: _Reader, path: str, d: Path) -> CgroupLevel:
    if not d.is_dir():
        r.errors.append(f"{d}: the cgroup directory is absent: the cgroup went away while being read")
    cpu_max = r.parsed(d, "cpu.max", parse_cpu_max)
    stat = r.parsed(d, "cpu.stat", parse_keyed_ints) or {}

    def times_1000(key: str) -> int | None:
        v = stat.get(key)
        return v * 1000 if v is not None else None

    cpu = CpuReading(
        quota_us=cpu_max[0] if cpu_max else None,
        period_us=cpu_max[1] if cpu_max else None,
        shares=None,
        usage_ns=times_1000("usage_usec"),
        nr_periods=stat.get("nr_periods"),
        nr_throttled=stat.get("nr_throttled"),
        throttled_ns=times_1000("throttled_usec"),
        stat=stat or None,
    )
    events = r.parsed(d, "memory.events", parse_keyed_ints)
    memory = MemoryReading(
        usage_bytes=r.parsed(d, "memory.current", parse_int),
        max_usage_bytes=r.parsed(d, "memory.peak", parse_int),
        limit_bytes=r.parsed(d, "memory.max", parse_limit),
        high_bytes=r.parsed(d, "memory.high", parse_limit),
        memsw_limit_bytes=None,
        swap_max_bytes=r.parsed(d, "memory.swap.max", parse_limit),
        failcnt=None,
        oom_kill=events.get("oom_kill") if events is not None else None,
        under_oom=None,
        events=events,
        stat=r.parsed(d, "memory.stat", parse_keyed_ints),
    )
    cpuset = CpusetReading(
        cpus=r.parsed(d, "cpuset.cpus", parse_str),
        mems=r.parsed(d, "cpuset.mems", parse_str),
        cpus_effective=r.parsed(d, "cpuset.cpus.effective", parse_str),
        mems_effective=r.parsed(d, "cpuset.mems.effective", parse_str),
    )
    pids = PidsReading(r.parsed(d, "pids.max", parse_limit), r.parsed(d, "pids.current", parse_int))
    cpu_p, mem_p, io_p = _pressure(r, d)
    return CgroupLevel(path, {"cgroup2": str(d)}, cpu, memory, cpuset, pids, cpu_p, mem_p, io_p)


def _innermost_first(paths: set[str]) -> list[str]:
    return sorted(paths, key=lambda p: (-len(PurePosixPath(p).parts), p))


def cgroup_snapshot(
    pid: int, proc_root: Path = DEFAULT_PROC_ROOT, cgroup_root: Path = DEFAULT_CGROUP_ROOT
) -> CgroupSnapshot:
    """The cgroup readings of `pid` and of each ancestor cgroup up to the root, innermost first.

    cgroup v1 when /proc/<pid>/cgroup places the process in a v1 controller hierarchy (on a hybrid host the
    pressure files then come from the unified hierarchy, which carries PSI for every cgroup); v2 when the
    `0::/path` line is all there is. Never raises for a missing or odd file: that reads as None, with an error
    line where the file was there but unreadable.
    """
    r = _Reader()
    taken_mono_s, taken_wall = time.monotonic(), _now_wall()

    def result(
        status: Status,
        reason: str | None,
        version: CgroupVersion | None = None,
        memberships: list[CgroupMembership] | None = None,
        levels: list[CgroupLevel] | None = None,
    ) -> CgroupSnapshot:
        return CgroupSnapshot(
            schema_version=SCHEMA_VERSION,
            status=status,
            reason=reason,
            version=version,
            pid=pid,
            proc_root=str(proc_root),
            cgroup_root=str(cgroup_root),
            taken_mono_s=taken_mono_s,
            taken_wall=taken_wall,
            memberships=memberships or [],
            levels=levels or [],
            errors=r.errors,
            raw=r.raw,
        )

    cgroup_file = proc_root / str(pid) / "cgroup"
    text = r.text(cgroup_file)
    if text is None:
        return result("failed", f"cannot read {cgroup_file}: process {pid} is not running in this PID namespace")
    try:
        memberships = parse_proc_cgroup(text)
    except ValueError as e:
        return result("failed", f"cannot parse {cgroup_file}: {e}")
    if not cgroup_root.is_dir():
        return result(
            "skipped",
            f"no cgroup file system at {cgroup_root}: mount the host's /sys/fs/cgroup read-only there "
            "and pass it with --cgroup-root",
        )
    escaped = [m.path for m in memberships if ".." in PurePosixPath(m.path).parts]
    if escaped:
        return result(
            "failed",
            f"{cgroup_file} shows cgroup paths relative to a cgroup namespace ({escaped[0]}): "
            "run the probe with --cgroupns host",
            memberships=memberships,
        )

    v1_paths = {c: m.path for m in memberships if m.hierarchy_id != 0 for c in m.controllers if c in _V1_CONTROLLERS}
    unified = next((m.path for m in memberships if m.hierarchy_id == 0), None)
    if v1_paths:
        chains: dict[str, tuple[Path, list[str]]] = {}
        for controller, path in v1_paths.items():
            mount = v1_mount_dir(cgroup_root, controller)
            if mount is None:
                r.errors.append(f"controller {controller} is not mounted under {cgroup_root}")
            else:
                chains[controller] = (mount, cgroup_ancestors(path))
        v2 = v2_root(cgroup_root)
        if unified is not None and v2 is not None:
            chains["pressure"] = (v2, cgroup_ancestors(unified))
        if not chains:
            return result(
                "failed",
                f"none of the controllers {sorted(v1_paths)} is mounted under {cgroup_root}",
                "v1",
                memberships,
            )
        all_paths = {p for _, chain in chains.values() for p in chain}
        levels = [
            _v1_level(
                r, path, {c: mount / _relative(path) for c, (mount, chain) in sorted(chains.items()) if path in chain}
            )
            for path in _innermost_first(all_paths)
        ]
        return result("successful", None, "v1", memberships, levels)
    if unified is None:
        return result(
            "failed", f"{cgroup_file} has neither a v1 controller line nor a v2 '0::' line", None, memberships
        )
    v2 = v2_root(cgroup_root)
    if v2 is None:
        return result(
            "failed",
            f"process {pid} is in a cgroup v2 hierarchy, but neither {cgroup_root} nor {cgroup_root / 'unified'} "
            "holds cgroup.controllers: mount the host's /sys/fs/cgroup there",
            "v2",
            memberships,
        )
    levels = [_v2_level(r, path, v2 / _relative(path)) for path in cgroup_ancestors(unified)]
    return result("successful", None, "v2", memberships, levels)


# --- cgroup delta -----------------------------------------------------------------------------------------


def _stall_us(level: CgroupLevel, resource: str, kind: str) -> int | None:
    reading: PressureReading | None = getattr(level, f"{resource}_pressure")
    line: PressureLine | None = getattr(reading, kind) if reading is not None else None
    return line.total_us if line is not None else None


def _level_delta(b: CgroupLevel, a: CgroupLevel) -> LevelDelta:
    bc, ac, bm, am = b.cpu, a.cpu, b.memory, a.memory
    pairs: dict[str, tuple[int | None, int | None]] = {
        "cpu usage_ns": (bc.usage_ns if bc else None, ac.usage_ns if ac else None),
        "cpu nr_periods": (bc.nr_periods if bc else None, ac.nr_periods if ac else None),
        "cpu nr_throttled": (bc.nr_throttled if bc else None, ac.nr_throttled if ac else None),
        "cpu throttled_ns": (bc.throttled_ns if bc else None, ac.throttled_ns if ac else None),
        "memory failcnt": (bm.failcnt if bm else None, am.failcnt if am else None),
        "memory oom_kill": (bm.oom_kill if bm else None, am.oom_kill if am else None),
    }
    for resource in _PRESSURE_RESOURCES:
        for kind in ("some", "full"):
            pairs[f"{resource}.pressure {kind}"] = (_stall_us(b, resource, kind), _stall_us(a, resource, kind))
    events_b = bm.events if bm else None
    events_a = am.events if am else None
    if events_b is not None and events_a is not None:
        for key in events_a:
            pairs[f"memory.events {key}"] = (events_b.get(key), events_a[key])

    down = [(k, x, y) for k, (x, y) in pairs.items() if x is not None and y is not None and y < x]
    notes = [f"{k} went down from {x} to {y}" for k, x, y in down]
    if down:
        notes.append(
            "the cgroup was made anew in the window: each figure of this level is the count since, a lower bound"
        )

    def inc(key: str) -> int | None:
        x, y = pairs.get(key, (None, None))
        if x is None or y is None:
            return None
        return y if down else y - x

    def seconds(key: str, per_s: float) -> float | None:
        v = inc(key)
        return v / per_s if v is not None else None

    nr_periods, nr_throttled = inc("cpu nr_periods"), inc("cpu nr_throttled")
    events_inc = (
        {k: v for k in events_a if (v := inc(f"memory.events {k}")) is not None} if events_a and events_b else None
    )
    return LevelDelta(
        path=a.path,
        cpu_usage_s=seconds("cpu usage_ns", 1e9),
        nr_periods=nr_periods,
        nr_throttled=nr_throttled,
        throttled_s=seconds("cpu throttled_ns", 1e9),
        throttled_share=nr_throttled / nr_periods if nr_periods and nr_throttled is not None else None,
        memory_failcnt_increase=inc("memory failcnt"),
        oom_kill_increase=inc("memory oom_kill"),
        memory_events_increase=events_inc,
        memory_usage_before_bytes=bm.usage_bytes if bm else None,
        memory_usage_after_bytes=am.usage_bytes if am else None,
        memory_max_usage_bytes=am.max_usage_bytes if am else None,
        cpu_some_stall_s=seconds("cpu.pressure some", 1e6),
        cpu_full_stall_s=seconds("cpu.pressure full", 1e6),
        memory_some_stall_s=seconds("memory.pressure some", 1e6),
        memory_full_stall_s=seconds("memory.pressure full", 1e6),
        io_some_stall_s=seconds("io.pressure some", 1e6),
        io_full_stall_s=seconds("io.pressure full", 1e6),
        reset_detected=bool(down),
        notes=notes,
    )


def cgroup_delta(before: CgroupSnapshot, after: CgroupSnapshot) -> CgroupDelta:
    """What each cgroup in both snapshots counted between them, matched by cgroup path.

    A level in one snapshot only (the container restarted under a new ID, or moved) sets `levels_changed`;
    a counter that went down (the cgroup was made anew under the same path) sets the level's `reset_detected`.
    """
    if after.taken_mono_s < before.taken_mono_s:
        raise ValueError(
            f"'after' was taken before 'before' ({after.taken_mono_s} < {before.taken_mono_s} s, monotonic)"
        )
    notes: list[str] = []
    for name, snap in (("before", before), ("after", after)):
        if snap.status != "successful":
            notes.append(f"the {name} snapshot is {snap.status}: {snap.reason}")
    if before.version != after.version:
        notes.append(f"the cgroup version changed from {before.version} to {after.version}")
    if before.pid != after.pid:
        notes.append(f"the snapshots are of different processes ({before.pid} and {after.pid})")
    b_levels = {lv.path: lv for lv in before.levels}
    a_paths = [lv.path for lv in after.levels]
    only_before = [p for p in b_levels if p not in set(a_paths)]
    only_after = [p for p in a_paths if p not in b_levels]
    changed = bool(only_before or only_after) or before.version != after.version
    if only_before or only_after:
        notes.append(
            f"the cgroups differ: only before {only_before}, only after {only_after}: "
            "the container restarted or moved; only the cgroups in both are compared"
        )
    levels = [_level_delta(b_levels[lv.path], lv) for lv in after.levels if lv.path in b_levels]
    return CgroupDelta(
        schema_version=SCHEMA_VERSION,
        pid_before=before.pid,
        pid_after=after.pid,
        window_s=after.taken_mono_s - before.taken_mono_s,
        before_taken_wall=before.taken_wall,
        after_taken_wall=after.taken_wall,
        levels_changed=changed,
        levels_only_before=only_before,
        levels_only_after=only_after,
        reset_detected=any(lv.reset_detected for lv in levels),
        levels=levels,
        notes=notes,
    )


def host_state_cgroup_delta(before: HostState, after: HostState) -> dict[str, Any]:
    """`cgroup_delta` of two `snapshot`s' cgroup readings, as a JSON-ready dict (dataclasses.asdict)."""
    return asdict(cgroup_delta(before.cgroup, after.cgroup))


# --- per-process and host readings ------------------------------------------------------------------------


def read_limits(pid: int, proc_root: Path = DEFAULT_PROC_ROOT) -> LimitsReading:
    """/proc/<pid>/limits parsed: {row name: ProcLimit(soft, hard, units)}, 'unlimited' as None."""
    path = proc_root / str(pid) / "limits"
    raw: dict[str, str | None] = {str(path): None}

    def result(status: Status, reason: str | None, limits: dict[str, ProcLimit] | None = None) -> LimitsReading:
        return LimitsReading(SCHEMA_VERSION, pid, status, reason, str(path), limits or {}, raw)

    try:
        text = raw[str(path)] = _read_raw(path)
    except OSError as e:
        return result("failed", f"cannot read {path}: {_why(e)}")
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
        text = raw[str(path)] = _read_raw(path)
    except PermissionError as e:
        return result(
            "skipped",
            f"reading {path} {NEEDS_PTRACE} ({_why(e)}): run the probe container with --cap-add SYS_PTRACE",
        )
    except FileNotFoundError:
        return result("failed", f"{path} is absent: process {pid} exited, or the kernel predates smaps_rollup (4.14)")
    except OSError as e:
        return result("failed", f"cannot read {path}: {_why(e)}")
    fields, pss = parse_smaps_rollup(text)
    if pss is None:
        return result("failed", f"{path} has no Pss line (a kernel thread or an exiting process)", fields)
    return result("successful", None, fields, pss)


def read_meminfo(proc_root: Path = DEFAULT_PROC_ROOT) -> MeminfoReading:
    """/proc/meminfo: kB values and the unitless HugePages_* counts."""
    path = proc_root / "meminfo"
    raw: dict[str, str | None] = {str(path): None}
    try:
        text = raw[str(path)] = _read_raw(path)
    except OSError as e:
        return MeminfoReading(SCHEMA_VERSION, "failed", f"cannot read {path}: {_why(e)}", str(path), {}, {}, raw)
    values_kb, counts = parse_meminfo(text)
    if "MemTotal" not in values_kb:
        return MeminfoReading(
            SCHEMA_VERSION, "failed", f"{path} has no MemTotal line", str(path), values_kb, counts, raw
        )
    return MeminfoReading(SCHEMA_VERSION, "successful", None, str(path), values_kb, counts, raw)


def _as_int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int | str):
        raise ValueError(f"not a number: {v!r}")
    return int(v)


def parse_fincore_json(text: str) -> list[FileResidency]:
    """`fincore --json --bytes --output RES,PAGES,SIZE,FILE` (util-linux 2.38) into per-file residency."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"fincore's output is not JSON: {e}") from None
    rows = data.get("fincore") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise ValueError("fincore's JSON has no 'fincore' list")
    out: list[FileResidency] = []
    for row in rows:
        if not isinstance(row, dict) or not {"res", "pages", "size", "file"} <= row.keys():
            raise ValueError(f"fincore row lacks res, pages, size or file: {row!r}")
        size, res = _as_int(row["size"]), _as_int(row["res"])
        pct = min(res, size) / size * 100.0 if size > 0 else None
        out.append(FileResidency(str(row["file"]), size, res, _as_int(row["pages"]), pct))
    return out


def fincore(
    paths: Sequence[Path],
    *,
    binary: str = "fincore",
    timeout_s: float = DEFAULT_FINCORE_TIMEOUT_S,
    none_given: str = "no data files given (--data-file)",
) -> FincoreReading:
    """Page-cache residency of each file, by util-linux fincore (which opens them read-only and reads no data).

    `binary` is the program to run (a name looked up on PATH, or a path); absent, the reading is skipped.
    """
    names = list(dict.fromkeys(str(p) for p in paths))
    raw: dict[str, str | None] = {}

    def result(
        status: Status,
        reason: str | None,
        argv: list[str] | None = None,
        exit_code: int | None = None,
        timed_out: bool = False,
        duration_s: float = 0.0,
        files: list[FileResidency] | None = None,
        missing: list[str] | None = None,
    ) -> FincoreReading:
        return FincoreReading(
            SCHEMA_VERSION,
            status,
            reason,
            argv or [],
            exit_code,
            timed_out,
            duration_s,
            files or [],
            missing or [],
            raw,
        )

    if not names:
        return result("skipped", none_given)
    found = shutil.which(binary)
    if found is None:
        return result("skipped", FINCORE_NOT_FOUND)
    argv = [found, "--json", "--bytes", "--output", FINCORE_COLUMNS, "--", *names]
    started = time.monotonic()
    try:
        done = run_bounded(argv, timeout_s)
    except OSError as e:
        return result("failed", f"cannot run {found}: {_why(e)}", argv)
    duration_s = round(time.monotonic() - started, 3)
    raw["fincore/stdout.json"] = bound_raw(done.stdout.encode())
    raw["fincore/stderr.txt"] = bound_raw(done.stderr.encode())
    if done.timed_out:
        return result(
            "failed", f"fincore did not finish within {timeout_s:g} s and was terminated", argv, done.exit_code, True
        )
    files: list[FileResidency] = []
    reason: str | None = None
    if done.stdout.strip():
        try:
            files = parse_fincore_json(done.stdout)
        except ValueError as e:
            reason = str(e)
    got = {f.path for f in files}
    missing = [n for n in names if n not in got]
    if reason is None and missing:
        stderr = "; ".join(line.strip() for line in done.stderr.splitlines() if line.strip()) or "(no stderr)"
        reason = f"fincore gave no figure for {missing} (exit {done.exit_code}): {stderr}"
    if reason is None and done.exit_code != 0:
        reason = f"fincore exited with status {done.exit_code}: {done.stderr.strip()[-200:]}"
    status: Status = "failed" if reason else "successful"
    return result(status, reason, argv, done.exit_code, False, duration_s, files, missing)


def _comm(pid: int, proc_root: Path) -> str | None:
    try:
        return (proc_root / str(pid) / "comm").read_text(errors="replace").strip()
    except OSError:
        return None


# --- snapshot ---------------------------------------------------------------------------------------------


def check_inputs(pids: Sequence[int], data_files: Sequence[Path], proc_root: Path = DEFAULT_PROC_ROOT) -> None:
    """Raise HostStateInputError unless every PID is running here and every data file is a regular file."""
    if not pids:
        raise HostStateInputError("no PID given: pass --pid with the serving container's PID 1 (and others)")
    seen: set[int] = set()
    for pid in pids:
        if pid in seen:
            raise HostStateInputError(f"PID {pid} is given twice")
        seen.add(pid)
        if pid < 1 or not (proc_root / str(pid)).is_dir():
            raise HostStateInputError(
                f"process {pid} is not running here (no {proc_root / str(pid)}): the probe container must share "
                "the serving container's PID namespace (docker run --pid container:refdeploy-vllm)"
            )
    for f in data_files:
        if not f.is_file():
            what = "does not exist" if not f.exists() else "is not a regular file"
            raise HostStateInputError(f"data file {f} {what}: give a file the serving stack reads, mounted read-only")


def snapshot(
    pids: Sequence[int],
    data_files: Sequence[Path] = (),
    proc_root: Path = DEFAULT_PROC_ROOT,
    cgroup_root: Path = DEFAULT_CGROUP_ROOT,
    *,
    fincore_binary: str = "fincore",
    fincore_timeout_s: float = DEFAULT_FINCORE_TIMEOUT_S,
    no_data_files: str = "",
) -> HostState:
    """Everything at once: the cgroup of the first PID (the container's PID 1), limits and smaps_rollup of each
    PID, /proc/meminfo, and the page-cache residency of the data files. Bad input raises HostStateInputError
    before anything is read; a reading that cannot be taken says why in its status and reason (`no_data_files`:
    why no data file was given, for the page-cache reading's skip reason)."""
    check_inputs(pids, data_files, proc_root)
    taken_mono_s, taken_wall = time.monotonic(), _now_wall()
    cgroup = cgroup_snapshot(pids[0], proc_root, cgroup_root)
    processes = [
        ProcessState(pid, _comm(pid, proc_root), read_limits(pid, proc_root), read_smaps_rollup(pid, proc_root))
        for pid in pids
    ]
    return HostState(
        schema_version=SCHEMA_VERSION,
        taken_mono_s=taken_mono_s,
        taken_wall=taken_wall,
        proc_root=str(proc_root),
        cgroup_root=str(cgroup_root),
        pids=list(pids),
        data_files=[str(f) for f in data_files],
        cgroup=cgroup,
        processes=processes,
        meminfo=read_meminfo(proc_root),
        page_cache=fincore(
            data_files,
            binary=fincore_binary,
            timeout_s=fincore_timeout_s,
            none_given=f"no data file to read: {no_data_files}"
            if no_data_files
            else "no data files given (--data-file)",
        ),
    )


def raw_relpath(source: str) -> PurePosixPath:
    """Where under OUT a raw text is kept: raw/<source without its leading '/'>, '..' parts dropped."""
    parts = [p for p in PurePosixPath(source.lstrip("/")).parts if p not in ("..", ".")]
    return PurePosixPath(RAW_DIR, *(parts or ["unnamed"]))


def _externalise_raw(node: Any, out_dir: Path) -> Any:
    """Write every `raw` map's texts under out_dir/raw/ and put their relative file names in its place."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "raw" and isinstance(value, dict):
                files: dict[str, str | None] = {}
                for source, text in value.items():
                    if text is None:
                        files[source] = None
                        continue
                    rel = raw_relpath(source)
                    dest = out_dir / rel
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_text(bound_raw(text.encode()))
                    files[source] = str(rel)
                out[key] = files
            else:
                out[key] = _externalise_raw(value, out_dir)
        return out
    if isinstance(node, list):
        return [_externalise_raw(item, out_dir) for item in node]
    return node


def write_host_state(state: HostState, out_dir: Path) -> Path:
    """Write OUT/host-state.json and the raw texts under OUT/raw/; return the JSON file's path.

    In the JSON each `raw` map gives, for every source file, the file under OUT that holds its text (null: the
    source was absent). Raises OSError when the directory cannot be written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = _externalise_raw(asdict(state), out_dir)
    path = out_dir / HOST_STATE_FILE
    path.write_text(json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n")
    return path


# --- report -----------------------------------------------------------------------------------------------


def _mib(n_bytes: float) -> str:
    return f"{n_bytes / (1 << 20):,.1f} MiB"


def _size(n_bytes: int) -> str:
    return _mib(n_bytes) if n_bytes >= 1 << 20 else f"{n_bytes / 1024:,.1f} KiB"


def _limit_text(limit: Limit | None) -> str:
    if limit is None:
        return "unknown"
    return "none" if limit.unlimited or limit.value is None else _mib(limit.value)


def _cgroup_lines(c: CgroupSnapshot) -> list[str]:
    if c.status != "successful" or not c.levels:
        return [f"cgroup: {c.status.upper()}: {c.reason}"]
    inner = c.levels[0]
    lines = [f"cgroup {c.version} {inner.path} (pid {c.pid}; {len(c.levels)} levels read)"]
    mem_level = next((lv for lv in c.levels if lv.memory and lv.memory.usage_bytes is not None), None)
    if mem_level is not None and mem_level.memory is not None:
        m = mem_level.memory
        own = m.limit_bytes.value if m.limit_bytes is not None and m.limit_bytes.value is not None else math.inf
        # An ancestor's limit binds the container too: name it when it is the tighter one.
        tighter = [
            (lv.memory.limit_bytes.value, lv.path)
            for lv in c.levels
            if lv.memory and lv.memory.limit_bytes and lv.memory.limit_bytes.value is not None
            if lv.memory.limit_bytes.value < own
        ]
        tightest = f"; tighter limit {_mib(min(tighter)[0])} at {min(tighter)[1]}" if tighter else ""
        oom = f", oom_kill {m.oom_kill}" if m.oom_kill is not None else ""
        usage = m.usage_bytes if m.usage_bytes is not None else 0
        lines.append(
            f"  memory at {mem_level.path}: {_mib(usage)} used, limit {_limit_text(m.limit_bytes)}{tightest}{oom}"
        )
    cpu = next((lv.cpu for lv in c.levels if lv.cpu and lv.cpu.nr_periods is not None), None)
    if cpu is not None:
        quota = "none"
        if cpu.quota_us and cpu.quota_us.value is not None and cpu.period_us:
            quota = f"{cpu.quota_us.value / cpu.period_us:g} CPUs"
        throttled_s = (cpu.throttled_ns or 0) / 1e9
        lines.append(
            f"  cpu quota {quota}: throttled in {cpu.nr_throttled} of {cpu.nr_periods} periods ({throttled_s:.3f} s)"
        )
    pressure = []
    for res in _PRESSURE_RESOURCES:
        reading: PressureReading | None = getattr(inner, f"{res}_pressure")
        if reading is not None and reading.some is not None:
            full = f", full {reading.full.avg10_pct:.2f}%" if reading.full is not None else ""
            pressure.append(f"{res} some {reading.some.avg10_pct:.2f}%{full}")
    if pressure:
        lines.append("  pressure (10 s average): " + "; ".join(pressure))
    return lines


def format_summary(state: HostState, out_dir: Path | None = None) -> str:
    where = f" -> {out_dir / HOST_STATE_FILE}" if out_dir is not None else ""
    lines = [f"host state at {state.taken_wall} of PIDs {', '.join(map(str, state.pids))}{where}"]
    lines += _cgroup_lines(state.cgroup)
    for p in state.processes:
        s = p.smaps_rollup
        name = f"pid {p.pid} ({p.comm or '?'})"
        if s.pss is None:
            lines.append(f"{name}: smaps_rollup {s.status}: {s.reason}")
        else:
            kib = 1024
            split = [("anon", s.pss.pss_anon_kb), ("file", s.pss.pss_file_kb), ("shmem", s.pss.pss_shmem_kb)]
            parts = " + ".join(f"{k} {_mib(v * kib)}" for k, v in split if v is not None)
            lines.append(f"{name}: PSS {_mib(s.pss.pss_kb * kib)}" + (f" = {parts}" if parts else ""))
        if p.limits.status != "successful":
            lines.append(f"  limits {p.limits.status}: {p.limits.reason}")
    mi = state.meminfo
    if mi.status == "successful":
        total, avail = mi.values_kb.get("MemTotal"), mi.values_kb.get("MemAvailable")
        cached = mi.values_kb.get("Cached")
        if total is not None and avail is not None:
            extra = f", page cache {_mib(cached * 1024)}" if cached is not None else ""
            lines.append(f"host memory: {_mib(avail * 1024)} available of {_mib(total * 1024)}{extra}")
    else:
        lines.append(f"host memory: {mi.status}: {mi.reason}")
    pc = state.page_cache
    for f in pc.files:
        pct = f"{f.resident_pct:.1f}%" if f.resident_pct is not None else "empty file"
        cached = min(f.resident_bytes, f.size_bytes)  # fincore counts whole pages
        lines.append(f"page cache: {f.path}: {pct} resident ({_size(cached)} of {_size(f.size_bytes)})")
    if pc.status != "successful":
        lines.append(f"page cache: {pc.status}: {pc.reason}")
    return "\n".join(lines) + "\n"


# --- CLI --------------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line on stderr, exit 2
        print(f"{self.prog}: {message}", file=sys.stderr)
        raise SystemExit(2)


def check_out_dir(out_dir: Path) -> None:
    """Create out_dir (new or empty); raise HostStateInputError when that cannot be done."""
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise HostStateInputError(f"output directory {out_dir} exists and is not empty: give a new --out directory")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise HostStateInputError(f"cannot create output directory {out_dir}: {_why(e)}") from None


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="python -m probes.hoststate", description="snapshot the host state of serving processes")
    p.add_argument("--pid", required=True, type=int, action="append", help="PID to read; the first is the container's")
    p.add_argument(
        "--data-file", type=Path, action="append", default=[], help="file whose page-cache residency to read"
    )
    p.add_argument("--cgroup-root", type=Path, default=DEFAULT_CGROUP_ROOT, help="where the host's cgroup fs is")
    p.add_argument("--proc-root", type=Path, default=DEFAULT_PROC_ROOT, help="where proc is mounted (default /proc)")
    p.add_argument("--out", required=True, type=Path, help="new or empty directory for the artifacts")
    p.add_argument("--fincore-timeout", type=float, default=DEFAULT_FINCORE_TIMEOUT_S, help="seconds (default 60)")
    a = p.parse_args(argv)
    if not math.isfinite(a.fincore_timeout) or a.fincore_timeout <= 0:
        p.error(f"--fincore-timeout must be a positive number of seconds, got {a.fincore_timeout}")
    try:
        check_inputs(a.pid, a.data_file, a.proc_root)
        check_out_dir(a.out)
        state = snapshot(a.pid, a.data_file, a.proc_root, a.cgroup_root, fincore_timeout_s=a.fincore_timeout)
    except HostStateInputError as e:
        print(f"{p.prog}: {e}", file=sys.stderr)
        return 2
    try:
        write_host_state(state, a.out)
    except OSError as e:
        print(f"{p.prog}: could not write the snapshot to {a.out}: {_why(e)}", file=sys.stderr)
        return 1
    sys.stdout.write(format_summary(state, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
