#!/usr/bin/python
"""Ansible module refdeploy_engine_readings: what the engine resolved at start-up, read on the managed host.

  - name: Read the engine's start-up lines and metrics
    refdeploy_engine_readings:
      container: refdeploy-vllm
      port: 8000                      # the container's own port, read from inside it
      kept_dir: /var/lib/refdeploy/effective
      timeout_s: 60
    register: readings                # readings.id, .log, .kept, .metrics

Returns the container's ID, the start-up lines still in its log (`Initializing a V1 LLM engine`, `Starting
vLLM server on`), the lines kept under <kept_dir>/<ID>.startup when it was verified at launch (Docker's log
rotation drops the start-up lines of a long-running engine), and /metrics fetched from inside the container.
Each docker call is an argv with its own timeout; a failure is the module's one-line `msg`. It runs on the host
(Ansible ships it there), so it imports nothing of the project: the decisions stay in serving/effective.py.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

STARTUP = re.compile(r"Initializing a V1 LLM engine|Starting vLLM server on")


def _run(argv: list[str], timeout_s: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)


def _startup_lines(name: str, started: str, timeout_s: int) -> list[str]:
    """The start-up lines of the engine's current start (the log since State.StartedAt: a container Docker
    restarted keeps the lines of its earlier starts), read until both are seen: they come in its first few
    hundred lines, and the whole log of a long-running engine is not read."""
    found: dict[str, str] = {}
    with subprocess.Popen(
        ["timeout", str(timeout_s), "docker", "logs", "--since", started, name],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = STARTUP.search(line)
            if m:
                found[m.group(0)] = line.rstrip("\n")
                if len(found) == 2:
                    break
        proc.kill()
    return sorted(found.values(), key=lambda ln: 0 if "Initializing" in ln else 1)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "container": {"type": "str", "required": True},
            "port": {"type": "int", "required": True},
            "kept_dir": {"type": "path", "required": True},
            "timeout_s": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    name, port, timeout_s = module.params["container"], module.params["port"], module.params["timeout_s"]
    try:
        inspected = _run(["docker", "inspect", "--format", "{{.Id}} {{.State.StartedAt}}", name], timeout_s)
        if inspected.returncode != 0:
            module.fail_json(msg=f"docker inspect {name}: {inspected.stderr.strip() or 'failed'}")
        cid, started = inspected.stdout.split()
        lines = _startup_lines(name, started, timeout_s)
        kept_file = Path(module.params["kept_dir"]) / f"{cid}.startup"
        kept = kept_file.read_text() if kept_file.is_file() else ""
        url = f"http://127.0.0.1:{port}/metrics"
        metrics = _run(["docker", "exec", name, "curl", "-fsS", "-m", "10", url], timeout_s)
        if metrics.returncode != 0:
            module.fail_json(
                msg=f"GET /metrics inside {name} failed (exit {metrics.returncode}): "
                + (metrics.stderr.strip().splitlines() or ["no output"])[-1]
            )
    except subprocess.TimeoutExpired as e:
        module.fail_json(msg=f"`{' '.join(map(str, e.cmd))}` did not finish within {timeout_s} s")
    module.exit_json(changed=False, id=cid, log="".join(f"{ln}\n" for ln in lines), kept=kept, metrics=metrics.stdout)


if __name__ == "__main__":
    main()
