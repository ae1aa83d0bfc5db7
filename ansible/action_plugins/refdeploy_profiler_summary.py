"""Action plugin refdeploy_profiler_summary: the fetched torch profiler traces of `make profile`, summarised per
rank on the controller (serving/evidence/profiler_summary.py): summary.txt and summary.json beside them; and trace.json,
every rank's trace and the profiled requests moved onto CLOCK_MONOTONIC in one file
(serving/evidence/profiler_trace.py).

  - name: Summarise every rank's trace
    refdeploy_profiler_summary:
      directory: runs/<host>/<id>/profile
    register: s                            # s.lines: summary.txt's lines; s.trace: the merged trace

Fails with one line where no trace was fetched or one cannot be read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("directory",))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        from serving.errors import InputError
        from serving.evidence.profiler_summary import write_summary
        from serving.evidence.profiler_trace import write_trace

        result: dict[str, Any] = super().run(tmp, task_vars or {})
        directory = Path(str(self._task.args["directory"]))
        try:
            text = write_summary(directory)
            trace = write_trace(directory)
        except (OSError, InputError) as e:
            result.update(failed=True, msg=f"could not summarise the profile in {directory}: {e}")
            return result
        result.update(changed=False, lines=text.splitlines(), path=str(directory / "summary.txt"), trace=str(trace))
        return result
