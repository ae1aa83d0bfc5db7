"""A thread executing against threads waiting (seed 000 §5: "low host-wide utilization can coexist with a sequential
thread exhausting the CPU available to it"; "separate execution from waiting using CPU stacks"; "match waiting
threads to wchan, stacks"; §11: "wchan alone does not identify the file or device").

From pidstat -u -t (per thread, 100 = one CPU): a thread at BUSY_PCT or more of a CPU in the window's median is
executing, not waiting; the vLLM threads together at ALLOWED_SHARE or more of the container's cpuset exhaust the
CPUs they may run on. Each busy thread is tied to its wchan samples (the share of them on a CPU, "running") and to
the py-spy location that repeats across the dumps. A thread is waiting where its wchan samples are mostly one
class (WCHAN_CLASSES): synchronisation, page I/O, network/IPC, sleep. The finding accounts for the execution
share of a request's time (prefill and decode, not queueing) times the busy thread's share of a CPU: a decode
whose worker thread runs 90% of a CPU is bounded by it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from serving.diagnose.evidence import Evidence, ThreadCpu, thread_rows
from serving.diagnose.model import Finding
from serving.diagnose.rules import CannotRun, Rule, fig, ruled_out
from serving.diagnose.rules.interval import shares

SEED = "000 §5, §11"
BUSY_PCT = 75.0
ALLOWED_SHARE = 0.85
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


def run(ev: Evidence) -> list[Finding]:
    rows = thread_rows(ev)
    if not rows:
        raise CannotRun("no per-thread CPU (samplers/pidstat.log): pidstat did not run in the window")
    src = ev.threads
    busy = sorted((t for t in rows if t.median >= BUSY_PCT), key=lambda t: -t.median)
    total = sum(t.median for t in rows)
    allowed = ev.cpuset_cpus.value if ev.cpuset_cpus else None
    figures = [fig("vLLM threads' CPU, summed medians", src, "% of one CPU", value=round(total, 1)),
               fig("CPUs the container may run on", ev.cpuset_cpus, "CPUs")]  # fmt: skip
    for t in busy[:3]:
        figures.append(fig(f"{t.role} thread {t.tid} ({t.name}) CPU median", src, "% of one CPU", value=t.median))
        figures.append(fig(f"{t.role} thread {t.tid} ({t.name}) waiting for a CPU, median", src, "% of one CPU",
                           value=t.wait_median))  # fmt: skip
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
    if busy:
        top = busy[0]
        where = _repeated_location(ev, top)
        exhausted = allowed is not None and total >= ALLOWED_SHARE * 100 * allowed
        title = (
            f"execution-bound{' ' + interval if interval else ''}: the {top.role}'s thread {top.name} runs "
            f"{top.median:.0f}% of a CPU"
            + (f", and vLLM's threads use {total / 100:.1f} of the container's {allowed} CPUs" if exhausted else "")
        )
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
        )]  # fmt: skip
    # No thread busy: what do the engine's threads wait in?
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
        symptom=f"the busiest thread runs {max(t.median for t in rows):.0f}% of a CPU",
        figures=figures,
        not_established="what the waits are for: wchan alone does not name the file, lock or peer"
    )]  # fmt: skip


RULE = Rule("threads", SEED, run)
