"""Action plugin refdeploy_capture_report: a fetched capture bundle's timeline.html, drawn on the controller
(serving/capture_report.py write_page) from its timeline.json: the probe image carries no plotting library; and
its trace.json (serving/capture_trace.py), the bundle as one Chrome/Perfetto trace.

  - name: Draw the timeline page
    refdeploy_capture_report:
      bundle: runs/<host>/<id>/capture
    register: page                       # page.path: the page written; page.trace: the trace

Fails with one line where timeline.json cannot be drawn (missing, not JSON, not schema 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("bundle",))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        from probes.report_input import ReportInputError
        from serving.capture_report import write_page
        from serving.capture_trace import write_trace

        result: dict[str, Any] = super().run(tmp, task_vars or {})
        bundle = Path(str(self._task.args["bundle"]))
        try:
            path = write_page(bundle)
            trace = write_trace(bundle)
        except (OSError, ReportInputError) as e:
            result.update(failed=True, msg=f"could not draw the timeline page or the trace of {bundle}: {e}")
            return result
        result.update(changed=False, path=str(path), trace=str(trace))
        return result
