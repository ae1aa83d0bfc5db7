"""A thread executing against threads waiting, on the CPUs each may actually run on (seed 000 §5: "low host-wide
utilization can coexist with a sequential thread exhausting the CPU available to it"; "separate execution from
waiting using CPU stacks"; "match waiting threads to wchan, stacks"; §11: "wchan alone does not identify the file
or device").

The CPUs a thread may run on are its affinity (Cpus_allowed_list at the window's start and end) within the
container's cpuset: narrower than the cpuset where a rank is bound, or someone ran taskset. From pidstat -u -t (per
thread, 100 = one CPU): a thread at BUSY_PCT or more of a CPU in the window's median is executing, not waiting; the
vLLM threads together at ALLOWED_SHARE or more of the CPUs they may run on exhaust them. Each busy thread is tied to
its wchan samples (the share of them on a CPU, "running") and to the py-spy location that repeats across the dumps.
A thread is waiting where its wchan samples are mostly one class (WCHAN_CLASSES): synchronisation, page I/O,
network/IPC, sleep. The finding accounts for the execution share of a request's time (prefill and decode, not
queueing) times the busy thread's share of a CPU: a decode whose worker thread runs 90% of a CPU is bounded by it.

A thread runnable but not running (pidstat's %wait: the kernel's run-queue delay, schedstat) for WAIT_PCT or more
of the window waits for a CPU: the CPUs it may run on are taken, by vLLM's other threads or by processes outside
the container, and the finding names those the evidence saw there (pidstat for vLLM's threads; the capture's
host-side read of every host process's CPU time and affinity for the others) with those CPUs' busy share
(/proc/stat). It accounts for the execution share times the wait's share of the window: each second the thread on
the critical path waited is a second the request did not advance. WAIT_PCT is 30: on this 2-core machine a healthy
decode (the worker and the engine core each near 80% of a CPU, the API server beside them) waited 14-21%; with the
engine core narrowed to the worker's CPU it waited 84-85%, with a busy loop on both CPUs 64-78% (docs/diagnose.md's
induced cases). NAMED_MIN: the least CPU a neighbour must use to be named beside a waiting thread (a share of one
CPU); below it, it is noise next to the wait it would be blamed for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from probes.readers.cpus import format_cpulist, parse_cpulist
from serving.diagnose.evidence import Evidence, ThreadCpu, engine_cpus, thread_rows
from serving.diagnose.model import Finding
from serving.diagnose.rules import CannotRun, Rule, fig, ruled_out
from serving.diagnose.rules.interval import shares

SEED = "000 §5, §11"
BUSY_PCT = 75.0
ALLOWED_SHARE = 0.85
WAIT_PCT = 30.0
NAMED_MIN = 0.05
# wchan names (the kernel function a sleeping thread waits in) by what they wait for.
WCHAN_CLASSES = {
    "synchronisation": ("futex",),
    "page I/O": ("folio_wait", "wait_on_page", "io_schedule", "filemap_fault", "blkdev", "submit_bio"),
    "network/IPC": ("epoll", "poll_schedule", "select", "sk_wait", "unix_stream", "pipe_read", "inet_", "tcp_"),
    "sleep": ("nanosleep", "hrtimer", "do_sys_poll"),
}


def wchan_class(name: str) -> str:
    if name == "running":
        return "on a CPU"
    return next((cls for cls, keys in WCHAN_CLASSES.items() if any(k in name for k in keys)), "other")


def _wchan_of(ev: Evidence, t: ThreadCpu) -> dict[str, int]:
    counts: Mapping[str, Mapping[str, int]] = (ev.wchan.value or {}).get("counts", {}) if ev.wchan else {}
    return dict(counts.get(f"{t.tgid} {t.role}/{t.name}", {}))


def _repeated_location(ev: Evidence, t: ThreadCpu) -> str | None:
    """The vLLM location py-spy found in every dump of that process's busiest thread, where there is one."""
    rows: list[dict[str, Any]] = [r for r in (ev.stacks.value if ev.stacks else []) if r.get("pid") == t.tgid]
    for r in sorted(rows, key=lambda r: -int(r.get("active") or 0)):
        for where, n in (r.get("innermost_vllm") or {}).items():
            if n == r.get("samples") and n > 1 and r.get("active"):
                return f"{where} ({r.get('thread_name')}, active in {r['active']} of {r['samples']} dumps)"
    return None


def _cpus_of(t: ThreadCpu, ev: Evidence) -> str:
    """Where the thread may run, in words: its CPUs, and why they are fewer than the cpuset's where they are."""
    cpuset = list(ev.cpuset.value) if ev.cpuset else None
    if t.allowed is None or cpuset is None or list(t.allowed) == cpuset:
        return f"the container's {len(cpuset)} CPUs ({format_cpulist(cpuset)})" if cpuset else "its CPUs"
    n = len(t.allowed)
    return (f"{'CPU' if n == 1 else f'{n} CPUs'} {format_cpulist(t.allowed)} only (its affinity within the "
            f"cpuset {format_cpulist(cpuset)})")  # fmt: skip


def _neighbours(ev: Evidence, t: ThreadCpu) -> tuple[list[str], list[str]]:
    """Who else used the CPUs `t` may run on: vLLM's other threads (pidstat) and the host's other processes (the
    capture's host-side read), each at NAMED_MIN of a CPU or more, busiest first."""
    mine = set(t.allowed or engine_cpus(ev) or [])
    rows = sorted(thread_rows(ev), key=lambda u: -u.median)
    inside = [f"{u.role}/{u.name} (tid {u.tid}) {u.median:.0f}%" for u in rows
              if u is not t and u.median >= NAMED_MIN * 100 and (not u.allowed or mine & set(u.allowed))]  # fmt: skip
    outside = [f"{h.comm} (host pid {h.pid}, CPUs {h.cpus_allowed}) {h.cpus:.2f} CPU"
               for h in (ev.host_use.value if ev.host_use else [])
               if h.cpus >= NAMED_MIN and (not mine or mine & parse_cpulist(h.cpus_allowed))]  # fmt: skip
    return inside[:3], outside[:3]


def _waiting(ev: Evidence, share: float, interval: str) -> Finding | None:
    """The thread that waited longest for a CPU, where one waited WAIT_PCT of the window or more."""
    waiting = sorted((t for t in thread_rows(ev) if t.wait_median >= WAIT_PCT), key=lambda t: -t.wait_median)
    if not waiting:
        return None
    top, src = waiting[0], ev.threads
    mine = list(top.allowed or engine_cpus(ev) or [])
    busy = ev.cpu_busy.value if ev.cpu_busy else {}
    figures = [fig(f"{t.role} thread {t.tid} ({t.name}) waiting for a CPU, median", src, "% of the window",
                   value=t.wait_median) for t in waiting[:3]]  # fmt: skip
    figures += [fig(f"{top.role} thread {top.tid} ({top.name}) CPU median", src, "% of one CPU", value=top.median),
                fig(f"CPUs {top.role}/{top.name} may run on", src, "", value=format_cpulist(mine) or None)]  # fmt: skip
    figures += [fig(f"CPU {c} busy over the window", ev.cpu_busy, "%", value=round(100 * busy[c], 1))
                for c in mine if c in busy]  # fmt: skip
    inside, outside = _neighbours(ev, top)
    if ev.host_use is not None:
        figures.append(fig("host processes outside the container on those CPUs", ev.host_use, "", value=len(outside)))
    span = f" (over {ev.host_use_span_s:.0f} s around the window)" if ev.host_use_span_s else ""
    seen = (f"; on those CPUs too: {', '.join(inside) or 'no other vLLM thread'}"
            + (f"; outside the container{span}: {', '.join(outside) or 'nothing busy'}" if ev.host_use is not None
               else "; outside the container: not read (a run without the host-side process read)"))  # fmt: skip
    on = ", ".join(f"CPU {c} {100 * busy[c]:.0f}% busy" for c in mine if c in busy)
    title = (f"waiting for a CPU{' in ' + interval if interval else ''}: the {top.role}'s thread {top.name} waits "
             f"{top.wait_median:.0f}% of the window and runs {top.median:.0f}%, on {_cpus_of(top, ev)}")  # fmt: skip
    return Finding(
        rule="threads", seed=SEED, verdict="consistent with", title=title,
        symptom=", ".join(f"{t.role}/{t.name} (tid {t.tid}) waits {t.wait_median:.0f}%, runs {t.median:.0f}%"
                          for t in waiting[:3]) + (f"; {on}" if on else "") + seen,
        explains=round(min(1.0, share * top.wait_median / 100.0), 3), figures=figures,
        not_established="that the wait is the cost and not a symptom of it (compare with the CPUs freed); which of "
        "the neighbours takes the CPU when the thread is ready (perf sched, or a capture with the neighbour gone)",
        next_steps=[f"make hypothesis HYPOTHESIS='the {top.role} thread waits for a CPU in {interval or 'execution'}' "
                    "PREDICT='tpot_ms down >= 10%'",
                    "give it its CPUs (restore its affinity to the cpuset: taskset -p -c <cpuset> <pid>, or move the "
                    "other load to a cpuset apart from the engine's), make capture again, then make compare"],
    )  # fmt: skip


def run(ev: Evidence) -> list[Finding]:
    rows = thread_rows(ev)
    if not rows:
        raise CannotRun("no per-thread CPU (samplers/pidstat.log): pidstat did not run in the window")
    src = ev.threads
    busy = sorted((t for t in rows if t.median >= BUSY_PCT), key=lambda t: -t.median)
    total = sum(t.median for t in rows)
    cpus = engine_cpus(ev)
    allowed = len(cpus) if cpus else (ev.cpuset_cpus.value if ev.cpuset_cpus else None)
    figures = [fig("vLLM threads' CPU, summed medians", src, "% of one CPU", value=round(total, 1)),
               fig("CPUs the container may run on", ev.cpuset_cpus, "CPUs")]  # fmt: skip
    for t in busy[:3]:
        figures.append(fig(f"{t.role} thread {t.tid} ({t.name}) CPU median", src, "% of one CPU", value=t.median))
        figures.append(fig(f"{t.role} thread {t.tid} ({t.name}) waiting for a CPU, median", src, "% of one CPU",
                           value=t.wait_median))  # fmt: skip
        if t.allowed is not None:
            figures.append(fig(f"CPUs {t.role}/{t.name} may run on", src, "", value=format_cpulist(t.allowed)))
        w = _wchan_of(ev, t)
        if w:
            on = w.get("running", 0) / max(1, sum(w.values()))
            figures.append(fig(f"{t.role}/{t.name} wchan samples on a CPU", ev.wchan, "", value=round(on, 3)))
    # A busy thread explains execution, not waiting in the queue: the larger of prefill and decode names it, and
    # both together (all but the queueing share) bound what it explains.
    try:
        s = shares(ev)
        interval = "decode" if s["decode"] >= s["prefill"] else "prefill"
        share = s["decode"] + s["prefill"]
    except CannotRun:
        interval, share = "", 1.0
    waiting = _waiting(ev, share, interval)
    if busy:
        top = busy[0]
        where = _repeated_location(ev, top)
        exhausted = allowed is not None and total >= ALLOWED_SHARE * 100 * allowed
        narrowed = top.allowed is not None and ev.cpuset is not None and list(top.allowed) != list(ev.cpuset.value)
        # Where vLLM's threads may run on fewer CPUs than the cpuset, those are the ones they exhaust.
        theirs = (
            "the {} CPUs they may run on"
            if cpus and ev.cpuset and cpus != list(ev.cpuset.value)
            else ("the container's {} CPUs")
        )
        title = (
            f"execution-bound{' ' + interval if interval else ''}: the {top.role}'s thread {top.name} runs "
            f"{top.median:.0f}% of a CPU"
            + (f" on {_cpus_of(top, ev)}" if narrowed else "")
            + (f", and vLLM's threads use {total / 100:.1f} of {theirs.format(allowed)}" if exhausted else "")
        )  # fmt: skip
        return [Finding(
            rule="threads", seed=SEED, verdict="consistent with", title=title,
            symptom=", ".join(f"{t.role}/{t.name} (tid {t.tid}) {t.median:.0f}% (max {t.max:.0f}%, waiting for a CPU "
                              f"{t.wait_median:.0f}%)" for t in busy[:3])
            + (f"; repeated in every stack dump: {where}" if where else ""),
            explains=round(min(1.0, share * top.median / 100.0), 3), figures=figures,
            not_established="which operation is the cost inside the thread (perf's report and the stacks say where "
            "it runs); that it is not busy-polling (a CUDA engine's thread can spin waiting for the GPU)",
            next_steps=[f"make hypothesis HYPOTHESIS='the {top.role} thread is CPU-bound in {interval or 'execution'}' "
                        "PREDICT='tpot_ms down >= 10%'",
                        "make bench on a host or cpuset with faster or more CPUs for that rank, then "
                        "make compare VARIABLE=container.cpuset_cpus"],
        )] + ([waiting] if waiting else [])  # fmt: skip
    if waiting:
        return [waiting]
    # No thread busy, none waiting for a CPU: what do the engine's threads wait in?
    waits: dict[str, int] = {}
    for key, counts in ((ev.wchan.value or {}).get("counts", {}) if ev.wchan else {}).items():
        if " worker/" in key or " engine_core/" in key:
            for name, n in counts.items():
                waits[wchan_class(name)] = waits.get(wchan_class(name), 0) + n
    said = ", ".join(f"{k} {v}" for k, v in sorted(waits.items(), key=lambda kv: -kv[1])[:4])
    waited = (f": the engine's threads' wchan samples: {said}" if said
              else " (what they wait in is not in the evidence: no wchan samples)")  # fmt: skip
    return [ruled_out(
        rule="threads", seed=SEED,
        title=f"no vLLM thread exhausts a CPU{waited}",
        symptom=f"the busiest thread runs {max(t.median for t in rows):.0f}% of a CPU, and waits for one at most "
        f"{max(t.wait_median for t in rows):.0f}% of the window",
        figures=figures,
        not_established="what the waits are for: wchan alone does not name the file, lock or peer"
    )]  # fmt: skip


RULE = Rule("threads", SEED, run)
