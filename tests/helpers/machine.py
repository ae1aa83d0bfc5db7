"""What this machine allows, read from the machine, for tests whose expectation depends on it."""

from __future__ import annotations

import shutil
import subprocess


def perf_refused_here() -> str:
    """Why the kernel refuses perf, read from the machine (`perf stat` of `true`); "" where it allows it.

    Without perf installed this answers "" too: make test installs linux-perf (serving/standalone/prereqs.py), so a test
    that then expects a recording fails on the missing perf instead of skipping."""
    if shutil.which("perf") is None:
        return ""
    proc = subprocess.run(["perf", "stat", "-e", "task-clock", "true"], capture_output=True, text=True, timeout=60)
    if proc.returncode == 0:
        return ""
    # Only the kernel's refusal (perf_event_paranoid, a seccomp or capability denial) is a reason: any other
    # failure answers "" too, so that a test expecting a recording fails on the broken perf instead of skipping.
    said = " ".join(proc.stderr.split())
    return said if any(m in said for m in PERF_REFUSALS) else ""


# What perf prints when the kernel refuses it (tools/perf/util/evsel.c, evsel__open_strerror: EACCES/EPERM).
PERF_REFUSALS = ("perf_event_paranoid", "Access to performance monitoring", "No permission", "not permitted")
