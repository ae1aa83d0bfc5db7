"""The cgroup of a process and each ancestor up to the root, innermost first, on cgroup v1, hybrid or v2: CPU
quota, usage and throttling; memory usage, limits, failcnt and OOM kills; cpuset; pids; pressure (PSI). Every
file read is kept (its raw text) beside the figure parsed from it.

"No limit" is `Limit(value=None, unlimited=True)`, whatever the kernel's spelling ("max" in v2, -1 for
cpu.cfs_quota_us, a page-aligned LONG_MAX for v1 memory limits); a file that is absent reads as None.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal, TypeVar

from probes.base.rawtext import now_wall, read_raw, why

SCHEMA_VERSION = 1
DEFAULT_PROC_ROOT = Path("/proc")
DEFAULT_CGROUP_ROOT = Path("/sys/fs/cgroup")
# cgroup v1 says "no memory limit" with LONG_MAX rounded down to a page (9223372036854771712 with 4 KiB
# pages); anything this large is no limit.
_V1_NO_LIMIT_FROM = 1 << 62
_V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids")
PRESSURE_RESOURCES = ("cpu", "memory", "io")

Status = Literal["successful", "failed", "skipped"]
CgroupVersion = Literal["v1", "v2"]
_T = TypeVar("_T")


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
            text = read_raw(path)
        except (FileNotFoundError, NotADirectoryError):
            text = None
        except OSError as e:  # EACCES, EOPNOTSUPP (PSI switched off for the cgroup), ENODEV
            text = None
            self.errors.append(f"{path}: {why(e)}")
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
    return tuple(r.parsed(d, f"{res}.pressure", parse_pressure) for res in PRESSURE_RESOURCES)


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


def _v1_levels(
    r: _Reader, v1_paths: dict[str, str], unified: str | None, cgroup_root: Path
) -> list[CgroupLevel] | None:
    """cgroup v1 (or hybrid): each level's readings, from every controller's hierarchy that places it, and
    pressure from the unified hierarchy where there is one; None when no controller is mounted."""
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
        return None
    all_paths = {p for _, chain in chains.values() for p in chain}
    return [
        _v1_level(
            r, path, {c: mount / _relative(path) for c, (mount, chain) in sorted(chains.items()) if path in chain}
        )
        for path in _innermost_first(all_paths)
    ]


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
    taken_mono_s, taken_wall = time.monotonic(), now_wall()

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
    status, reason, version, levels = _hierarchy_levels(r, pid, memberships, cgroup_file, cgroup_root)
    return result(status, reason, version, memberships, levels)


def _hierarchy_levels(
    r: _Reader, pid: int, memberships: list[CgroupMembership], cgroup_file: Path, cgroup_root: Path
) -> tuple[Status, str | None, CgroupVersion | None, list[CgroupLevel]]:
    """(status, reason, version, levels) of the walk up the hierarchy the memberships place the process in.

    v1 when any membership is a v1 controller line, else v2 from the `0::` line; a hierarchy not found under
    cgroup_root fails, with the reason and no levels. cgroup_snapshot has read and checked the memberships.
    """
    v1_paths = {c: m.path for m in memberships if m.hierarchy_id != 0 for c in m.controllers if c in _V1_CONTROLLERS}
    unified = next((m.path for m in memberships if m.hierarchy_id == 0), None)
    if v1_paths:
        v1_levels = _v1_levels(r, v1_paths, unified, cgroup_root)
        if v1_levels is None:
            return "failed", f"none of the controllers {sorted(v1_paths)} is mounted under {cgroup_root}", "v1", []
        return "successful", None, "v1", v1_levels
    if unified is None:
        return "failed", f"{cgroup_file} has neither a v1 controller line nor a v2 '0::' line", None, []
    v2 = v2_root(cgroup_root)
    if v2 is None:
        reason = (
            f"process {pid} is in a cgroup v2 hierarchy, but neither {cgroup_root} nor {cgroup_root / 'unified'} "
            "holds cgroup.controllers: mount the host's /sys/fs/cgroup there"
        )
        return "failed", reason, "v2", []
    return "successful", None, "v2", [_v2_level(r, path, v2 / _relative(path)) for path in cgroup_ancestors(unified)]


# --- a snapshot read back, and the command line --------------------------------------------------------------


def _limit(d: dict[str, object] | None) -> Limit | None:
    return None if d is None else Limit(value=d.get("value"), unlimited=bool(d.get("unlimited")))  # type: ignore[arg-type]


def _pressure_line(d: dict[str, float] | None) -> PressureLine | None:
    return None if d is None else PressureLine(**d)  # type: ignore[arg-type]


def _pressure_from_json(d: dict[str, dict[str, float] | None] | None) -> PressureReading | None:
    return None if d is None else PressureReading(_pressure_line(d.get("some")), _pressure_line(d.get("full")))


_MEMORY_LIMITS = ("limit_bytes", "high_bytes", "memsw_limit_bytes", "swap_max_bytes")


def snapshot_from_json(d: dict[str, object]) -> CgroupSnapshot:
    """A CgroupSnapshot from its JSON (dataclasses.asdict, as `python -m probes.readers.cgroups` prints it): the bench
    reads the server's cgroup before and after it in two probe containers, and the controller takes the delta."""
    levels = []
    for lv in d["levels"]:  # type: ignore[attr-defined]
        cpu, mem, cs, pids = lv["cpu"], lv["memory"], lv["cpuset"], lv["pids"]
        levels.append(CgroupLevel(
            path=lv["path"], dirs=lv["dirs"],
            cpu=None if cpu is None else CpuReading(**{**cpu, "quota_us": _limit(cpu["quota_us"])}),
            memory=None if mem is None else MemoryReading(**{**mem, **{k: _limit(mem[k]) for k in _MEMORY_LIMITS}}),
            cpuset=None if cs is None else CpusetReading(**cs),
            pids=None if pids is None else PidsReading(max=_limit(pids["max"]), current=pids["current"]),
            cpu_pressure=_pressure_from_json(lv["cpu_pressure"]),
            memory_pressure=_pressure_from_json(lv["memory_pressure"]),
            io_pressure=_pressure_from_json(lv["io_pressure"]),
        ))  # fmt: skip
    fields = {k: v for k, v in d.items() if k not in ("memberships", "levels")}
    members = [CgroupMembership(**m) for m in d["memberships"]]  # type: ignore[attr-defined]
    return CgroupSnapshot(**fields, memberships=members, levels=levels)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    """`python -m probes.readers.cgroups --pid N [--cgroup-root DIR] [--proc-root DIR]`: the process's cgroup and every
    ancestor's readings, as JSON on stdout (without the raw texts, which the capture keeps and this does not)."""
    import argparse
    import json
    from dataclasses import asdict

    ap = argparse.ArgumentParser(prog="python -m probes.readers.cgroups", description=main.__doc__)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--cgroup-root", type=Path, default=DEFAULT_CGROUP_ROOT)
    ap.add_argument("--proc-root", type=Path, default=DEFAULT_PROC_ROOT)
    a = ap.parse_args(argv)
    snap = cgroup_snapshot(a.pid, a.proc_root, a.cgroup_root)
    print(json.dumps({**asdict(snap), "raw": {}}))
    return 0 if snap.status == "successful" else 1


if __name__ == "__main__":
    raise SystemExit(main())
