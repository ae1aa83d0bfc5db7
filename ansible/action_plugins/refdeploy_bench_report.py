"""Action plugin refdeploy_bench_report: a fetched bench's summary, report.txt and report.html, on the controller
(serving/bench/report.py report_bench), and whether the bench completed; then its diagnosis (serving/diagnose/:
diagnosis.txt and diagnosis.json beside the report, its top findings among the lines shown).

  - name: Write the report
    refdeploy_bench_report:
      bench_dir: "{{ controller_dir }}/bench"
      host: "{{ inventory_hostname }}"
      client_rc: "{{ client.rc }}"
      timeout_s: 900
      change: "{{ serving_change }}"     # serving.evidence.continuity's, for the window
      memory_log: [lines]                # optional: the engine log's refdeploy-memory-phase lines after it
    register: report                     # report.lines: to show; report.ok; report.line: why not

It never fails the task itself: the playbook shows the report first, then stops on `line`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("bench_dir", "host", "client_rc", "timeout_s", "change", "cgroup", "memory_log"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        from serving.bench.report import report_bench
        from serving.diagnose.engine import after_run

        result: dict[str, Any] = super().run(tmp, task_vars or {})
        args = dict(self._task.args)
        bench_dir = Path(str(args.pop("bench_dir")))
        # The seed's method on what the bench wrote (serving/diagnose/): diagnosis.txt beside report.txt, its top
        # findings after the report's lines, and report.html opening with them (made before the page is drawn).
        diagnosis: list[str] = []

        def lead(d: Path) -> str:
            lines, html = after_run(d)
            diagnosis.extend(lines)
            return html

        result.update(report_bench(bench_dir, args, lead), changed=False)
        result["lines"] = list(result.get("lines") or []) + diagnosis
        return result
