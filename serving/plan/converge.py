"""What a deploy must change on the host, from the plan and the plan's one read of the host: nothing, on a converged
host.

The serve role asks this once (filter refdeploy_serve_due). Where it names nothing, the deploy skips every task that
could change the host as one task, and only checks the container it keeps (its health, its effective config, its
workers' placement) and records the manifest: a no-op deploy ran ~94 tasks, 58 of them skipped one by one at ~25 ms
each, and six module runs that each found nothing to do (issue 47). Where it names anything, the role runs as it
always has, each task judging its own condition; so a reason here may be broader than the task it stands for (a
keyed deploy always checks its key's copy, whose contents the read does not see), never narrower: a change this
misses would not be made. Each reason is one line an operator can read (`-v` shows them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from serving.host.cgroup_limits import describe_drift, limit_drift
from serving.plan.plan import running_state
from serving.plan.render import API_SOCKET_DIR

# serve's modes for what it makes (tasks/main.yml, model.yml), as `file` leaves them and the read reports them.
SOCKET_PARENT_MODE = "00755"
SOCKET_DIR_MODE = "02750"
CACHE_DIR_MODE = "00750"


def serve_due(plan: Mapping[str, Any], host: Mapping[str, Any], serve: Mapping[str, Any]) -> list[str]:
    """Why the serve role must run its changes on this host, one line each; [] where the host is as planned.

    `plan` is refdeploy_plan, `host` refdeploy_host (library/refdeploy_host_readings.py host_state), `serve` the
    role's settings: launch (serve_launch), force_replace (serve_force_replace), rendered_path and
    rendered_sha256 (the spec file as serve writes it: the role renders its text, the one place)."""
    if not serve.get("launch", True):
        return ["serve_launch is false: the container is rendered, not started"]
    launch = plan.get("launch") or {}
    spec = launch.get("spec")
    if not spec:
        return ["the plan has no container for this host"]
    due: list[str] = []
    due += _model(plan, host)
    due += _containers(plan, host, spec, bool(serve.get("force_replace")))
    rendered = (host.get("files") or {}).get(str(serve.get("rendered_path")))
    if rendered != {"sha256": serve.get("rendered_sha256"), "mode": "0600", "uid": 0, "gid": 0}:
        due.append(f"the rendered spec {serve.get('rendered_path')} is not as this deploy writes it")
    due += _files(plan, host)
    due += _sidecar(plan, host, spec)
    due += _front_door(plan, host, str(spec["name"]))
    return due


def _model(plan: Mapping[str, Any], host: Mapping[str, Any]) -> list[str]:
    action = plan.get("model_action")
    if action == "staged":
        return []
    path = ((plan.get("launch") or {}).get("model") or {}).get("host_path")
    if action == "generated":
        drift = (host.get("trees") or {}).get(path, None)
        return [] if drift == [] else [f"the generated model at {path} is not all root's and read-only: {drift}"]
    return [f"the model at {path} is {action}"]


def _containers(plan: Mapping[str, Any], host: Mapping[str, Any], spec: Mapping[str, Any], force: bool) -> list[str]:
    name = str(spec["name"])
    found = {str(c.get("Name", "")).lstrip("/"): c for c in host.get("containers") or [] if isinstance(c, Mapping)}
    c = found.get(name)
    due: list[str] = []
    if f"{name}-previous" in found:
        due.append(f"{name}-previous exists: an earlier deploy was interrupted")
    state = running_state(c, spec)
    if not state["planned"]:
        return [*due, f"{name}: {state['why']}"]
    if force:
        due.append(f"{name}: serve_force_replace is set")
    drift = limit_drift(spec, c, (plan.get("gpu") or {}).get("slice"), True)
    if drift["lines"] or drift["refuse"] or drift["replace_why"]:
        due.append(f"{name}: {describe_drift(drift)}")
    return due


def _dir_is(host: Mapping[str, Any], path: str | None, mode: str, uid: int, gid: int) -> bool:
    return (host.get("dirs") or {}).get(path) == {"mode": mode, "uid": uid, "gid": gid}


def _files(plan: Mapping[str, Any], host: Mapping[str, Any]) -> list[str]:
    """The secrets' copies, the socket's group and directories, the compile caches', the profiler's and the rank
    trace's directories (serve's tasks/main.yml, in its order)."""
    api = plan.get("api") or {}
    paths = host.get("paths") or {}
    runtime_uid = int((plan.get("bench") or {}).get("runtime_uid", -1))
    due: list[str] = []
    if api.get("key_file") is not None or paths.get(api.get("key_copy"), "file") != "missing":
        due.append("the API key's copy is checked against the key file (its contents are not read with the plan)")
    if api.get("hf_token_file") is not None or paths.get(api.get("hf_token_copy"), "file") != "missing":
        due.append("the Hugging Face token's copy is checked against the token file")
    if plan.get("profiler") is not None:
        due.append("the profiler's trace directory is provided")
    if plan.get("rank_trace_dir") is not None:
        due.append("the rank trace's directories are provided")
    group, gid = api.get("socket_group"), api.get("socket_gid")
    if (host.get("groups") or {}).get(group) != gid:
        due.append(f"the group {group} (gid {gid}) is not on the host as planned")
    if not _dir_is(host, API_SOCKET_DIR, SOCKET_PARENT_MODE, 0, 0):
        due.append(f"{API_SOCKET_DIR} is not root's {SOCKET_PARENT_MODE}")
    if not _dir_is(host, api.get("socket_dir"), SOCKET_DIR_MODE, runtime_uid, int(gid if gid is not None else -1)):
        due.append(f"vLLM's socket directory {api.get('socket_dir')} is not as planned")
    cache = plan.get("compile_cache_dir")
    if cache is not None and not _dir_is(host, cache, CACHE_DIR_MODE, runtime_uid, int(api.get("key_gid", -1))):
        due.append(f"the compile caches' directory {cache} is not as planned")
    return due


def _sidecar(plan: Mapping[str, Any], host: Mapping[str, Any], spec: Mapping[str, Any]) -> list[str]:
    name = str(spec["name"])
    found = {str(c.get("Name", "")).lstrip("/"): c for c in host.get("containers") or [] if isinstance(c, Mapping)}
    side, side_spec = found.get(f"{name}-samplers"), plan.get("sidecar_spec")
    if side_spec is None:
        return [f"{name}-samplers runs and the plan has none"] if side else []
    target = str((found.get(name) or {}).get("Id") or "")
    state = running_state(side, side_spec, target)
    due = [] if state["planned"] else [f"{name}-samplers: {state['why']}"]
    if (host.get("paths") or {}).get(side_spec.get("host_dir")) != "directory":
        due.append(f"the sidecar's directory {side_spec.get('host_dir')} is missing")
    return due


def _front_door(plan: Mapping[str, Any], host: Mapping[str, Any], name: str) -> list[str]:
    if plan.get("front_door") is not None:
        return ["the front door is checked end to end"]
    front = f"{name}-front"
    if any(str(c.get("Name", "")).lstrip("/") == front for c in host.get("containers") or [] if isinstance(c, Mapping)):
        return [f"{front} runs and the plan has no front door"]
    paths = host.get("paths") or {}
    key_dir = str((plan.get("api") or {}).get("key_copy", "")).rsplit("/", 1)[0]
    left = [p for p in (f"{key_dir}/{front}", f"{key_dir}/{front}.auth-header") if paths.get(p, "file") != "missing"]
    return [f"the front door's files are left: {', '.join(left)}"] if left else []
