"""Contention from outside the serving container on the engine's CPUs (seed 000 §5: look at the host in the same
seconds; §13: avoid having background load coincide with a change): the CPUs vLLM may run on busy beyond what the
serving cgroup used.

The engine's CPUs are those vLLM's threads may run on (their affinities within the container's cpuset; the cpuset
where the run did not read affinities). Their use is each one's busy share over the window from /proc/stat, read
before and after it (host-wide even from inside a container); a run without that reading (a bench) falls back to
vmstat's us + sy (+ st, time a hypervisor took) median between the cgroup readings, times the host's CPUs, and says
it judged the host. The serving container's use is its cgroup's CPU time over the same seconds, all of it on the
engine's CPUs (its cpuset holds it there). Consistent with contention where those CPUs were at least CPUS_BUSY busy
and others used at least OTHERS_SHARE of them; it explains others' share of those CPUs, and names the host's
processes that used them (the capture's host-side read) where the run has them. Judging the host instead hid it:
a 2-CPU engine on a 64-CPU host is not contended by a host 58% idle, nor spared by one.
"""

from __future__ import annotations

import statistics

from probes.readers.cpus import format_cpulist, parse_cpulist
from serving.diagnose.evidence import Evidence, engine_cpus, vm_values
from serving.diagnose.model import Figure, Finding
from serving.diagnose.rules import CannotRun, Rule, fig, ruled_out

SEED = "000 §5, §13"
CPUS_BUSY = 0.9
OTHERS_SHARE = 0.25
# The least CPU a process outside must have used to be named (a share of one CPU).
NAMED_MIN = 0.05


def _busy(ev: Evidence) -> tuple[float, int, str, list[Figure]]:
    """How many CPUs' worth the engine's CPUs were busy, how many there are, what they are in words, and figures;
    the host's where the run has no per-CPU reading."""
    cpus = engine_cpus(ev)
    per_cpu = ev.cpu_busy.value if ev.cpu_busy else {}
    if cpus and all(c in per_cpu for c in cpus):
        busy = sum(per_cpu[c] for c in cpus)
        figures = [fig(f"CPU {c} busy over the window", ev.cpu_busy, "%", value=round(100 * per_cpu[c], 1))
                   for c in cpus]  # fmt: skip
        return busy, len(cpus), f"the engine's CPUs ({format_cpulist(cpus)})", figures
    if ev.cgroup_span is None or not ev.host_cpus:
        raise CannotRun("no per-CPU reading of the engine's CPUs, and no host CPU count to judge the host instead")
    us = vm_values(ev, "us", ev.cgroup_span)
    if not us:
        raise CannotRun("no vmstat samples between the cgroup readings (samplers/vmstat.log)")
    used = statistics.median(us) + statistics.median(vm_values(ev, "sy", ev.cgroup_span) or [0.0])
    steal = statistics.median(vm_values(ev, "st", ev.cgroup_span) or [0.0])
    figures = [fig("host CPU busy (us+sy+st), median", ev.vmstat, "%", value=round(used + steal, 1)),
               fig("hypervisor steal (st), median", ev.vmstat, "%", value=steal),
               fig("host CPUs", ev.cgroup, "CPUs", value=ev.host_cpus)]  # fmt: skip
    return (used + steal) / 100.0 * ev.host_cpus, ev.host_cpus, f"the host's {ev.host_cpus} CPUs", figures


def run(ev: Evidence) -> list[Finding]:
    if ev.cgroup is None or ev.cgroup_span is None:
        raise CannotRun("no serving cgroup CPU time to set against the use of the engine's CPUs")
    busy, n, where, figures = _busy(ev)
    span = ev.cgroup_span
    serving_cpus = float(ev.cgroup.value[0].get("cpu_usage_s") or 0.0) / max(1e-9, span[1] - span[0])
    others = max(0.0, busy - serving_cpus)
    share = others / n
    mine = set(engine_cpus(ev) or [])
    named = [f"{h.comm} (host pid {h.pid}, CPUs {h.cpus_allowed}) {h.cpus:.2f} CPU"
             for h in (ev.host_use.value if ev.host_use else [])
             if h.cpus >= NAMED_MIN and (not mine or mine & parse_cpulist(h.cpus_allowed))][:4]  # fmt: skip
    figures += [fig("serving container's CPU", ev.cgroup, "CPUs", value=round(serving_cpus, 2)),
                fig(f"everything else's CPU on {where}", ev.cpu_busy or ev.vmstat, "CPUs",
                    value=round(others, 2))]  # fmt: skip
    if ev.host_use is not None:
        figures.append(fig("host processes outside the container on those CPUs", ev.host_use, "", value=len(named)))
    span_s = f" over {ev.host_use_span_s:.0f} s around the window" if ev.host_use_span_s else ""
    who = (f"; outside the container{span_s}: {', '.join(named) or 'no process used a twentieth of a CPU'}"
           if ev.host_use is not None else "")  # fmt: skip
    if busy / n >= CPUS_BUSY and share >= OTHERS_SHARE:
        return [Finding(
            rule="contention", seed=SEED, verdict="consistent with",
            title=f"contention from outside the container: others used {others:.1f} of {where} while they were "
            "saturated",
            symptom=f"{where} {100 * busy / n:.0f}% busy; the serving container used {serving_cpus:.2f} CPUs of them"
            + who
            + ("; in a bench the others include the bench client itself, on the same host (its CPUs: the bench "
               "manifest's client)" if ev.kind == "bench" else ""),
            explains=round(min(1.0, share), 3), figures=figures,
            not_established=("which process" if ev.host_use is None else "which of them")
            + " takes the CPU when vLLM's threads are ready (the threads rule's run-queue wait says whether they "
            "waited)",
            next_steps=["stop or move the other load (a cpuset apart from the engine's), make bench again, then "
                        "make compare A=<with it> B=<without it> (the load is not a profile field: say so in "
                        "HYPOTHESIS)"],
        )]  # fmt: skip
    return [ruled_out(
        rule="contention", seed=SEED,
        title="no contention from outside: the serving container used what its CPUs were busy with",
        symptom=f"{where} {100 * busy / n:.0f}% busy, others {others:.2f} CPUs ({share:.0%} of them){who}",
        figures=figures, not_established="contention below the CPU (memory bandwidth, caches)",
    )]  # fmt: skip


RULE = Rule("contention", SEED, run)
