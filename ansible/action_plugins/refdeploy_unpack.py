"""Action plugin refdeploy_unpack: a fetched archive unpacked on the controller under its own name, with records
beside it (serving/fetched.py), in-process.

  - name: Unpack the bundle and record the serving container on the controller
    refdeploy_unpack:
      archive: runs/<host>/<id>/capture.tar.gz    # may be missing: nothing was fetched
      dest: runs/<host>/<id>
      top: bundle                                  # the archive's top-level directory
      name: capture                                # what it is called in dest
      records: {serving-container.json: "{{ change }}"}
    register: got                                  # got.path

Fails with one line where the archive cannot be unpacked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("archive", "dest", "top", "name", "records"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        from serving.fetched import UnpackError, unpack

        result: dict[str, Any] = super().run(tmp, task_vars or {})
        args = self._task.args
        archive = Path(str(args["archive"])) if args.get("archive") else None
        try:
            path = unpack(archive, Path(str(args["dest"])), str(args["top"]), str(args["name"]),
                          dict(args.get("records") or {}))  # fmt: skip
        except (OSError, UnpackError) as e:
            result.update(failed=True, msg=f"could not unpack what was fetched: {e}")
            return result
        result.update(changed=False, path=str(path))
        return result
