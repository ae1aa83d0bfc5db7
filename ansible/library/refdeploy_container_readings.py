#!/usr/bin/python
"""Ansible module refdeploy_container_readings: a container as Docker sees it, its image, and what it sees
inside, read on the managed host in one round trip.

  - name: Read the serving container, its image and what it sees inside
    refdeploy_container_readings:
      container: refdeploy-vllm
      script: "{{ lookup('ansible.builtin.file', 'serving/inside_readings.py') }}"   # run as python3 -c inside
      args: [/models/tiny]
      timeout_s: 60
    register: got        # got.container: docker container inspect; got.image: docker image inspect of its
                         # image ID; got.inside: the script's stdout, parsed as JSON

Each docker call is an argv with its own timeout (the script is an argument, never part of a shell string); a
failure is the module's one-line `msg`. Read-only, and it runs in check mode. It imports nothing of the
project: what the readings mean is decided in serving/.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from ansible.module_utils.basic import AnsibleModule


def _docker(module: AnsibleModule, argv: list[str], timeout_s: int) -> str:
    try:
        cp = subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        module.fail_json(msg=f"`docker {' '.join(argv[:3])}` did not finish within {timeout_s} s")
    if cp.returncode != 0:
        said = (cp.stderr.strip().splitlines() or ["no output"])[-1]
        module.fail_json(msg=f"`docker {' '.join(argv[:3])}` failed (exit {cp.returncode}): {said}")
    return cp.stdout


def _one(module: AnsibleModule, text: str, what: str) -> dict[str, Any]:
    try:
        found = json.loads(text)
    except ValueError:
        module.fail_json(msg=f"{what}: not JSON: {text[:200]!r}")
    if not isinstance(found, list) or len(found) != 1 or not isinstance(found[0], dict):
        module.fail_json(msg=f"{what}: expected one object, got {text[:200]!r}")
    return dict(found[0])


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "container": {"type": "str", "required": True},
            "script": {"type": "str", "required": True},
            "args": {"type": "list", "elements": "str", "default": []},
            "timeout_s": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    name, timeout_s = module.params["container"], module.params["timeout_s"]
    container = _one(module, _docker(module, ["container", "inspect", name], timeout_s), f"inspecting {name}")
    image_id = str(container.get("Image") or "")
    image = _one(module, _docker(module, ["image", "inspect", image_id], timeout_s), f"inspecting {image_id}")
    out = _docker(module, ["exec", name, "python3", "-c", module.params["script"], *module.params["args"]], timeout_s)
    try:
        inside = json.loads(out)
    except ValueError:
        module.fail_json(msg=f"the readings inside {name} are not JSON: {out[:200]!r}")
    module.exit_json(changed=False, container=container, image=image, inside=inside)


if __name__ == "__main__":
    main()
