"""Limits of the serving container's cgroups (seed 000 §5: "the host can have spare capacity while a container has
CPU quotas or a memory limit"; "increases in nr_throttled and throttled_usec help investigate throttling by that
cgroup's CPU quota. Check ancestor limits too"; memory.events high, max, oom, oom_kill).

Every level from the container up to the root is read (probes/readers/cgroup_delta.py), and each finding names
the level: the container's own, or an ancestor's (a slice a quota was put on). Consistent with CPU throttling
where a level was throttled in at least THROTTLED_SHARE of its periods; it explains that share of the time, in
every interval alike. A memory finding where the window saw an OOM kill or memory.events max/high rise.
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
        events = lv.get("memory_events_increase") or {}
        risen = {k: v for k, v in events.items() if k in ("high", "max", "oom", "oom_kill") and v}
        if lv.get("oom_kill_increase"):
            risen["oom_kill"] = lv["oom_kill_increase"]
        if risen:
            limit = lv.get("memory_limit_bytes")
            out.append(Finding(
                rule="cgroup", seed=SEED, verdict="consistent with",
                title=f"the memory limit of {_where(i, lv)} was reached in the window",
                symptom="memory.events rose: " + ", ".join(f"{k} +{v}" for k, v in sorted(risen.items())),
                explains=round(min(1.0, (lv.get("memory_some_stall_s") or 0) / (ev.window_s or 1)), 3),
                figures=[fig("cgroup", src, value=lv["path"]),
                         fig("memory limit", src, "bytes", value=limit),
                         fig("memory at the end", src, "bytes", value=lv.get("memory_usage_after_bytes")),
                         fig("memory pressure, some", src, "s", value=lv.get("memory_some_stall_s"))],
                not_established="which allocation: memory by phase (memory-phases.json) says which phase grew",
                next_steps=["make bench with the limit raised, then make compare VARIABLE=container.memory"],
            ))  # fmt: skip
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


RULE = Rule("cgroup", SEED, run)
