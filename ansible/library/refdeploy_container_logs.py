#!/usr/bin/python
"""Ansible module refdeploy_container_logs: a container's last log lines and the errors in its log.

  - name: Read the failed container's errors and last lines
    refdeploy_container_logs:
      container: refdeploy-vllm
      tail: 40
      timeout_s: 60
    register: logs          # logs.tail: the last 40 lines; logs.errors: up to 8 distinct `...Error: ...` lines

`errors` are the distinct lines of the whole log that carry a Python exception (`ValueError: ...`,
`RuntimeError: ...`), without the logger's prefix, the last 8 in order: what a failed start says went wrong,
above its traceback. A container that is gone gives empty lists and `missing: true`, not a failure.
"""

from __future__ import annotations

import re
import subprocess

from ansible.module_utils.basic import AnsibleModule

ERROR = re.compile(r"[A-Za-z]*(Error|Exception): ")
LOGGER_PREFIX = re.compile(r"^.*\] ")
KEEP_ERRORS = 8


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "container": {"type": "str", "required": True},
            "tail": {"type": "int", "default": 40},
            "timeout_s": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    name, tail, timeout_s = module.params["container"], module.params["tail"], module.params["timeout_s"]
    try:
        cp = subprocess.run(
            ["docker", "logs", name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        module.fail_json(msg=f"`docker logs {name}` did not finish within {timeout_s} s")
    lines = cp.stdout.decode(errors="replace").splitlines()
    if cp.returncode != 0:
        module.exit_json(changed=False, missing=True, tail=lines[-tail:] if tail > 0 else [], errors=[])
    seen: dict[str, None] = {}
    for line in lines:
        if ERROR.search(line):
            seen.setdefault(LOGGER_PREFIX.sub("", line, count=1), None)
    last = lines[-tail:] if tail > 0 else []
    module.exit_json(changed=False, missing=False, tail=last, errors=list(seen)[-KEEP_ERRORS:])


if __name__ == "__main__":
    main()
