"""Action plugin refdeploy_print: a report's lines, printed as they are by callback_plugins/refdeploy_print.py.

  - name: Bench | Print the report
    refdeploy_print:
      lines: "{{ _bench_report.lines }}"

A debug task prints its message as Ansible's result dump (YAML here: a list, long lines folded, quotes doubled),
which an SRE cannot paste into an incident as it is. This action only hands the lines on (result key
refdeploy_report); the callback writes them as plain text, one per line. Nothing runs on the host.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("lines",))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars or {})
        lines = self._task.args.get("lines")
        if isinstance(lines, str):
            lines = lines.splitlines()
        if not isinstance(lines, list):
            raise AnsibleActionFail(f"refdeploy_print: lines must be a list of strings, got {str(lines)[:200]}")
        return {**result, "changed": False, "refdeploy_report": [str(line) for line in lines]}
