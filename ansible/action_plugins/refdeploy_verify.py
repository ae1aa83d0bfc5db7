"""Action plugin refdeploy_verify: compare what runs on a host with a reference manifest (serving/record/verify.py).

  - name: Compare with the reference
    refdeploy_verify:
      reference: runs/localhost/20261203T061211Z/manifest.json
      runs_dir: "{{ playbook_dir }}/../runs"
      raw: {host: ..., plan: ..., container_inspect: ..., ...}   # the readings the manifest role gives the manifest
    register: _verify        # .lines: one per difference, then the summary; .must_match; .path: verify.json

In-process on the controller, as refdeploy_manifest builds the deploy's manifest: the current manifest is built
with the same code from the same readings (and the controller's checkout, read here), compared with the
reference, and written with the comparison to runs/<host>/<timestamp>/ (verify.json, current-manifest.json).
Every difference is printed as it is, one line each, must-match first, under a line naming the host (through
Ansible's display, as refdeploy_watch prints: a debug task's YAML would fold them). It never fails on a
difference: the playbook fails the host on a must-match one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("reference", "runs_dir", "raw"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        from serving.errors import InputError
        from serving.record.manifest import repo_state
        from serving.record.verify import verify_host

        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        raw = {**dict(self._task.args["raw"]), "repo": repo_state(Path(str(task_vars["playbook_dir"])).parent)}
        try:
            got = verify_host(raw, Path(str(self._task.args["reference"])), Path(str(self._task.args["runs_dir"])))
        except InputError as e:
            raise AnsibleActionFail(str(e)) from None
        host = str(task_vars.get("inventory_hostname", ""))
        display.display("\n".join([f"verify {host}: every difference from the reference", *got["lines"]]))
        return {**result, "changed": False, **got}
