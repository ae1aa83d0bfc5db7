"""What this machine allows, read from the machine, for tests whose expectation depends on it."""

from __future__ import annotations

import shutil
import subprocess


def perf_refused_here() -> str:
    """Why the kernel refuses perf, read from the machine (`perf stat` of `true`); "" where it allows it.

    Without perf installed this answers "" too: make test installs linux-perf (serving/prereqs.py), so a test
    that then expects a recording fails on the missing perf instead of skipping."""
    if shutil.which("perf") is None:
        return ""
    proc = subprocess.run(["perf", "stat", "-e", "task-clock", "true"], capture_output=True, text=True, timeout=60)
    return "" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["perf stat failed"])[0]
