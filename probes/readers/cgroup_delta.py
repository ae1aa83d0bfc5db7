"""What happened in a cgroup between two snapshots (probes/readers/cgroups.py): CPU used and throttled, memory
peak, failcnt and OOM kills, pressure stall time, per level, innermost first."""

from __future__ import annotations

from dataclasses import dataclass

from probes.readers.cgroups import (
    PRESSURE_RESOURCES,
    SCHEMA_VERSION,
    CgroupLevel,
    CgroupSnapshot,
    PressureLine,
    PressureReading,
)


@dataclass(frozen=True)
class LevelDelta:
    """What one cgroup counted between two snapshots."""

    path: str
    # The level's own limits at the second snapshot (None: none set, or not readable): a throttled level is one
    # with a CPU quota, which on a GPU host is an ancestor (refdeploy.slice), not the container's own cgroup.
    cpu_quota_cpus: float | None
    memory_limit_bytes: int | None
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
    for resource in PRESSURE_RESOURCES:
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
    quota = ac.quota_us if ac else None
    limit = am.limit_bytes if am else None
    return LevelDelta(
        path=a.path,
        cpu_quota_cpus=(
            quota.value / ac.period_us
            if ac and quota is not None and quota.value is not None and ac.period_us
            else None
        ),
        memory_limit_bytes=limit.value if limit is not None and not limit.unlimited else None,
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
