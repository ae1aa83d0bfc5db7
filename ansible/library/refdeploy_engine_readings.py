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
here saves its latency. One module run for the wait and the readings. On a converged host a deploy does not run
it: the plan's read took the same readings of the container it keeps (library/refdeploy_host_readings.py, its
`engine` option; serve's kept.yml), one module run fewer.

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

import subprocess

from ansible.module_utils.basic import AnsibleModule

# The wait and the readings themselves: module_utils/refdeploy_engine_read.py, which the plan's read runs too.
from ansible.module_utils.refdeploy_engine_read import ReadError, engine_readings


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
    p = module.params
    try:
        got = engine_readings(
            p["container"], p["socket"], p["kept_dir"], p["timeout_s"], p["health_timeout_s"], p["interval_s"],
            p["restarts"], p["read"], p["inside_script"], p["inside_args"],
        )  # fmt: skip
    except subprocess.TimeoutExpired as e:
        module.fail_json(msg=f"`{' '.join(map(str, e.cmd))}` did not finish within {p['timeout_s']} s")
    except ReadError as e:
        module.fail_json(msg=str(e))
    module.exit_json(changed=False, **got)


if __name__ == "__main__":
    main()
