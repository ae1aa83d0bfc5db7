"""Contention from outside the serving container (seed 000 §5: look at the host in the same seconds; §13: avoid
having background load coincide with a change): the host's CPUs busy beyond what the serving cgroup used.

The host's use is vmstat's us + sy (+ st, time a hypervisor took) median between the cgroup readings, times the
host's CPUs; the serving container's is its cgroup's CPU time over the same seconds. Consistent with contention
where the host was at least HOST_BUSY busy and others used at least OTHERS_SHARE of its CPUs; it explains others'
share of the host.
"""

from __future__ import annotations

import statistics

from serving.diagnose.evidence import Evidence, vm_values
from serving.diagnose.model import Finding
from serving.diagnose.rules import CannotRun, Rule, fig, ruled_out

SEED = "000 §5, §13"
HOST_BUSY = 0.9
OTHERS_SHARE = 0.25


def run(ev: Evidence) -> list[Finding]:
    if ev.cgroup is None or ev.cgroup_span is None or not ev.host_cpus:
        raise CannotRun("no serving cgroup CPU time, or no host CPU count, to set against the host's use")
    span = ev.cgroup_span
    us = vm_values(ev, "us", span)
    if not us:
        raise CannotRun("no vmstat samples between the cgroup readings (samplers/vmstat.log)")
    busy = statistics.median(us) + statistics.median(vm_values(ev, "sy", span) or [0.0])
    steal = statistics.median(vm_values(ev, "st", span) or [0.0])
    host = (busy + steal) / 100.0
    serving_cpus = float(ev.cgroup.value[0].get("cpu_usage_s") or 0.0) / max(1e-9, span[1] - span[0])
    others = max(0.0, host * ev.host_cpus - serving_cpus)
    share = others / ev.host_cpus
    figures = [fig("host CPU busy (us+sy+st), median", ev.vmstat, "%", value=round(busy + steal, 1)),
               fig("hypervisor steal (st), median", ev.vmstat, "%", value=steal),
               fig("host CPUs", ev.cgroup, "CPUs", value=ev.host_cpus),
               fig("serving container's CPU", ev.cgroup, "CPUs", value=round(serving_cpus, 2)),
               fig("everything else's CPU", ev.vmstat, "CPUs", value=round(others, 2))]  # fmt: skip
    if host >= HOST_BUSY and share >= OTHERS_SHARE:
        return [Finding(
            rule="contention", seed=SEED, verdict="consistent with",
            title=f"contention from outside the container: others used {others:.1f} of the host's {ev.host_cpus} "
            "CPUs while it was saturated",
            symptom=f"host {busy + steal:.0f}% busy; the serving container used {serving_cpus:.2f} CPUs of it"
            + ("; in a bench the others include the bench client itself, on the same host (its CPUs: the bench "
               "manifest's client)" if ev.kind == "bench" else ""),
            explains=round(min(1.0, share), 3), figures=figures,
            not_established="which process (pidstat over the host, or top, names it); that it shares the "
            "engine's CPUs (their cpusets)",
            next_steps=["stop or move the other load (a cpuset apart from the engine's), make bench again, then "
                        "make compare A=<with it> B=<without it> (the load is not a profile field: say so in "
                        "HYPOTHESIS)"],
        )]  # fmt: skip
    return [ruled_out(
        rule="contention", seed=SEED,
        title="no contention from outside: the serving container used what the host was busy with",
        symptom=f"host {busy + steal:.0f}% busy, others {others:.2f} CPUs ({share:.0%} of the host)",
        figures=figures, not_established="contention below the CPU (memory bandwidth, caches)",
    )]  # fmt: skip


RULE = Rule("contention", SEED, run)
