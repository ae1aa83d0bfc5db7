"""The engine's wait and readings on the managed host: what refdeploy_engine_readings runs after a launch, and
what the plan's read (library/refdeploy_host_readings.py) runs beforehand for the container a converged deploy
keeps (its `engine` option): ansible/library/refdeploy_engine_readings.py says what it reads and returns.
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


def engine_readings(
    name: str, socket: str, kept_dir: str, timeout_s: int, health_timeout_s: int, interval_s: float, restarts: int,
    read: bool, script: str | None, inside_args: list[str],
) -> dict[str, Any]:  # fmt: skip
    """The module's result: the wait's verdict, and once healthy (and `read`) the readings. Raises ReadError, or
    subprocess.TimeoutExpired for a docker call that did not finish within timeout_s."""
    health, seen = wait_healthy(name, socket, restarts, health_timeout_s, interval_s, timeout_s)
    if not (health["healthy"] and read):
        return health
    cid, started = seen
    kept_file = Path(kept_dir) / f"{cid}.startup"
    kept = kept_file.read_text() if kept_file.is_file() else ""
    # The log, /metrics and the container's readings do not depend on each other: each is a docker CLI
    # call or two waiting on Docker Engine and the container (~0.1-0.2 s each here), so they run side by side.
    metrics_argv = ["exec", name, "curl", "-fsS", "-m", "10", "--unix-socket", socket, "http://localhost/metrics"]
    with ThreadPoolExecutor(max_workers=3) as pool:
        got_lines = pool.submit(_startup_lines, name, started, timeout_s)
        got_metrics = pool.submit(_docker, metrics_argv, timeout_s)
        got_more = pool.submit(container_readings, name, script, inside_args, timeout_s) if script else None
        lines, metrics = got_lines.result(), got_metrics.result()
        more = {"container_readings": got_more.result()} if got_more is not None else {}
    return {**health, "id": cid, "log": "".join(f"{ln}\n" for ln in lines), "kept": kept, "metrics": metrics, **more}
