"""The CPUs a vLLM thread may run on, what each CPU of the host did, and who else ran there (seed 000 §5: "low
host-wide utilization can coexist with a sequential thread exhausting the CPU available to it").

The CPU available to a thread is narrower than its container's cpuset when its own affinity is narrower (a rank
bound to one CPU, a `taskset` by hand), and smaller than its share of the cpuset when another process runs on the
same CPUs. Three cheap readings say which, without sampling the host:

- each vLLM thread's `Cpus_allowed_list` (/proc/<pid>/task/<tid>/status), read once at the window's start and once
  at its end (`thread_affinity`): affinity changes rarely (a deploy, a person with taskset), so two reads show it
  and any change between them; sampling it each second would only cost more reads of the same text;
- the host's per-CPU time, /proc/stat's `cpuN` rows, at the same two moments (`snapshot`, `parse_proc_stat`):
  /proc/stat is not namespaced, so a container that shares only vLLM's PID namespace still reads every CPU of the
  host, and the busy share of the engine's own CPUs over the window is its difference (`busy_shares`);
- the host's processes as the host sees them (`_capture_host_processes_sh` in ansible/roles/capture/vars/main.yml,
  run by the capture role on the host before and after the capture's container; `parse_host_processes`): each
  process's affinity, CPU time and cpuset cgroup, so the diagnosis can name what else ran on the engine's CPUs.
  The capture's container cannot do this (it sees only vLLM's PID namespace, and giving it the host's /proc beside
  SYS_PTRACE would let it read any host process's memory), and pidstat over every host process perturbs vLLM on a
  2-core host (REFERENCE §1): two passes of shell builtins over /proc/<pid>/{stat,status,cpuset} cost a few
  milliseconds and fork nothing per process. The span is the window and the seconds around it (the container's
  start and end), which the diagnosis says; the capture's own container's processes are gone by the second read.

Writes OUT/cpus.json (the parsed readings) and OUT/raw/proc/stat (the text the per-CPU figures come from).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from probes.base.rawtext import now_wall

SCHEMA_VERSION = 1
CPUS_FILE = "cpus.json"
# /proc/stat's cpuN columns, in the kernel's order (proc(5)); guest and guest_nice are already counted in user
# and nice, so they are read but never added again.
STAT_COLUMNS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")
_IDLE = ("idle", "iowait")
_BUSY = ("user", "nice", "system", "irq", "softirq", "steal")


@dataclass(frozen=True)
class ThreadAffinity:
    pid: int  # as the capture's PID namespace (vLLM's) numbers it
    tid: int
    comm: str
    cpus_allowed: str  # the kernel's list format, "0-3,8"


@dataclass(frozen=True)
class CpuReading:
    schema_version: int
    taken_mono_s: float
    taken_wall: str
    # {"cpu0": {"user": jiffies, ...}}: /proc/stat's per-CPU rows (the all-CPU "cpu" row is left out)
    per_cpu: dict[str, dict[str, int]]
    threads: list[ThreadAffinity]
    raw: dict[str, str | None]  # {"/proc/stat": its text}


def parse_cpulist(text: str) -> set[int]:
    """The kernel's CPU list ("0-3,8") as a set; "" is none."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def format_cpulist(cpus: set[int] | Sequence[int]) -> str:
    """A set of CPUs in the kernel's list format ({0, 1, 2, 5} -> "0-2,5")."""
    runs: list[list[int]] = []
    for c in sorted(set(cpus)):
        if runs and runs[-1][1] == c - 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def parse_proc_stat(text: str) -> dict[str, dict[str, int]]:
    """/proc/stat's `cpuN` rows: {"cpu0": {"user": 123, ...}} in USER_HZ jiffies."""
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) > 4 and words[0].startswith("cpu") and words[0][3:].isdigit():
            out[words[0]] = {c: int(w) for c, w in zip(STAT_COLUMNS, words[1:], strict=False)}
    return out


def busy_shares(before: Mapping[str, Mapping[str, int]], after: Mapping[str, Mapping[str, int]]) -> dict[int, float]:
    """Each CPU's busy share (user, nice, system, irq, softirq and steal over all its time) between two readings;
    a CPU that went offline between them, or whose counters did not move, is left out."""
    out: dict[int, float] = {}
    for name, b in before.items():
        a = after.get(name)
        if a is None:
            continue
        busy = sum(a.get(c, 0) - b.get(c, 0) for c in _BUSY)
        total = busy + sum(a.get(c, 0) - b.get(c, 0) for c in _IDLE)
        if total > 0:
            out[int(name[3:])] = busy / total
    return out


def thread_affinity(pids: Sequence[int], proc_root: Path = Path("/proc")) -> list[ThreadAffinity]:
    """Every thread of the given processes and the CPUs it may run on; a thread that ends while it is read is
    left out (a thread pool's worker can come and go)."""
    out: list[ThreadAffinity] = []
    for pid in pids:
        try:
            tids = sorted(int(t.name) for t in (proc_root / str(pid) / "task").iterdir() if t.name.isdigit())
        except OSError:
            continue
        for tid in tids:
            try:
                status = (proc_root / str(pid) / "task" / str(tid) / "status").read_text(errors="replace")
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            if "Cpus_allowed_list" in fields:
                name = fields.get("Name", "").strip()
                out.append(ThreadAffinity(pid, tid, name, fields["Cpus_allowed_list"].strip()))
    return out


def snapshot(pids: Sequence[int], proc_root: Path = Path("/proc")) -> CpuReading:
    """Both readings at one moment: per-CPU time and every thread's affinity."""
    taken_mono_s, taken_wall = time.monotonic(), now_wall()
    try:
        text: str | None = (proc_root / "stat").read_text()
    except OSError:
        text = None
    return CpuReading(SCHEMA_VERSION, taken_mono_s, taken_wall, parse_proc_stat(text or ""),
                      thread_affinity(pids, proc_root), {"/proc/stat": text})  # fmt: skip


def write(reading: CpuReading, out_dir: Path) -> Path:
    """OUT/cpus.json, and /proc/stat's text as OUT/raw/proc/stat (where host-state keeps its raw files)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = asdict(reading)
    text = reading.raw.get("/proc/stat")
    if text is not None:
        (out_dir / "raw" / "proc").mkdir(parents=True, exist_ok=True)
        (out_dir / "raw" / "proc" / "stat").write_text(text)
        doc["raw"] = {"/proc/stat": "raw/proc/stat"}
    path = out_dir / CPUS_FILE
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return path


# --- the host's processes, as the capture role read them on the host -----------------------------------------


@dataclass(frozen=True)
class HostProcess:
    pid: int  # the host's PID
    comm: str
    cpus_allowed: str
    cpuset: str  # its cpuset cgroup, "/docker/<id>", "/" for the host's own
    cpu_ticks: int  # utime + stime, in CLK_TCK ticks
    last_cpu: int  # stat's `processor`: the CPU it last ran on


@dataclass(frozen=True)
class HostProcesses:
    wall_s: float
    clk_tck: int
    processes: dict[int, HostProcess]


def parse_host_processes(text: str) -> HostProcesses | None:
    """The capture role's host-side read (ansible/roles/capture/vars/main.yml `_capture_host_processes_sh`): line 1
    the wall clock (s), line 2 CLK_TCK, then per process its Cpus_allowed_list, TAB, its cpuset cgroup, TAB, its
    /proc/<pid>/stat line; None where its first two lines are not the clock and CLK_TCK."""
    lines = text.splitlines()
    try:
        wall_s, clk_tck = float(lines[0]), int(lines[1])
    except (IndexError, ValueError):
        return None
    procs: dict[int, HostProcess] = {}
    for line in lines[2:]:
        allowed, _, rest = line.partition("\t")
        cpuset, _, stat = rest.partition("\t")
        head, sep, tail = stat.rpartition(")")  # comm may hold spaces and parentheses: split at the last ')'
        pid_s, _, comm = head.partition(" (")
        fields = tail.split()
        if not sep or not pid_s.strip().isdigit() or len(fields) < 37:
            continue
        # stat's fields after comm, from 0: state, ..., utime (11), stime (12), ..., processor (36) (proc(5)).
        procs[int(pid_s)] = HostProcess(int(pid_s), comm, allowed.strip(), cpuset.strip(),
                                        int(fields[11]) + int(fields[12]), int(fields[36]))  # fmt: skip
    return HostProcesses(wall_s, clk_tck, procs)


@dataclass(frozen=True)
class HostUse:
    pid: int
    comm: str
    cpus_allowed: str
    cpuset: str
    cpus: float  # CPU time over the span / the span: 1.0 is one whole CPU
    last_cpu: int


def host_use(before: HostProcesses, after: HostProcesses, cpus: set[int], outside: str) -> list[HostUse]:
    """The host's processes that may run on any of `cpus` and used CPU time between the two reads, busiest first,
    leaving out those in cgroup `outside` (the serving container's cpuset path). A process the first read did not
    see started after it, so all its time is in the span (the capture's own container's processes are gone by the
    second read, and are not seen at all); one whose PID was reused (another comm) counts from its start alike."""
    span = after.wall_s - before.wall_s
    if span <= 0:
        return []
    out: list[HostUse] = []
    for pid, a in after.processes.items():
        if outside and a.cpuset.rstrip("/") == outside.rstrip("/"):
            continue
        b = before.processes.get(pid)
        ticks = a.cpu_ticks - (b.cpu_ticks if b is not None and b.comm == a.comm else 0)
        if ticks <= 0 or not (parse_cpulist(a.cpus_allowed) & cpus):
            continue
        out.append(HostUse(pid, a.comm, a.cpus_allowed, a.cpuset, ticks / after.clk_tck / span, a.last_cpu))
    return sorted(out, key=lambda u: -u.cpus)
