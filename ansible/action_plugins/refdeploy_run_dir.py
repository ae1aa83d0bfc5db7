"""Action plugin refdeploy_run_dir: create this run's directory on the controller (serving/record/manifest.py), or
remove it again when the run is refused before it wrote anything.

  - name: Create the run directory
    refdeploy_run_dir:
      runs_dir: "{{ bench_runs_dir }}"
    register: _run          # _run.path: runs/<host>/<id>, _run.run_id: <id>

  - name: Remove the run directory of a refused run
    refdeploy_run_dir:
      runs_dir: "{{ bench_runs_dir }}"
      discard: "{{ _run.path }}"
    when: <the refusals that follow>    # _run.removed: whether it was (only while empty)

The one way a playbook gets a run directory: runs/<inventory host>/<UTC timestamp>, created 0700 (a run holds
the host's readings), with a suffix (-1, -2...) when another run took that second. It is created in check mode
too: it is the controller's record of the run, not a change to the host. A run id is needed before the run's
settings are judged (the plans name the host's scratch directory after it), so a refused run's directory is made,
then discarded: only that run's own directory, and only while empty (serving/record/manifest.py discard_run_dir).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("runs_dir", "discard"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        from serving.errors import InputError
        from serving.record.manifest import discard_run_dir, new_run_dir

        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        runs_dir, host = Path(str(self._task.args["runs_dir"])), str(task_vars["inventory_hostname"])
        if self._task.args.get("discard"):
            try:
                removed = discard_run_dir(runs_dir, host, Path(str(self._task.args["discard"])))
            except InputError as e:
                return {**result, "failed": True, "msg": str(e)}
            result.update(changed=False, removed=removed)
            return result
        path = new_run_dir(runs_dir, host)
        result.update(changed=False, path=str(path), run_id=path.name)
        # The run's wrapper (serving/bridge/play.py) names what a run that ended early wrote, from this list.
        listing = os.environ.get("REFDEPLOY_RUN_DIRS_FILE")
        if listing:
            with Path(listing).open("a", encoding="utf-8") as f:
                f.write(f"{path}\n")
        return result
