"""The managed host's operation lock: who holds it, when it is stale, and the refusal line
(serving/bridge/hostlock.py)."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from serving.bridge import hostlock


def test_a_holder_says_what_from_where_and_since_when() -> None:
    h = hostlock.holder("capture", "ctl-1", 4242, datetime(2026, 12, 1, 13, 0, tzinfo=UTC))
    assert h == {"operation": "capture", "controller": "ctl-1", "pid": 4242, "started_utc": "2026-12-01T13:00:00Z"}
    line = hostlock.refusal("gpu-a", "deploy", "/var/lib/refdeploy/lock", h)
    assert line == (
        "make deploy on gpu-a is refused, nothing was changed: the host is held by make capture from ctl-1 "
        "(pid 4242), since 2026-12-01T13:00:00Z. Wait for it to finish, or, if that run is gone (interrupted), "
        "remove its lock on gpu-a (rm -r /var/lib/refdeploy/lock) and run again"
    )


def test_only_a_dead_run_of_this_controller_is_stale() -> None:
    mine_alive = hostlock.holder("bench", "ctl-1", os.getpid())
    assert not hostlock.is_stale(mine_alive, "ctl-1")
    assert hostlock.is_stale({**mine_alive, "pid": 999_999_999}, "ctl-1", alive=lambda _p: False)
    # Another controller's run cannot be checked from here: never taken over.
    assert not hostlock.is_stale({**mine_alive, "controller": "ctl-2"}, "ctl-1", alive=lambda _p: False)
    assert not hostlock.is_stale(None, "ctl-1")
    assert hostlock.is_ours(mine_alive, "ctl-1", os.getpid())
    assert not hostlock.is_ours(mine_alive, "ctl-1", os.getpid() + 1)


def test_an_unreadable_holder_is_not_a_crash() -> None:
    assert hostlock.parse_holder("not json") is None
    assert "its holder.json is not written yet" in hostlock.refusal("h", "bench", "/l", None)
