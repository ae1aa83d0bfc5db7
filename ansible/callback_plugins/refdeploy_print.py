"""Callback plugin refdeploy_print: the reports of refdeploy_print tasks (make bench, capture, probe-io, profile,
validate, verify) as plain text, where the task ran, under a line naming the host.

The stdout callback prints such a task as "ok: [host]" only (its result has no msg); the lines come here, as the
report files on disk hold them, so what the operator reads is what they can paste.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.callback import CallbackBase
from ansible.utils.display import Display

DOCUMENTATION = """
name: refdeploy_print
type: aggregate
short_description: reports printed as plain text
description: Prints the lines a refdeploy_print task handed on, one per line, under the host's name.
requirements: []
"""

display = Display()


class CallbackModule(CallbackBase):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "refdeploy_print"
    CALLBACK_NEEDS_ENABLED = True

    def v2_runner_on_ok(self, result: Any) -> None:
        if result._task.action not in ("refdeploy_print",):
            return
        lines = result._result.get("refdeploy_report") or []
        display.display("\n".join([f"--- {result._host.get_name()} ---", *map(str, lines)]))
