"""Was the serving container over a window the one it was at the start? (capture, probe, bench)

A capture's probe container lives in vLLM's PID namespace: when vLLM dies or is replaced mid-window, the kernel
kills the probe with it (exit 137) and only the files it had written are left. Whether that is what happened is
read from `docker inspect` of the serving container before and after the window: its ID (replaced), its restart
count and start time (restarted, by the restart policy or by hand), its state and PID.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def identity(container: Mapping[str, Any] | None) -> dict[str, Any]:
    """The fields of `docker inspect` that say which container runs, and since when (absent: {"present": False})."""
    if not container:
        return {"present": False}
    state = container.get("State") or {}
    return {
        "present": True,
        "id": str(container.get("Id") or ""),
        "restart_count": int(container.get("RestartCount") or 0),
        "status": str(state.get("Status") or "unknown"),
        "pid": int(state.get("Pid") or 0),
        "started_at": str(state.get("StartedAt") or ""),
        "exit_code": int(state.get("ExitCode") or 0),
        "oom_killed": bool(state.get("OOMKilled")),
    }


def _describe(i: Mapping[str, Any]) -> str:
    if not i.get("present"):
        return "absent"
    return f"{i['id'][:12]} {i['status']}, restarts {i['restart_count']}, pid {i['pid']}, started {i['started_at']}"


def serving_change(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None, name: str = "") -> dict[str, Any]:
    """Before and after against each other: {"changed", "line", "before", "after"}; `line` is what the operator
    reads (one line, the container's ID, restart count and state before and after)."""
    b, a = identity(before), identity(after)
    label = name or "the serving container"
    if not b["present"] and not a["present"]:  # make probe-io on a host that serves nothing
        return {"changed": False, "line": f"{label} did not run before or after", "before": b, "after": a}
    what: list[str] = []
    if not b["present"] or not a["present"]:
        what.append(f"{'absent' if not b['present'] else 'present'} -> {'absent' if not a['present'] else 'present'}")
    else:
        if b["id"] != a["id"]:
            what.append(f"replaced: container {b['id'][:12]} -> {a['id'][:12]}")
        if b["restart_count"] != a["restart_count"]:
            what.append(f"restarts {b['restart_count']} -> {a['restart_count']}")
        if b["started_at"] != a["started_at"]:
            what.append(f"started {b['started_at']} (pid {b['pid']}) -> {a['started_at']} (pid {a['pid']})")
        elif b["pid"] != a["pid"] and a["status"] == "running":
            what.append(f"pid {b['pid']} -> {a['pid']}")
        if b["status"] != a["status"] or a["status"] != "running":
            what.append(f"state {b['status']} -> {a['status']}")
        # Docker's State.OOMKilled describes the container's last exit and stays set after the restart policy
        # brings it back: an OOM kill is this window's only where the container also exited in it.
        if a["oom_killed"] and what:
            what.append("OOM-killed")
    changed = bool(what)
    line = (
        f"{label} died or was replaced in the window: {'; '.join(what)} (before: {_describe(b)}; after: {_describe(a)})"
        if changed
        else f"{label} ran throughout: {_describe(a)}"
    )
    return {"changed": changed, "line": line, "before": b, "after": a}
