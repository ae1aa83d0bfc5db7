"""Action plugin refdeploy_check_vars: every role variable that is set, checked against its role's argument spec in
one line before any role's own check prints the whole spec (serving/bridge/role_vars.py). It changes nothing.

  - name: Check the role variables
    refdeploy_check_vars:
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset()

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        from serving.bridge.role_vars import check, role_options

        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        options = role_options()
        values: dict[str, Any] = {}
        for name in options:
            if name not in task_vars:
                continue
            try:
                values[name] = self._templar.template(task_vars[name])
            except Exception:  # one that does not render is the role's to name, as Ansible does
                continue
        line = check(values, options)
        if line:
            return {**result, "failed": True, "msg": line}
        result.update(changed=False, checked=sorted(values))
        return result
