"""Action plugin refdeploy_cutshort: index a capture that did not finish, on the controller
(probes/capture/cutshort.py).

  - name: Index what a capture cut short had written
    refdeploy_cutshort:
      bundle: runs/<host>/<id>/capture
      exit_code: 137
      why: "refdeploy-vllm died or was replaced in the window: ..."
      serving_change: {...}          # serving.evidence.continuity's, written beside the bundle
    register: indexed                # indexed.summary_lines: what the bundle's summary.txt says

The bundle's bundle.json (complete: false) and summary.txt list, per part, the files the capture had written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("bundle", "exit_code", "why", "serving_change"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        from probes.capture import cutshort

        result: dict[str, Any] = super().run(tmp, task_vars or {})
        bundle = Path(str(self._task.args["bundle"]))
        try:
            cutshort.write(
                bundle,
                int(self._task.args["exit_code"]),
                str(self._task.args["why"]),
                self._task.args.get("serving_change") or None,
            )
        except (OSError, ValueError) as e:
            result.update(failed=True, msg=f"could not index the capture kept in {bundle}: {e}")
            return result
        result.update(changed=False, summary_lines=(bundle / "summary.txt").read_text().splitlines())
        return result
