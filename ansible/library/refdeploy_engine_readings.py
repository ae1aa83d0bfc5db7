#!/usr/bin/python
"""Ansible module refdeploy_engine_readings: wait for the engine to answer /health, then read what it resolved
at start-up, on the managed host.

  - name: Wait for the engine, then read its start-up lines and metrics
    refdeploy_engine_readings:
      container: refdeploy-vllm
      socket: /run/refdeploy/api/vllm.sock  # vLLM's unix socket inside the container, read from there
      kept_dir: /var/lib/refdeploy/effective
      timeout_s: 60                   # each docker call
      health_timeout_s: 300           # how long the engine has to answer /health
      interval_s: 1
      restarts: 0                     # the restart count it has now: one more means it crashed meanwhile
      read: true                      # false: only wait (a rollback's restored container)
      inside_script: "{{ lookup('ansible.builtin.file', 'serving/standalone/inside_readings.py') }}"   # optional
      inside_args: [/models/tiny]
    register: readings                # .healthy, .health_state, .healthy_utc; .id, .log, .kept, .metrics;
                                      # with inside_script, .container_readings: see below

The wait: each poll reads the container's state and restart count from Docker and asks /health from inside
the container (curl is in the image); it ends on HTTP 200, and at once when the container stopped or restarted
(a crash under a restart policy shows only as a restart count). An engine that does not answer is not a module
failure: `healthy` is false and `health_state` ("state running, restarts 0, /health HTTP 000") says what was
seen, for the role's own message. Docker's own healthcheck (every 5 s) is for `docker ps`; polling every second
here saves its latency. One module run for the wait and the readings: on a converged host they are most of the
deploy's time on the host.

The readings, once healthy: the container's ID, the start-up lines still in its log (`Initializing a V1 LLM
engine`, `Starting vLLM server on`), the lines kept under <kept_dir>/<ID>.startup when it was verified at
launch (Docker's log rotation drops the start-up lines of a long-running engine), and /metrics fetched from
inside the container. With inside_script, also the running container as the manifest records it and placement
checks it (`container_readings`): `docker container inspect` of it, `docker image inspect` of its image ID, and
the script's stdout run as `python3 -c` inside it, parsed as JSON (the script is an argument, never part of a
shell string), and `host_limits`, what only the host sees of it: the limits at every cgroup level from its own to
the root, and each of its threads' affinity (module_utils/refdeploy_cgroups.py; null where its PID 1 is not in this
host's /proc). It was a module run of its own (refdeploy_container_readings) on the same container just after
this one: each module run costs a Python start on the host. Each docker call is an argv with its own timeout;
a failure is the module's one-line `msg`. It runs on the host (Ansible ships it there), so it imports nothing
of the project: the decisions stay in serving/record/effective.py and serving/plan/plan.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.refdeploy_cgroups import read_limits

STARTUP = re.compile(r"Initializing a V1 LLM engine|Starting vLLM server on")
MEMORY_PHASE = "refdeploy-memory-phase"  # serving/record/memory_phases.py


def _run(argv: list[str], timeout_s: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)


def _startup_lines(name: str, started: str, timeout_s: int) -> list[str]:
    """The start-up lines of the engine's current start (the log since State.StartedAt: a container Docker
    restarted keeps the lines of its earlier starts), read until both are seen: they come in its first few
    hundred lines, and the whole log of a long-running engine is not read. The workers' memory-by-phase rows
    logged before the server started (patch 0003: weights loaded ... warmed up) come after them, in log order."""
    found: dict[str, str] = {}
    memory: list[str] = []
    with subprocess.Popen(
        ["timeout", str(timeout_s), "docker", "logs", "--since", started, name],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if MEMORY_PHASE in line:
                memory.append(line.rstrip("\n"))
                continue
            m = STARTUP.search(line)
            if m:
                found[m.group(0)] = line.rstrip("\n")
                if len(found) == 2:
                    break
        proc.kill()
    if not any("Initializing" in ln for ln in found.values()):
        # The start's lines were rotated away: what is left (memory rows the workers log while serving) is not
        # them, and the copy kept when the start was verified stands in for them all.
        return []
    return sorted(found.values(), key=lambda ln: 0 if "Initializing" in ln else 1) + memory


def _health(name: str, socket: str, timeout_s: int) -> tuple[str, int, str, list[str]]:
    """(state, restart count, /health HTTP code, [ID, StartedAt]) of the container now; state "gone" when Docker
    has no such container, code "000" when the engine did not answer."""
    fmt = "{{.State.Status}} {{.RestartCount}} {{.Id}} {{.State.StartedAt}}"
    state = _run(["docker", "inspect", "--format", fmt, name], timeout_s)
    if state.returncode != 0:
        return "gone", 0, "000", []
    status, restarts, *started = state.stdout.split()
    code = _run(["docker", "exec", name, "curl", "-s", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}",
                 "--unix-socket", socket, "http://localhost/health"], timeout_s)  # fmt: skip
    return status, int(restarts), (code.stdout.strip() or "000") if code.returncode == 0 else "000", started


def wait_healthy(name: str, socket: str, restarts: int, health_timeout_s: int, interval_s: float,
                 timeout_s: int) -> tuple[dict[str, object], list[str]]:  # fmt: skip
    """Poll until /health answers 200, the container stops or restarts, or health_timeout_s passes."""
    deadline = time.monotonic() + health_timeout_s
    while True:
        status, now_restarts, code, started = _health(name, socket, timeout_s)
        done = status != "running" or now_restarts > restarts or code == "200"
        if done or time.monotonic() >= deadline:
            break
        time.sleep(interval_s)
    healthy = status == "running" and now_restarts <= restarts and code == "200"
    said = {
        "healthy": healthy,
        "health_state": f"state {status}, restarts {now_restarts}, /health HTTP {code}",
        "healthy_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") if healthy else None,
    }
    return said, started


class ReadError(Exception):
    pass


def _docker(argv: list[str], timeout_s: int) -> str:
    cp = _run(["docker", *argv], timeout_s)
    if cp.returncode != 0:
        said = (cp.stderr.strip().splitlines() or ["no output"])[-1]
        raise ReadError(f"`docker {' '.join(argv[:3])}` failed (exit {cp.returncode}): {said}")
    return cp.stdout


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise ReadError(f"{what}: not JSON: {text[:200]!r}") from None


def _one(text: str, what: str) -> dict[str, Any]:
    found = _json(text, what)
    if not isinstance(found, list) or len(found) != 1 or not isinstance(found[0], dict):
        raise ReadError(f"{what}: expected one object, got {text[:200]!r}")
    return dict(found[0])


def container_readings(name: str, script: str, args: list[str], timeout_s: int) -> dict[str, Any]:
    """The container's inspection, its image's, and what the script prints inside it (JSON)."""
    container = _one(_docker(["container", "inspect", name], timeout_s), f"inspecting {name}")
    image_id = str(container.get("Image") or "")
    # The image's inspection beside the script's run inside the container.
    with ThreadPoolExecutor(max_workers=1) as pool:
        got_image = pool.submit(_docker, ["image", "inspect", image_id], timeout_s)
        out = _docker(["exec", name, "python3", "-c", script, *args], timeout_s)
        image = _one(got_image.result(), f"inspecting {image_id}")
    inside = _json(out, f"the readings inside {name}")
    # What only the host sees: the limits at every cgroup level above the container, and each thread's affinity.
    pid = (container.get("State") or {}).get("Pid")
    cid = container.get("Id")
    limits = read_limits(pid, cid) if isinstance(pid, int) and pid > 0 and isinstance(cid, str) else None
    return {"container": container, "image": image, "inside": inside, "host_limits": limits}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "container": {"type": "str", "required": True},
            "socket": {"type": "str", "required": True},
            "kept_dir": {"type": "path", "required": True},
            "timeout_s": {"type": "int", "default": 60},
            "health_timeout_s": {"type": "int", "default": 300},
            "interval_s": {"type": "float", "default": 1.0},
            "restarts": {"type": "int", "default": 0},
            "read": {"type": "bool", "default": True},
            "inside_script": {"type": "str"},
            "inside_args": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    name, socket, timeout_s = module.params["container"], module.params["socket"], module.params["timeout_s"]
    try:
        health, seen = wait_healthy(name, socket, module.params["restarts"], module.params["health_timeout_s"],
                                    module.params["interval_s"], timeout_s)  # fmt: skip
        if not (health["healthy"] and module.params["read"]):
            module.exit_json(changed=False, **health)
        cid, started = seen
        kept_file = Path(module.params["kept_dir"]) / f"{cid}.startup"
        kept = kept_file.read_text() if kept_file.is_file() else ""
        script = module.params["inside_script"]
        # The log, /metrics and the container's readings do not depend on each other: each is a docker CLI
        # call or two waiting on Docker Engine and the container (~0.1-0.2 s each here), so they run side by side.
        metrics_argv = ["exec", name, "curl", "-fsS", "-m", "10", "--unix-socket", socket, "http://localhost/metrics"]
        with ThreadPoolExecutor(max_workers=3) as pool:
            got_lines = pool.submit(_startup_lines, name, started, timeout_s)
            got_metrics = pool.submit(_docker, metrics_argv, timeout_s)
            got_more = (
                pool.submit(container_readings, name, script, module.params["inside_args"], timeout_s)
                if script
                else None
            )
            lines, metrics = got_lines.result(), got_metrics.result()
            more = {"container_readings": got_more.result()} if got_more is not None else {}
    except subprocess.TimeoutExpired as e:
        module.fail_json(msg=f"`{' '.join(map(str, e.cmd))}` did not finish within {timeout_s} s")
    except ReadError as e:
        module.fail_json(msg=str(e))
    module.exit_json(
        changed=False,
        **health,
        id=cid,
        log="".join(f"{ln}\n" for ln in lines),
        kept=kept,
        metrics=metrics,
        **more,
    )


if __name__ == "__main__":
    main()
