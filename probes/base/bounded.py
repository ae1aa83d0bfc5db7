"""A command run with a bound: SIGTERM to its process group when it runs past the timeout, SIGKILL after a
grace period; what it printed is kept either way."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass

# Seconds a command gets to exit after SIGTERM before SIGKILL.
_TERM_GRACE_S = 5.0


@dataclass(frozen=True)
class _Completed:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool


def _signal_group(proc: subprocess.Popen[str], sig: signal.Signals) -> None:
    # The child leads its own session (start_new_session), so its group id is its pid: this reaches fio's
    # job processes too, and nothing else.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def run_bounded(argv: list[str], timeout_s: float, grace_s: float = _TERM_GRACE_S) -> _Completed:
    """Run argv; after timeout_s SIGTERM its process group, after grace_s more SIGKILL it."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return _Completed(proc.returncode, out, err, timed_out=False)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            out, err = proc.communicate()
        return _Completed(proc.returncode, out, err, timed_out=True)
    except BaseException:
        # Ctrl-C or anything else: fio is in its own session and would outlive us.
        _signal_group(proc, signal.SIGKILL)
        proc.wait()
        raise
