"""Action plugin refdeploy_manifest: write and verify a deploy's manifest on the controller
(serving/record/manifest.py).

  - name: Write and verify the manifest
    refdeploy_manifest:
      runs_dir: "{{ manifest_runs_dir }}"
      raw: {host: ..., plan: ..., container_inspect: ..., ...}   # what the manifest role read
    register: _manifest_build      # .path: runs/<host>/<id>/manifest.json

In-process: the readings never pass through argv or a shell. The controller's own checkout (the playbook's
repository: its commit and whether the tree was dirty) is read here, on the controller. The raw readings and
the manifest are written (redacted) whatever they say; when the container differs from the plan the task fails
with the one line that says how, after writing them, so the evidence is there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("runs_dir", "raw"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        from serving.record.manifest import record_deploy, repo_state

        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        raw = {**dict(self._task.args["raw"]), "repo": repo_state(Path(str(task_vars["playbook_dir"])).parent)}
        recorded = record_deploy(raw, Path(str(self._task.args["runs_dir"])))
        result.update(changed=False, path=recorded["path"], run_id=recorded["run_id"])
        if recorded["error"]:
            result.update(failed=True, msg=recorded["error"])
        return result
