"""probes.base.bounded.run_bounded: a child that outlives its bound is terminated, and killed if it ignores SIGTERM."""

from __future__ import annotations

import time

from probes.base.bounded import run_bounded


def test_run_bounded_terminates_after_the_timeout() -> None:
    t0 = time.monotonic()
    done = run_bounded(["sleep", "30"], timeout_s=0.5)
    assert done.timed_out
    assert done.exit_code == -15  # SIGTERM
    assert time.monotonic() - t0 < 5


def test_run_bounded_kills_what_ignores_sigterm() -> None:
    t0 = time.monotonic()
    done = run_bounded(["bash", "-c", "trap '' TERM; sleep 30"], timeout_s=0.5, grace_s=0.5)
    assert done.timed_out
    assert done.exit_code == -9  # SIGKILL
    assert time.monotonic() - t0 < 5
