"""What `make status` says beyond "is it the plan's container": its limits, restarts, the front door, the sidecar.

Both come from the plan's one read of the host (`refdeploy_host.containers`: RestartCount and State of the serving
container and its sidecar, ansible/library/refdeploy_host_readings.py). A sidecar joins the serving container's PID
namespace; when Docker's restart policy brings vLLM back, the sidecar dies with the old namespace, and Docker's own
restart of it can fail ("can't get final child's PID from pipe", seen on this machine with Docker Engine 20.10): the
host then has no samples until the next `make deploy` recreates it. Status says so rather than let a later
capture find a gap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from serving.host.cgroup_limits import describe_drift, limit_drift
from serving.plan.plan import TARGET_ID_LABEL, running_state


def _named(containers: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    return next((c for c in containers if str(c.get("Name", "")).lstrip("/") == name), None)


def status_lines(host_state: Mapping[str, Any] | None, plan: Mapping[str, Any]) -> list[str]:
    """Lines for the serving container's restarts and the sidecar's state, as the host is now."""
    containers = list((host_state or {}).get("containers") or [])
    name = plan["profile"]["container"]["name"]
    lines: list[str] = []
    serving = _named(containers, name)
    launch = plan.get("launch") or {}
    if serving is not None and launch.get("spec"):
        # The live limits, not the spec's digest: a `docker update` or a quota written on an ancestor by hand leaves
        # the digest as it was (serving/host/cgroup_limits.py).
        ours = bool(running_state(serving, launch["spec"])["planned"])
        lines.append(describe_drift(limit_drift(launch["spec"], serving, (plan.get("gpu") or {}).get("slice"), ours)))
    if serving is not None and int(serving.get("RestartCount") or 0) > 0:
        started = (serving.get("State") or {}).get("StartedAt", "?")
        lines.append(
            f"restarts: {serving['RestartCount']} by Docker's restart policy, the last at {started} "
            f"(`docker logs {name}` says why it stopped)"
        )
    front = plan.get("front_door")
    if front:
        door = _named(containers, front["name"])
        state = (door or {}).get("State") or {}
        status = str(state.get("Status", "absent")) if door else "absent"
        lines.append(
            f"front door {front['name']}: {status}, {front['url']} (TLS, the API key on every route)"
            + ("" if status == "running" else "; clients beyond loopback cannot reach the API (make deploy starts it)")
        )
    sidecar_spec = plan.get("sidecar_spec")
    if not sidecar_spec:
        return lines
    side_name = sidecar_spec["name"]
    sidecar = _named(containers, side_name)
    if sidecar is None:
        return [*lines, f"samplers sidecar {side_name}: absent, nothing is sampled (make deploy starts it)"]
    state = sidecar.get("State") or {}
    status = str(state.get("Status", "?"))
    if status != "running":
        error = str(state.get("Error") or "").strip()
        return [
            *lines,
            f"samplers sidecar {side_name}: {status} (exit {state.get('ExitCode', '?')}) since "
            f"{state.get('FinishedAt', '?')}, nothing sampled since"
            + (f" ({error[:200]})" if error else "")
            + " (make deploy starts it again)",
        ]
    watches = str(((sidecar.get("Config") or {}).get("Labels") or {}).get(TARGET_ID_LABEL, ""))
    if serving is not None and watches and watches != serving.get("Id"):
        return [*lines, f"samplers sidecar {side_name}: running, but beside a serving container that no longer runs "
                        f"({watches[:12]}; make deploy recreates it)"]  # fmt: skip
    return [*lines, f"samplers sidecar {side_name}: running"]
