"""Limits of the serving container's cgroups (seed 000 §5: "the host can have spare capacity while a container has
CPU quotas or a memory limit"; "increases in nr_throttled and throttled_usec help investigate throttling by that
cgroup's CPU quota. Check ancestor limits too"; memory.events high, max, oom, oom_kill).

Every level from the container up to the root is read (probes/readers/cgroup_delta.py), and each finding names
the level: the container's own, or an ancestor's (a slice a quota was put on). Consistent with CPU throttling
where a level was throttled in at least THROTTLED_SHARE of its periods; it explains that share of the time, in
every interval alike. A memory finding where the window saw an OOM kill, memory.events max/high rise (v2) or
memory.failcnt rise (v1: each time usage hit the limit and the kernel had to reclaim to charge a page). It
explains the memory pressure stall share of the window (the cgroup's memory.pressure "some": time its tasks
waited on reclaim or refaults), which is small where reclaim finds clean cache to drop and large where the
working set itself no longer fits; without a pressure reading it explains nothing and says so.
"""

from __future__ import annotations

from typing import Any

from serving.diagnose.evidence import Evidence
from serving.diagnose.model import Finding
from serving.diagnose.rules import CannotRun, Rule, fig, ruled_out

SEED = "000 §5"
THROTTLED_SHARE = 0.05


def _where(i: int, level: dict[str, Any]) -> str:
    return f"the container's own cgroup {level['path']}" if i == 0 else f"the ancestor cgroup {level['path']}"


def run(ev: Evidence) -> list[Finding]:
    if ev.cgroup is None:
        raise CannotRun("no cgroup readings before and after (host-state/cgroup-delta.json, cgroup-before/after.json)")
    levels: list[dict[str, Any]] = list(ev.cgroup.value)
    src, out = ev.cgroup, []
    for i, lv in enumerate(levels):
        share = lv.get("throttled_share")
        if share is not None and share >= THROTTLED_SHARE and (lv.get("throttled_s") or 0) > 0:
            quota = lv.get("cpu_quota_cpus")
            out.append(Finding(
                rule="cgroup", seed=SEED, verdict="consistent with",
                title=f"a CPU quota throttles the engine, set on {_where(i, lv)}"
                + (f" ({quota:g} CPUs)" if quota else ""),
                symptom=f"throttled in {lv['nr_throttled']} of {lv['nr_periods']} periods ({share:.0%}), "
                f"{lv['throttled_s']:.2f} s throttled in a {ev.window_s or 0:.1f} s window",
                explains=round(min(1.0, share), 3),
                figures=[fig("cgroup", src, value=lv["path"]), fig("CPU quota", src, "CPUs", value=quota),
                         fig("periods throttled", src, value=lv.get("nr_throttled")),
                         fig("periods", src, value=lv.get("nr_periods")),
                         fig("time throttled", src, "s", value=lv.get("throttled_s")),
                         fig("CPU used", src, "s", value=lv.get("cpu_usage_s")),
                         fig("CPU pressure, some", src, "s", value=lv.get("cpu_some_stall_s"))],
                not_established="that removing it makes requests faster: a quota that throttles a thread "
                "waiting anyway costs nothing; the comparison decides",
                next_steps=[f"make hypothesis HYPOTHESIS='the CPU quota on {lv['path']} slows decode' "
                            "PREDICT='tpot_ms down >= 10%'",
                            "make bench, raise or remove the quota, make bench again, then "
                            "make compare A=<with it> B=<without it> VARIABLE=<the quota's field>"],
            ))  # fmt: skip
        if memory := _memory_limit_reached(i, lv, ev, src):
            out.append(memory)
    if not out:
        worst = max((lv.get("throttled_share") or 0.0 for lv in levels), default=0.0)
        out.append(ruled_out(
            rule="cgroup", seed=SEED,
            title="no cgroup limit was hit: no level throttled or reached its memory limit",
            symptom=f"{len(levels)} levels read, the most throttled in {worst:.0%} of its periods",
            figures=[fig("levels read", src, value=len(levels))],
            not_established="limits outside cgroups (the host's own CPUs: the contention rule)"
        ))  # fmt: skip
    return out


def _memory_limit_reached(i: int, lv: dict[str, Any], ev: Evidence, src: Any) -> Finding | None:
    events = lv.get("memory_events_increase") or {}
    risen = {f"memory.events {k}": v for k, v in events.items() if k in ("high", "max", "oom", "oom_kill") and v}
    if lv.get("oom_kill_increase"):
        risen["oom_kill"] = lv["oom_kill_increase"]
    if lv.get("memory_failcnt_increase"):
        risen["memory.failcnt"] = lv["memory_failcnt_increase"]
    if not risen:
        return None
    limit, used, stall = lv.get("memory_limit_bytes"), lv.get("memory_usage_after_bytes"), lv.get("memory_some_stall_s")
    window = ev.window_s or 0.0
    cost = (
        f"memory stalled {stall:.3f} s of the {window:.1f} s window ({stall / window:.2%})"
        if stall is not None and window
        else "no memory pressure reading: what it cost cannot be told"
    )
    at = f"; at the end {used / 2**30:.2f} GiB of a {limit / 2**30:.2f} GiB limit" if limit and used else ""
    return Finding(
        rule="cgroup", seed=SEED, verdict="consistent with",
        title=f"the memory limit of {_where(i, lv)} was reached in the window"
        + (": a process was OOM-killed" if any(k.endswith("oom_kill") for k in risen) else ""),
        symptom=", ".join(f"{k} +{v}" for k, v in sorted(risen.items())) + f"; {cost}{at}",
        explains=round(min(1.0, (stall or 0) / (window or 1)), 3),
        figures=[fig("cgroup", src, value=lv["path"]),
                 fig("memory limit", src, "bytes", value=limit),
                 fig("memory at the end", src, "bytes", value=used),
                 fig("times usage hit the limit (v1 memory.failcnt)", src,
                     value=lv.get("memory_failcnt_increase")),
                 fig("memory pressure, some", src, "s", value=stall)],
        not_established="what the next allocation does: reclaim drops clean cache cheaply, but memory that cannot "
        "be reclaimed (anonymous, without swap) past the limit is an OOM kill; memory by phase "
        "(memory-phases.json) says which phase grew",
        next_steps=["make bench with the limit raised, then make compare VARIABLE=container.memory"],
    )  # fmt: skip


RULE = Rule("cgroup", SEED, run)
