"""probes/readers/cpus.py on this machine's own /proc: a thread's affinity as the kernel holds it, the capture role's
host-side read (ansible/roles/capture/vars/main.yml) run for real with sh, and /proc/stat's per-CPU rows; the busy
share on the RECORDED busy-loop capture (tests/fixtures/diagnose/README.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from probes.readers import cpus

REPO = Path(__file__).resolve().parents[3]
HOST_READ = yaml.safe_load((REPO / "ansible/roles/capture/vars/main.yml").read_text())["_capture_host_processes_sh"]
BUSY_LOOP = REPO / "tests" / "fixtures" / "diagnose" / "capture-cpu-tiny-busy-loop-on-cpus"
# Spins for 1.5 s, so it is still there at the second read, a second after it started.
SPIN = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 1.5:\n    pass"
TWO_CPUS = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to narrow one thread to one")


@TWO_CPUS
def test_a_thread_narrowed_to_one_cpu_reads_as_that_cpu_and_its_siblings_do_not() -> None:
    first = min(os.sched_getaffinity(0))
    narrowed, release = threading.Event(), threading.Event()
    tid: list[int] = []

    def pinned() -> None:
        os.sched_setaffinity(0, {first})  # pid 0: the calling thread only
        tid.append(threading.get_native_id())
        narrowed.set()
        release.wait(10)

    t = threading.Thread(target=pinned)
    t.start()
    try:
        assert narrowed.wait(10)
        by_tid = {a.tid: a for a in cpus.thread_affinity([os.getpid()])}
    finally:
        release.set()
        t.join()
    assert by_tid[tid[0]].cpus_allowed == str(first)
    assert by_tid[os.getpid()].cpus_allowed == cpus.format_cpulist(os.sched_getaffinity(0))
    assert cpus.snapshot([os.getpid()]).per_cpu.keys() >= {f"cpu{c}" for c in os.sched_getaffinity(0)}


@TWO_CPUS
def test_the_host_side_read_names_a_busy_process_with_its_affinity_and_cpu() -> None:
    """HOST_PROCESSES_SH run twice with sh around a child spinning on one CPU for a second: the child is named,
    bound to that CPU, with most of a CPU; a process in the cgroup left out (the serving container's) is not."""
    cpu = max(os.sched_getaffinity(0))
    before = cpus.parse_host_processes(subprocess.run(["sh", "-c", HOST_READ], capture_output=True,
                                                      text=True, check=True).stdout)  # fmt: skip
    spin = subprocess.Popen([sys.executable, "-c", SPIN], preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    time.sleep(1.0)
    after = cpus.parse_host_processes(subprocess.run(["sh", "-c", HOST_READ], capture_output=True,
                                                     text=True, check=True).stdout)  # fmt: skip
    spin.wait(10)
    assert before is not None and after is not None and after.clk_tck == os.sysconf("SC_CLK_TCK")
    use = {u.pid: u for u in cpus.host_use(before, after, {cpu}, outside="")}
    assert spin.pid in use and use[spin.pid].cpus_allowed == str(cpu) and use[spin.pid].cpus > 0.3
    mine = after.processes[os.getpid()].cpuset
    assert spin.pid not in {u.pid for u in cpus.host_use(before, after, {cpu}, outside=mine)}
    # Bound elsewhere, it is not on these CPUs.
    others = set(os.sched_getaffinity(0)) - {cpu}
    assert spin.pid not in {u.pid for u in cpus.host_use(before, after, others, outside="")}


def test_a_comm_with_spaces_and_parentheses_parses_and_a_truncated_line_is_skipped() -> None:
    stat = "4242 (a (b) c) R 1 " + " ".join(["0"] * 9) + " 150 50 " + " ".join(["0"] * 23) + " 3 0 0"
    text = f"1796553302.5\n100\n0-3\t/\t{stat}\n0-3\t/\t4243 (cut) R 1 2 3\n"
    parsed = cpus.parse_host_processes(text)
    assert parsed is not None and list(parsed.processes) == [4242]
    p = parsed.processes[4242]
    assert (p.comm, p.cpu_ticks, p.last_cpu, p.cpus_allowed) == ("a (b) c", 200, 3, "0-3")
    assert cpus.parse_host_processes("no clock\n") is None


def test_cpulists_round_trip_in_the_kernels_format() -> None:
    assert cpus.parse_cpulist("0-2,5,7-8") == {0, 1, 2, 5, 7, 8} and cpus.parse_cpulist("") == set()
    assert cpus.format_cpulist({8, 7, 5, 2, 1, 0}) == "0-2,5,7-8" and cpus.format_cpulist([3]) == "3"


def test_the_recorded_busy_loop_saturated_both_cpus() -> None:
    """/proc/stat before and after the RECORDED window with a busy loop on CPUs 0-1: both CPUs busy all of it."""
    b, a = (json.loads((BUSY_LOOP / "host-state" / w / "cpus.json").read_text()) for w in ("before", "after"))
    raw = (BUSY_LOOP / "host-state" / "before" / "raw" / "proc" / "stat").read_text()
    assert cpus.parse_proc_stat(raw) == b["per_cpu"]
    shares = cpus.busy_shares(b["per_cpu"], a["per_cpu"])
    assert set(shares) == {0, 1} and all(s > 0.99 for s in shares.values())
    # Counters that did not move say nothing: left out rather than read as idle.
    assert cpus.busy_shares(b["per_cpu"], b["per_cpu"]) == {}
