"""Action plugin refdeploy_record: add to the run record (fact refdeploy_run; serving/record/run_record.py), which the
manifest role writes.

  - name: Serve | Add the effective configuration to the run record
    refdeploy_record:
      effective: "{{ serve_effective }}"

Each key belongs to one role (serving/record/run_record.py KEYS); an unknown key fails the task. Controller-side only.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        from serving.record.run_record import RunRecordError, add

        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        try:
            record = add(task_vars.get("refdeploy_run"), dict(self._task.args))
        except RunRecordError as e:
            raise AnsibleActionFail(str(e)) from None
        return {**result, "changed": False, "ansible_facts": {"refdeploy_run": record}}
