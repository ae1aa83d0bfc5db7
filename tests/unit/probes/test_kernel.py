"""probes.readers.kernel's perf record against a real busy process, and how the capture words a perf that began late."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from probes.capture import timeline
from probes.readers import kernel
from probes.readers.procs import VllmProcess
from tests.helpers.machine import perf_refused_here

BUSY = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass\n"


@pytest.mark.timing(
    margin=("a 2 s record's span within 0.5 s of 2 s; the span is now the junit property perf_span_s (not kept before)")
)
def test_perf_records_the_span_it_sampled_on_the_samplers_clock(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """Where the kernel allows perf (read from the machine first), a capture that says "skipped" fails: the test
    passes on a recording, never on a reason."""
    refused = perf_refused_here()
    if refused:
        pytest.skip(
            f"this machine's kernel refuses perf ({refused}); the capture must then say so, as "
            "tests/integration/test_probes_capture.py::test_capture_parts_and_one_clock checks"
        )
    assert shutil.which("perf"), (
        "perf is not installed: make test installs linux-perf (serving/standalone/prereqs.py test)"
    )
    busy = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        before = time.monotonic()
        res = kernel.perf_capture(busy.pid, 2, tmp_path)
        after = time.monotonic()
    finally:
        busy.kill()
        busy.wait()
    assert res.status == "successful" and res.samples, (res.status, res.reason)
    assert res.recorded_mono_s is not None
    a, b = res.recorded_mono_s
    record_property("perf_span_s", round(b - a, 3))  # its margin, in the junit XML of each run
    assert before <= a < b <= after
    assert b - a == pytest.approx(2, abs=0.5)


def _proc(pid: int, rank: str) -> VllmProcess:
    return VllmProcess(pid=pid, role="worker", title=f"VLLM::Worker_{rank}", comm="VLLM::Worker")


def test_a_perf_that_began_late_is_placed_where_it_sampled_and_noted() -> None:
    found = [_proc(131, "TP0"), _proc(132, "TP1")]
    on_time = kernel.PerfResult(131, "successful", None, [], [], samples=10, recorded_mono_s=[100.2, 108.2])
    late = kernel.PerfResult(132, "successful", None, [], [], samples=0, recorded_mono_s=[106.0, 114.0])
    events = timeline.perf_events([late, on_time], found, 100.0, 122.5)
    assert events == [
        {"t_s": 0.2, "label": "perf record worker_TP0 pid 131: 0.2 to 8.2 s"},
        {"t_s": 6.0, "label": "perf record worker_TP1 pid 132: 6.0 to 14.0 s"},
    ]
    notes = timeline.perf_lag_notes([on_time, late], found, 100.0, 122.5)
    assert notes == [
        "perf record worker_TP1 pid 132 sampled 6.0 to 14.0 s of the 22.5 s window (it started late: the host was "
        "busy); its samples cover only that span"
    ]


def test_a_perf_given_an_end_sleeps_until_it_however_late_it_starts(tmp_path: Path) -> None:
    # perf's workload, run here as perf would exec it (late): it ends at the moment given, not N seconds later.
    # (A pid that does not exist: perf, where installed, refuses it at once and runs nothing.)
    until = time.monotonic() + 1.5
    res = kernel.perf_capture(4194303, 1.5, tmp_path, until_mono=until)
    workload = res.record_command[res.record_command.index("--") + 1 :]
    assert workload[0] == "python3" and float(workload[-1]) == pytest.approx(until, abs=1e-5)
    time.sleep(max(0.0, until - 1.0 - time.monotonic()) + 0.4)  # perf enabling its events under load
    subprocess.run([sys.executable, *workload[1:]], check=True, timeout=5)
    assert abs(time.monotonic() - until) < 0.3
