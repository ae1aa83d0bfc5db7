"""The managed host's operation lock: who holds it, when it is stale, and the refusal line
(serving/bridge/hostlock.py)."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import time
from datetime import UTC, datetime

from serving.bridge import hostlock

RUN = hostlock.Run("mid-1", "a1b2c3d4e5f60718", 4242, "9001")


def test_a_holder_says_what_from_where_and_since_when() -> None:
    h = hostlock.holder("capture", RUN, datetime(2026, 12, 1, 13, 0, tzinfo=UTC))
    assert h == {
        "operation": "capture",
        "machine_id": "mid-1",
        "run_id": "a1b2c3d4e5f60718",
        "controller": socket.gethostname(),
        "pid": 4242,
        "pid_start": "9001",
        "started_utc": "2026-12-01T13:00:00Z",
    }
    line = hostlock.refusal("gpu-a", "deploy", "/var/lib/refdeploy/lock", h)
    assert line == (
        "make deploy on gpu-a is refused, nothing was changed: the host is held by make capture (run "
        f"a1b2c3d4e5f60718) from {socket.gethostname()} (pid 4242), since 2026-12-01T13:00:00Z. Wait for it to "
        "finish, or, if that run is gone (interrupted), remove its lock on gpu-a (rm -r /var/lib/refdeploy/lock) "
        "and run again"
    )
    # A target that holds the lock across its plays is named in it, whichever play took it.
    assert hostlock.holder("deploy", dataclasses.replace(RUN, hold="profile"))["operation"] == "profile"


def test_ours_is_the_run_identity_and_stale_is_a_gone_process_of_this_machine() -> None:
    me = hostlock.this_run(os.getpid(), env={})
    assert me.pid == os.getpid() and me.pid_start == hostlock.process_start(os.getpid()) != ""
    assert me.machine_id == hostlock.machine_id() and me.run_id == f"pid-{os.getpid()}-{me.pid_start}"
    held = hostlock.holder("bench", me)
    assert hostlock.is_ours(held, me) and not hostlock.is_stale(held, me)
    # The same pid on another run id is not ours (a wrapper names each run).
    assert not hostlock.is_ours({**held, "run_id": "other"}, me)
    # A gone process, or the pid reused by a later one, on this machine: stale.
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert hostlock.is_stale({**held, "pid": gone.pid}, me)
    assert hostlock.is_stale({**held, "pid_start": "1"}, me)
    # Another machine's run cannot be checked from here; an old record with no machine id is not ours to judge.
    assert not hostlock.is_stale({**held, "machine_id": "elsewhere", "pid": gone.pid}, me)
    assert not hostlock.is_stale({k: v for k, v in held.items() if k != "machine_id"}, me)
    assert not hostlock.is_stale(None, me)


def test_the_wrappers_identity_wins_and_a_held_target_keeps_its_lock_through_inner_plays() -> None:
    env = {
        hostlock.ENV_RUN_ID: "feedface00112233",
        hostlock.ENV_RUN_PID: str(os.getpid()),
        hostlock.ENV_RUN_HOLD: "profile",
    }
    run = hostlock.this_run(1, env=env)
    assert (run.run_id, run.pid, run.hold) == ("feedface00112233", os.getpid(), "profile")
    assert not hostlock.releases(run, "deploy") and not hostlock.releases(run, "profile-run")
    assert hostlock.releases(run, "profile")
    assert hostlock.releases(dataclasses.replace(run, hold=""), "deploy")


def test_the_note_of_an_interrupted_run_says_what_was_cleaned_and_where_its_results_are() -> None:
    note = {
        "run_id": "feedface00112233", "operation": "bench", "why": "interrupted by SIGINT",
        "ended_utc": "2026-12-05T11:00:00Z", "run_dirs": "runs/local/20261205T105900Z",
        "removed": "refdeploy-vllm-bench", "lock": "released",
        "host_dirs": "/var/lib/refdeploy/bench-runs/20261205T105900Z-bench",
    }  # fmt: skip
    assert hostlock.interrupted_line("local", note) == (
        "the previous make bench on local (run feedface00112233) ended early (interrupted by SIGINT, "
        "2026-12-05T11:00:00Z): its cleanup removed refdeploy-vllm-bench and released its lock; what it wrote, "
        "incomplete: runs/local/20261205T105900Z; on local: /var/lib/refdeploy/bench-runs/20261205T105900Z-bench"
    )


def test_an_unreadable_holder_is_not_a_crash() -> None:
    assert hostlock.parse_holder("not json") is None
    assert "its holder.json is not written yet" in hostlock.refusal("h", "bench", "/l", None)


def test_a_run_killed_a_moment_ago_is_gone_while_it_is_still_a_zombie() -> None:
    """A SIGKILL of make's process group leaves the wrapper a zombie until something reaps it: the next operation,
    started at once, takes the lock over instead of being refused by a run that has ended."""
    child = subprocess.Popen(["sleep", "30"])
    start = hostlock.process_start(child.pid)
    assert hostlock.run_alive(child.pid, start)
    child.kill()
    deadline = time.monotonic() + 10
    while hostlock._state(child.pid) != "Z":  # ended, not yet reaped: its /proc entry is still there
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert hostlock.process_start(child.pid) == start and not hostlock.run_alive(child.pid, start)
    child.wait()
    assert not hostlock.run_alive(child.pid, start)


def test_the_cleanups_reply_becomes_the_note_of_the_runs_directories() -> None:
    """cleanup_command's reply, `<lock> <removed...>;<host dirs...>`: the note ansible/interrupted.yml writes into
    each run directory of the run, with the same keys as the host's interrupted.json."""
    note = {"run_id": "r1", "operation": "capture", "why": "interrupted by SIGINT"}
    reply = "released refdeploy-vllm-probe refdeploy-vllm-probe-perfmon-check;/s/probe-runs/T1-capture /s/probe-runs/T1"
    assert hostlock.parse_cleanup(reply, note) == {
        **note,
        "removed": "refdeploy-vllm-probe refdeploy-vllm-probe-perfmon-check",
        "lock": "released",
        "host_dirs": "/s/probe-runs/T1-capture /s/probe-runs/T1",
    }
    assert hostlock.parse_cleanup("kept;", note) == {**note, "removed": "", "lock": "kept", "host_dirs": ""}
    line = hostlock.interrupted_line("h", hostlock.parse_cleanup(reply, note))
    assert "removed refdeploy-vllm-probe, refdeploy-vllm-probe-perfmon-check and released its lock" in line
