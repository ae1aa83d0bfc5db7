"""One operation at a time per managed host: the lock that deploy, bench, capture and probe-io take.

The lock is a directory on the managed host (`mkdir` is atomic, on every filesystem the state directory can be
on), with `holder.json` inside saying who holds it: the operation, the controller's host name and the
ansible-playbook's pid there, and when it started. The playbooks take it first and release it in an `always:`,
so every exit path Ansible runs releases it. What Ansible cannot run (a SIGKILL, a lost controller) leaves it
behind; a lock whose holder ran on this controller and is no longer alive is taken over, saying so, and any
other is refused with its holder and what to do.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from typing import Any


def holder(operation: str, controller: str, pid: int, now: datetime | None = None) -> dict[str, Any]:
    started = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"operation": operation, "controller": controller, "pid": pid, "started_utc": started}


def parse_holder(text: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale(held: dict[str, Any] | None, controller: str, alive: Any = pid_alive) -> bool:
    """A lock left by a run of this controller that is gone (interrupted beyond Ansible's reach)."""
    if not held or held.get("controller") != controller:
        return False
    try:
        return not alive(int(held["pid"]))
    except (KeyError, TypeError, ValueError):
        return False


def is_ours(held: dict[str, Any] | None, controller: str, pid: int) -> bool:
    return bool(held) and held.get("controller") == controller and held.get("pid") == pid  # type: ignore[union-attr]


def refusal(host: str, operation: str, path: str, held: dict[str, Any] | None) -> str:
    """The one line of a refused operation: who holds the host, since when, and what to do."""
    if held is None:
        who = "another operation (its holder.json is not written yet, or unreadable)"
    else:
        who = (
            f"make {held.get('operation', '?')} from {held.get('controller', '?')} (pid {held.get('pid', '?')}), "
            f"since {held.get('started_utc', '?')}"
        )
    return (
        f"make {operation} on {host} is refused, nothing was changed: the host is held by {who}. Wait for it to "
        f"finish, or, if that run is gone (interrupted), remove its lock on {host} (rm -r {path}) and run again"
    )
