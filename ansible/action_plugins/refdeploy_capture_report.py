"""Action plugin refdeploy_capture_report: a fetched capture bundle's timeline.html, drawn on the controller
(serving/evidence/capture_report.py write_page) from its timeline.json: the probe image carries no plotting library; and
its trace.json (serving/evidence/capture_trace.py), the bundle as one Chrome/Perfetto trace. First, where the play read
the engine log's memory rows (patch 0003), memory-phases.json: those rows and each rank's memory at decode in
the window (serving/record/memory_phases.py), which the trace draws too.

  - name: Draw the timeline page
    refdeploy_capture_report:
      bundle: runs/<host>/<id>/capture
      memory_log: [lines]                # optional: the engine log's refdeploy-memory-phase lines
    register: page                       # page.path: the page written; page.trace: the trace;
                                         # page.memory_lines: a line per rank, its memory at decode;
                                         # page.diagnosis_lines: its diagnosis (serving/diagnose/), in brief;
                                         # page.rank_lines: a line per rank of its rank trace (patch 0004), with
                                         # the model runner that rank ran

Fails with one line where timeline.json cannot be drawn (missing, not JSON, not schema 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("bundle", "memory_log"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        from probes.capture.report_input import ReportInputError
        from probes.readers.rank_steps import RANKS_DIR
        from serving.diagnose.engine import after_run
        from serving.evidence.capture_report import write_page
        from serving.evidence.capture_trace import write_trace
        from serving.evidence.rank_trace import summary_lines
        from serving.record.memory_phases import write_capture_memory

        result: dict[str, Any] = super().run(tmp, task_vars or {})
        bundle = Path(str(self._task.args["bundle"]))
        memory_lines: list[str] = []
        # A whole capture's diagnosis (make capture), not one probe's (make probe): the method needs every part. It
        # comes first, so that the page is drawn once, opening with its findings.
        diagnosis, lead = after_run(bundle) if bundle.name == "capture" else ([], "")
        try:
            if self._task.args.get("memory_log") is not None:
                memory_lines = write_capture_memory(bundle, [str(x) for x in self._task.args["memory_log"]])
            path = write_page(bundle, lead)
            trace = write_trace(bundle)
            rank_lines = summary_lines(bundle / RANKS_DIR)
        except (OSError, ReportInputError) as e:
            result.update(failed=True, msg=f"could not draw the timeline page or the trace of {bundle}: {e}")
            return result
        result.update(changed=False, path=str(path), trace=str(trace), memory_lines=memory_lines,
                      rank_lines=rank_lines, diagnosis_lines=diagnosis)  # fmt: skip
        return result
